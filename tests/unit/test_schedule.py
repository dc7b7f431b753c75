"""The runs a lease schedules, decided as data: names, times, keys, and reconciling with the server."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from capserve.core.lease import Lease
from capserve.core.schedule import (
    SCHEDULED_TAG,
    ExistingRun,
    ScheduledStage,
    planned_runs,
    reconcile,
    stages_no_longer_needed,
)
from capserve.core.spec import TeardownSpec

START = datetime(2026, 12, 2, 11, 30, tzinfo=UTC)


def lease(reservation_id: str = "cr-0abc", *, days: int = 1, start: datetime = START) -> Lease:
    return Lease(
        provider="ec2-capacity-block", region="us-east-2", availability_zone="us-east-2a",
        reservation_id=reservation_id, start=start, end=start + timedelta(days=days),
        instance_type="p5.48xlarge", instance_count=1, upfront_fee=1000.0,
    )


def existing(run_key: str, state: str = "SCHEDULED", run_id: str = "r1") -> ExistingRun:
    return ExistingRun(flow_run_id=run_id, name="x", idempotency_key=run_key, state_type=state)


def test_a_lease_schedules_bring_up_at_start_drain_at_end_minus_34_and_teardown_at_end_minus_32() -> None:
    runs = planned_runs("k3-demo", lease(), TeardownSpec(), bring_up_lead=timedelta(minutes=10))
    end = START + timedelta(days=1)
    assert [(r.stage, r.name, r.deployment, r.scheduled_at) for r in runs] == [
        (ScheduledStage.BRING_UP, "serve-k3-demo", "serve/serve", START - timedelta(minutes=10)),
        (ScheduledStage.DRAIN, "drain-k3-demo", "drain/drain", end - timedelta(minutes=34)),
        (ScheduledStage.TEARDOWN, "teardown-k3-demo", "scheduled-teardown/scheduled-teardown",
         end - timedelta(minutes=32)),
    ]
    for run in runs:
        assert run.parameters == {"campaign_id": "k3-demo", "region": "us-east-2", "reservation_id": "cr-0abc"}
        assert run.tags == ("capserve.io/campaign=k3-demo", SCHEDULED_TAG)
        assert "cr-0abc" in run.idempotency_key and run.scheduled_at.isoformat() in run.idempotency_key
    assert len({r.idempotency_key for r in runs}) == 3


def test_a_rerun_with_the_same_lease_creates_nothing_and_cancels_nothing() -> None:
    runs = planned_runs("k3-demo", lease(), TeardownSpec())
    on_server = [existing(r.idempotency_key, run_id=f"id-{i}") for i, r in enumerate(runs)]
    actions = reconcile(runs, on_server)
    assert actions.create == () and actions.cancel == ()
    assert [found.flow_run_id for _, found in actions.keep] == ["id-0", "id-1", "id-2"]


def test_a_changed_lease_cancels_the_old_pending_runs_and_creates_new_ones() -> None:
    old = planned_runs("k3-demo", lease(days=1), TeardownSpec())
    new = planned_runs("k3-demo", lease(days=2), TeardownSpec())
    on_server = [
        existing(old[0].idempotency_key, state="COMPLETED", run_id="served"),  # bring-up already ran: untouched
        existing(old[1].idempotency_key, run_id="old-drain"),
        existing(old[2].idempotency_key, state="PENDING", run_id="old-teardown"),
    ]
    actions = reconcile(new, on_server)
    assert [r.flow_run_id for r in actions.cancel] == ["old-drain", "old-teardown"]
    assert [r.stage for r in actions.create] == [ScheduledStage.DRAIN, ScheduledStage.TEARDOWN]
    assert [r.stage for r, _ in actions.keep] == [ScheduledStage.BRING_UP]  # same start: the same key


def test_a_torn_down_campaign_cancels_every_pending_run_but_never_a_running_one() -> None:
    runs = planned_runs("k3-demo", lease(), TeardownSpec())
    on_server = [
        existing(runs[0].idempotency_key, run_id="serve"),
        existing(runs[1].idempotency_key, run_id="drain"),
        existing(runs[2].idempotency_key, state="RUNNING", run_id="teardown-now"),
    ]
    actions = reconcile(runs, on_server, no_longer_needed=stages_no_longer_needed(torn_down=True, served=True))
    assert [r.flow_run_id for r in actions.cancel] == ["serve", "drain"]
    assert actions.create == () and actions.keep == ()


def test_a_campaign_that_served_in_its_own_run_needs_no_scheduled_bring_up() -> None:
    runs = planned_runs("k3-demo", lease(), TeardownSpec())
    actions = reconcile(runs, [], no_longer_needed=stages_no_longer_needed(torn_down=False, served=True))
    assert [r.stage for r in actions.create] == [ScheduledStage.DRAIN, ScheduledStage.TEARDOWN]


def test_a_campaign_that_builds_its_cluster_prepares_it_before_the_block_by_the_time_model() -> None:
    from pathlib import Path

    from capserve.core.schedule import cluster_lead
    from capserve.core.spec import load_spec

    spec = load_spec(Path(__file__).resolve().parents[2] / "examples" / "kimi-k3-sandbox.yaml")
    # Control plane 15 + system nodes 5 + add-ons 5 = 25 min (docs/timeline.md §1), × 2 = 50 min.
    lead = cluster_lead(spec)
    assert lead == timedelta(minutes=50)
    runs = planned_runs("k3-demo", lease(), TeardownSpec(), bring_up_lead=timedelta(minutes=10), prepare_lead=lead)
    first = runs[0]
    assert (first.stage, first.name, first.deployment, first.scheduled_at) == (
        ScheduledStage.PREPARE_CLUSTER, "prepare-cluster-k3-demo", "prepare-cluster/prepare-cluster",
        START - timedelta(minutes=60),
    )
    on_a_cluster_of_theirs = spec.model_copy(
        update={"cluster": spec.cluster.model_copy(update={"existing_cluster_name": "theirs"})}
    )
    assert cluster_lead(on_a_cluster_of_theirs) is None
    assert ScheduledStage.PREPARE_CLUSTER in stages_no_longer_needed(torn_down=False, served=True)
