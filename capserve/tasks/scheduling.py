"""Scheduling the lease's one-off runs on the Prefect server, and reconciling them on every re-run.

Hooks and `finally` blocks are best effort (a SIGKILL or a lost host skips them: docs/prefect.md §2),
so what starts the cluster at the block's start and what drains and tears it down before AWS ends the
block are flow runs scheduled on the Prefect server the moment a lease exists. The decisions (which
runs, when, under which idempotency key, what to cancel) are ``capserve.core.schedule``'s; this module
only reads the campaign's runs by tag and creates or cancels them (docs/prefect.md §11).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from prefect import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName, FlowRunFilterTags
from prefect.client.schemas.objects import FlowRun, StateType
from prefect.context import FlowRunContext
from prefect.exceptions import ObjectNotFound
from prefect.settings import PREFECT_API_URL, temporary_settings
from prefect.states import Cancelled, Scheduled

from capserve.core.lease import Lease
from capserve.core.schedule import (
    SCHEDULED_TAG,
    ExistingRun,
    LeaseSchedule,
    PlannedRun,
    ScheduledStage,
    WindowFacts,
    campaign_tag,
    expected_work,
    planned_runs,
    reconcile,
    schedule_entry,
)
from capserve.core.spec import TeardownSpec
from capserve.tasks.resilience import orchestrator_task
from capserve.tasks.run_log import run_logger
from capserve.tasks.the_clock import clock


@orchestrator_task(name="schedule-lease-runs")
def schedule_lease_runs(
    campaign_id: str,
    lease: Lease,
    teardown: TeardownSpec,
    *,
    bring_up_lead: timedelta = timedelta(0),
    prepare_lead: timedelta | None = None,
    no_longer_needed: Sequence[ScheduledStage] = (),
    fired: Mapping[str, datetime] | None = None,
) -> LeaseSchedule:
    """Make the server hold exactly the runs ``lease`` needs; return them for the report.

    Safe to call on every re-run: runs the server already has (same idempotency key) are kept, those of an
    older lease that have not started are cancelled, missing ones are created.
    """
    planned = planned_runs(campaign_id, lease, teardown, bring_up_lead=bring_up_lead, prepare_lead=prepare_lead)
    # Prefect schedules in wall time; the runs' times are on the campaign's clock, which is told them (and where
    # the runs are expected to work) before they are created, so that each is scheduled to fire at its time.
    clock().plan([run.scheduled_at for run in planned], expected_work(planned, lease.end))
    existing = read_campaign_runs(campaign_id)
    actions = reconcile(planned, existing, no_longer_needed=no_longer_needed)
    for stale in actions.cancel:
        cancel_run(stale.flow_run_id, f"no longer needed by campaign {campaign_id} (lease changed or campaign done)")
    notes: dict[str, str] = {}
    for run in actions.create:
        try:
            create_run(run, clock().wall_time_to_schedule(run.scheduled_at))
        except ObjectNotFound:
            notes[run.idempotency_key] = f"not scheduled: no deployment {run.deployment!r} on this Prefect server"
            run_logger(__name__).warning(
                "no %s deployment on this Prefect server: %s at %s is NOT scheduled; register "
                "them with `capserve deploy` (docs/guide.md) or run `capserve down` before then",
                run.deployment, run.name, run.scheduled_at.isoformat(),
            )
    # Read back: the report shows each run's state as the server has it now (cancelled ones included).
    now_held = {run.idempotency_key: run for run in read_campaign_runs(campaign_id) if run.idempotency_key}
    entries = tuple(
        schedule_entry(
            run, now_held.get(run.idempotency_key), note=notes.get(run.idempotency_key, "not needed"),
            fired_at=(fired or {}).get(run.stage.value),
        )
        for run in planned
    )
    return LeaseSchedule(runs=entries, window=WindowFacts(block_start=lease.start, block_end=lease.end))


def read_campaign_runs(campaign_id: str) -> list[ExistingRun]:
    """Every run scheduled for the campaign (by its tags), whatever its state."""
    tags = FlowRunFilterTags(all_=[campaign_tag(campaign_id), SCHEDULED_TAG])
    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(tags=tags), limit=200)
    return [existing_run(run) for run in runs]


WATCH_TAG = "capserve.io/watch"
"""Tag on a one-off Hub watch asked for a campaign (not ``SCHEDULED_TAG``: ``reconcile`` leaves it alone)."""


HUB_WATCHER = "hub-watcher/hub-watcher"
REAPER = "reaper/reaper"
WALL_CLOCK_WATCHES = (HUB_WATCHER, REAPER)  # the deployments with cron schedules (deployments/prefect.yaml)


def pause_wall_clock_watches(deployments: Sequence[str] = (HUB_WATCHER,), *, api_url: str | None = None) -> None:
    """Turn the cron schedules of ``deployments`` off (the server deletes the future runs they had made). By
    default the ``hub-watcher``'s every 10 minutes: the campaign's watches are due at instants of its clock, which
    need not be the host's, and these runs would take the deployment's one slot from the watches asked for. A
    world that plays no hour of the host's clock (the tests', the fault matrix's) pauses ``WALL_CLOCK_WATCHES``:
    else a watch and a reaper run, each a flow process of its own, start whenever its clock passes a quarter hour.
    ``api_url``: that world's server, when it is not the one the settings name."""
    with temporary_settings({PREFECT_API_URL: api_url}) if api_url else nullcontext(), get_client(
        sync_client=True
    ) as client:
        for name in deployments:
            deployment = client.read_deployment_by_name(name)
            for schedule in client.read_deployment_schedules(deployment.id):
                if schedule.active:
                    client.update_deployment_schedule(deployment.id, schedule.id, active=False)


def schedule_hub_watch(campaign_id: str, regions: Sequence[str], at: datetime, *, reservation_id: str) -> ExistingRun:
    """A one-off run of the ``hub-watcher`` deployment at ``at`` on the campaign's clock, in the block of
    ``reservation_id``; once per campaign, block and time (another block of the campaign at the same instant,
    as `make demo` run again on the same server makes, gets its own: the server would hand back the old run)."""
    return _create(
        HUB_WATCHER, {"regions": list(regions), "waypoint": at.isoformat()}, clock().wall_time_to_schedule(at),
        name=f"hub-watcher-{campaign_id}", tags=[campaign_tag(campaign_id), WATCH_TAG],
        idempotency_key=f"capserve:{campaign_id}:{reservation_id}:watch:{at.isoformat()}",
    )


def read_runs_about(campaign_id: str, *, since: datetime) -> list[ExistingRun]:
    """The campaign's runs a person follows: the scheduled ones, Hub watches and redeploys, expected to start
    at or after ``since`` (wall time; an earlier lease's runs are history)."""
    tagged = FlowRunFilter(tags=FlowRunFilterTags(all_=[campaign_tag(campaign_id)]))
    named = FlowRunFilter(name=FlowRunFilterName(any_=[f"redeploy-{campaign_id}"]))
    followed = {SCHEDULED_TAG, WATCH_TAG}
    with get_client(sync_client=True) as client:
        # Every run of a campaign carries its tag (the campaign run itself and its stage subflows too): only the
        # scheduled runs and the watches are followed here.
        runs = {
            run.id: run for run in client.read_flow_runs(flow_run_filter=tagged, limit=200)
            if followed.intersection(run.tags)
        }
        runs.update({run.id: run for run in client.read_flow_runs(flow_run_filter=named, limit=200)})
    found = [existing_run(run) for run in runs.values()]
    return sorted(
        (run for run in found if run.scheduled_at is None or run.scheduled_at >= since),
        key=lambda run: run.scheduled_at or since,
    )


def create_run(run: PlannedRun, wall_at: datetime) -> ExistingRun:
    """Create ``run`` (or get back the one the server holds under its idempotency key)."""
    return _create(run.deployment, dict(run.parameters), wall_at, name=run.name, tags=list(run.tags),
                   idempotency_key=run.idempotency_key)


def _create(
    deployment_name: str, parameters: dict[str, Any], wall_at: datetime, *, name: str, tags: list[str],
    idempotency_key: str,
) -> ExistingRun:
    with get_client(sync_client=True) as client:
        deployment = client.read_deployment_by_name(deployment_name)
        created = client.create_flow_run_from_deployment(
            deployment.id, parameters=parameters, state=Scheduled(scheduled_time=wall_at), name=name, tags=tags,
            idempotency_key=idempotency_key,
        )
    return existing_run(created)


def cancelled_before_start(flow_run_id: str | None) -> str:
    """Why this run must not act ('' when it may): it was cancelled before a worker started it anyway.

    A worker that had already fetched a scheduled run can start it after a person cancelled it: the run then
    goes Cancelled → Pending → Running (seen on a sandbox service). Its state history still holds the cancel.
    """
    if flow_run_id is None:
        return ""
    with get_client(sync_client=True) as client:
        states = client.read_flow_run_states(UUID(flow_run_id))
    for state in sorted(states, key=lambda s: s.timestamp):
        if state.type in (StateType.CANCELLED, StateType.CANCELLING):
            when = state.timestamp.isoformat(timespec="seconds") if state.timestamp else "earlier"
            return f"this run was cancelled at {when} before it started: it does nothing (start it again to act)"
    return ""


def read_run_state(flow_run_id: str) -> str:
    """The run's state type now (``COMPLETED``, ``SCHEDULED``, …)."""
    with get_client(sync_client=True) as client:
        run = client.read_flow_run(UUID(flow_run_id))
    return run.state_type.value if run.state_type else "UNKNOWN"


def cancel_run(flow_run_id: str, why: str) -> None:
    with get_client(sync_client=True) as client:
        client.set_flow_run_state(flow_run_id, Cancelled(message=why[:500]), force=True)


def existing_run(run: FlowRun) -> ExistingRun:
    return ExistingRun(
        flow_run_id=str(run.id),
        name=run.name,
        idempotency_key=run.idempotency_key,
        state_type=run.state_type.value if run.state_type else "UNKNOWN",
        state_name=run.state_name or "",
        scheduled_at=run.expected_start_time,
        started_at=run.start_time,
    )



def tag_this_run(*new_tags: str) -> None:
    """Add ``new_tags`` to the current flow run on the server (nothing outside a run, or when it has them).

    A run's tags are fixed when it is created, by whoever creates it (a deployment's schedule, ``capserve up``,
    a test calling the flow); a campaign's runs tag themselves so that filtering the UI by the campaign's tag
    finds every one of them. A tag that cannot be written is logged: the run's work does not depend on it.
    """
    context = FlowRunContext.get()
    if context is None or context.flow_run is None:
        return
    missing = [tag for tag in new_tags if tag not in context.flow_run.tags]
    if not missing:
        return
    tags = [*context.flow_run.tags, *missing]
    try:
        with get_client(sync_client=True) as client:
            client.update_flow_run(context.flow_run.id, tags=tags)
    except Exception as exc:  # noqa: BLE001 - a label for people: never a reason for the run to fail
        run_logger(__name__).warning("could not tag flow run %s with %s: %s", context.flow_run.name, missing, exc)
        return
    context.flow_run.tags = tags
