"""Scheduling the one-off teardown run the moment capacity is bought.

Hooks and `finally` blocks are best effort (a SIGKILL or a lost host skips them:
docs/prefect.md §2), so the campaign's safety net is a teardown flow run scheduled on the Prefect server
at the lease's hard-teardown time, with an idempotency key so a re-run never schedules a second one.
"""

from __future__ import annotations

from datetime import datetime

from prefect import get_run_logger
from prefect.deployments import run_deployment
from prefect.exceptions import ObjectNotFound

from capserve.core.lease import Lease
from capserve.core.schedule import TeardownSchedule
from capserve.core.spec import CampaignSpec
from capserve.tasks.resilience import orchestrator_task

TEARDOWN_DEPLOYMENT = "teardown/teardown"


def teardown_idempotency_key(campaign_id: str, reservation_id: str) -> str:
    return f"capserve-teardown-{campaign_id}-{reservation_id}"


@orchestrator_task(name="schedule-teardown")
def schedule_teardown(spec: CampaignSpec, lease: Lease, deployment: str = TEARDOWN_DEPLOYMENT) -> TeardownSchedule:
    """Schedule ``deployment`` at the lease's hard-teardown time; say plainly when it could not be."""
    at: datetime = lease.teardown_at(spec.teardown)
    schedule = TeardownSchedule(
        deployment=deployment, scheduled_at=at, note="scheduled", drain_at=lease.drain_at(spec.teardown),
        lease_end=lease.end,
    )
    try:
        run = run_deployment(
            deployment,
            parameters={"spec": spec.model_dump(mode="json"), "region": lease.region, "reason": "drain-deadline"},
            scheduled_time=at,
            idempotency_key=teardown_idempotency_key(spec.campaign_id, lease.reservation_id),
            timeout=0,  # schedule it; do not wait for it
            as_subflow=False,
        )
    except ObjectNotFound:
        get_run_logger().warning(
            "no %s deployment on this Prefect server: teardown at %s is NOT scheduled; register deployments/ "
            "(see README) or run `capserve down` before then",
            deployment,
            at.isoformat(),
        )
        return schedule.model_copy(
            update={"note": f"not scheduled: no deployment {deployment!r} on this Prefect server"}
        )
    return schedule.model_copy(update={"flow_run_id": str(run.id)})  # type: ignore[union-attr]  # sync: a FlowRun
