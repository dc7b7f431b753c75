"""The campaign runner's rules, with stand-in stages and a record kept in memory (the real record store has
its own tests): what is skipped, when teardown runs, and that the report is always written and says why."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import prefect.task_engine
import pytest
import yaml
from prefect import flow, task
from prefect.exceptions import Pause, TerminationSignal

import capserve.flows.campaign as campaign_module
from capserve.campaign.context import CampaignContext, RunOptions
from capserve.campaign.runner import StageEnd, StageOutput, Step, run_campaign
from capserve.core.capacity.states import ReservationState
from capserve.core.cluster.result import ClusterResult
from capserve.core.errors import PermanentError
from capserve.core.lease import Lease
from capserve.core.settings import Settings
from capserve.core.spec import load_spec
from capserve.core.stages import Stage, StageStatus
from capserve.core.teardown.result import TeardownReason, TeardownResult

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kimi-k3-sandbox.yaml"
T0 = datetime(2026, 12, 1, 11, 30, tzinfo=UTC)


def lease() -> Lease:
    return Lease(
        provider="ec2-capacity-block", region="us-east-2", availability_zone="us-east-2a",
        reservation_id="cr-0123456789abcdef0", start=T0, end=T0 + timedelta(days=1),
        instance_type="p6-b300.48xlarge", instance_count=1, upfront_fee=2832.0,
    )


def cluster() -> ClusterResult:
    return ClusterResult(
        kind="eks", name="capserve-k3-demo", region="us-east-2", endpoint="https://k8s", gpu_pool="gpu",
        nodes_ready=1, gpus_allocatable=8,
    )


class InMemoryContext(CampaignContext):
    """The real context with the record kept in memory only (nothing here talks to S3)."""

    def _flush(self) -> None:
        self._unsaved.clear()

    @property
    def saving(self) -> bool:
        return False  # nothing reached S3: no other run can have added to this record (nor is S3 asked)


def context(tmp_path: Path, *, teardown_when_done: bool = False) -> CampaignContext:
    spec = load_spec(EXAMPLE)
    options = RunOptions(out_dir=tmp_path, staging_dir=tmp_path / "staging", teardown_when_done=teardown_when_done)
    return InMemoryContext.start(spec, Settings(), options)


def holds(state: ReservationState) -> Callable[[CampaignContext], StageOutput]:
    def acquire(ctx: CampaignContext) -> StageOutput:
        ctx.lease, ctx.reservation_state = lease(), state
        return StageEnd(StageStatus.COMPLETED, "")

    return acquire


def up(ctx: CampaignContext) -> ClusterResult:
    return cluster()


def raises(error: BaseException) -> Callable[[CampaignContext], StageOutput]:
    def stage(ctx: CampaignContext) -> StageOutput:
        raise error

    return stage


class TearDown:
    def __init__(self, error: BaseException | None = None) -> None:
        self.reasons: list[TeardownReason] = []
        self.error = error

    def __call__(self, ctx: CampaignContext, reason: TeardownReason) -> TeardownResult:
        self.reasons.append(reason)
        if self.error is not None:
            raise self.error
        return TeardownResult(campaign_id="k3-demo", region="us-east-2", reason=reason, dry_run=False, finished_at=T0)


def run(ctx: CampaignContext, steps: list[Step], tear_down: TearDown) -> None:
    @flow(name="runner-under-test")
    def campaign_like() -> None:
        run_campaign(ctx, steps, tear_down)

    campaign_like()


def written(tmp_path: Path) -> dict[str, object]:
    report: dict[str, object] = json.loads((tmp_path / "report.json").read_text())
    assert (tmp_path / "report.md").exists()
    return report


def statuses(ctx: CampaignContext) -> list[tuple[str, str]]:
    return [(line.name.value, line.status.value) for line in ctx.report.stages]


def steps_failing_at_weights_to_nodes(error: BaseException) -> list[Step]:
    return [
        Step(Stage.ACQUIRE, holds(ReservationState.ACTIVE)),
        Step(Stage.BRING_UP, up),
        Step(Stage.WEIGHTS_TO_NODES, raises(error)),
        Step(Stage.EVALUATE, raises(AssertionError("never reached"))),
    ]


def test_a_stage_failing_on_its_own_merits_tears_down_at_once(tmp_path: Path) -> None:
    ctx, tear_down = context(tmp_path), TearDown()
    with pytest.raises(PermanentError, match="staging Job failed"):
        run(ctx, steps_failing_at_weights_to_nodes(PermanentError("staging Job failed")), tear_down)
    assert tear_down.reasons == ["failed-stage"]
    assert statuses(ctx)[-2:] == [("weights_to_nodes", "failed"), ("teardown", "completed")]
    assert ctx.record.stages[Stage.WEIGHTS_TO_NODES].status is StageStatus.FAILED
    assert "teardown" in written(tmp_path)


@pytest.mark.parametrize(
    "interruption", [KeyboardInterrupt(), BrokenPipeError(32, "Broken pipe"), SystemExit(143)], ids=type
)
def test_an_interruption_leaves_the_cluster_to_the_scheduled_teardown(
    tmp_path: Path, interruption: BaseException
) -> None:
    ctx, tear_down = context(tmp_path, teardown_when_done=True), TearDown()
    with pytest.raises(type(interruption)):
        run(ctx, steps_failing_at_weights_to_nodes(interruption), tear_down)
    assert tear_down.reasons == []  # a healthy, paid-for cluster is not destroyed because the run was stopped
    assert statuses(ctx)[-1] == ("weights_to_nodes", "interrupted")
    report = written(tmp_path)
    assert "teardown" not in report
    detail = str(report["stages"][-1]["detail"])  # type: ignore[index]
    assert type(interruption).__name__ in detail and "scheduled at purchase" in detail and "reaper" in detail
    assert "**weights_to_nodes interrupted:**" in (tmp_path / "report.md").read_text()
    entry = ctx.record.stages[Stage.WEIGHTS_TO_NODES]
    assert entry.status is StageStatus.INTERRUPTED and "reaper" in entry.detail


def test_a_sigterm_prefect_turns_into_another_error_still_stops_the_run_as_a_sigterm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SIGTERM landing while Prefect creates a task run comes out of the task as ``ValueError: Task run is not
    set``; the run must end as the signal (a crashed run, the cluster left standing), not as a failed stage."""

    def signalled(*args: object, **kwargs: object) -> None:
        raise TerminationSignal(signal=15)  # where Prefect's SIGTERM handler raises it when the signal lands there

    monkeypatch.setattr(prefect.task_engine, "_create_task_run_locally", signalled)

    @task
    def copy_weights() -> None:
        raise AssertionError("never runs: its task run is never created")

    def weights_to_nodes(ctx: CampaignContext) -> StageOutput:
        copy_weights()
        raise AssertionError("never reached")

    ctx, tear_down = context(tmp_path, teardown_when_done=True), TearDown()
    steps = [Step(Stage.ACQUIRE, holds(ReservationState.ACTIVE)), Step(Stage.BRING_UP, up),
             Step(Stage.WEIGHTS_TO_NODES, weights_to_nodes)]
    with pytest.raises(TerminationSignal):  # outside a flow: inside one, the engine would pass it to this process
        run_campaign(ctx, steps, tear_down)
    assert tear_down.reasons == []
    assert statuses(ctx)[-1] == ("weights_to_nodes", "interrupted")
    assert ctx.report.stages[-1].detail.startswith("TerminationSignal")  # type: ignore[union-attr]


def test_a_failing_teardown_never_hides_the_first_error_and_the_report_is_written(tmp_path: Path) -> None:
    ctx, tear_down = context(tmp_path), TearDown(PermanentError("VPC still has a dependency"))
    with pytest.raises(PermanentError, match="staging Job failed"):
        run(ctx, steps_failing_at_weights_to_nodes(PermanentError("staging Job failed")), tear_down)
    assert tear_down.reasons == ["failed-stage"]
    report = written(tmp_path)
    assert [(s["name"], s["status"]) for s in report["stages"]][-2:] == [  # type: ignore[index, union-attr]
        ("weights_to_nodes", "failed"), ("teardown", "failed")
    ]
    assert "VPC still has a dependency" in (tmp_path / "report.md").read_text()


def test_a_failing_teardown_after_success_fails_the_run(tmp_path: Path) -> None:
    ctx = context(tmp_path, teardown_when_done=True)
    steps = [Step(Stage.ACQUIRE, holds(ReservationState.ACTIVE)), Step(Stage.BRING_UP, up)]
    with pytest.raises(PermanentError, match="dependency"):
        run(ctx, steps, TearDown(PermanentError("VPC still has a dependency")))
    assert statuses(ctx)[-1] == ("teardown", "failed") and (tmp_path / "report.json").exists()


def test_a_reservation_not_yet_active_skips_every_serving_stage_with_one_reason(tmp_path: Path) -> None:
    ctx, tear_down = context(tmp_path, teardown_when_done=True), TearDown()
    steps = [
        Step(Stage.ACQUIRE, holds(ReservationState.SCHEDULED)),
        Step(Stage.STAGE_WEIGHTS, lambda ctx: StageEnd(StageStatus.COMPLETED, "")),
        Step(Stage.BRING_UP, raises(AssertionError("never reached"))),
        Step(Stage.WEIGHTS_TO_NODES, raises(AssertionError("never reached"))),
        Step(Stage.EVALUATE, raises(AssertionError("never reached"))),
    ]
    run(ctx, steps, tear_down)
    assert statuses(ctx) == [
        ("acquire", "completed"), ("stage_weights", "completed"),
        ("bring_up", "skipped"), ("weights_to_nodes", "skipped"), ("evaluate", "skipped"),
    ]
    reasons = {line.detail for line in ctx.report.stages if line.status is StageStatus.SKIPPED}
    assert len(reasons) == 1 and "run the campaign again" in reasons.pop()
    assert tear_down.reasons == []  # nothing was made
    assert ctx.record.stages[Stage.EVALUATE].status is StageStatus.SKIPPED


def test_no_capacity_skips_everything_after_acquire(tmp_path: Path) -> None:
    ctx, tear_down = context(tmp_path), TearDown()

    def rejected(ctx: CampaignContext) -> StageOutput:
        ctx.no_capacity = "rejected by alice"
        return StageEnd(StageStatus.STOPPED, "rejected by alice")

    steps = [Step(Stage.ACQUIRE, rejected), Step(Stage.STAGE_WEIGHTS, raises(AssertionError("never")))]
    run(ctx, steps, tear_down)
    assert statuses(ctx) == [("acquire", "stopped"), ("stage_weights", "skipped")]
    assert ctx.report.stages[-1].detail == "no capacity: rejected by alice"


def test_an_environment_setting_and_a_spec_override_reach_the_stage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CAPSERVE_BRING_UP__POLL_SECONDS", "7")
    monkeypatch.setenv("CAPSERVE_WEIGHTS__FETCH_PARALLELISM", "2")
    data = yaml.safe_load(EXAMPLE.read_text())
    data["settings"] = {"bring_up": {"cluster_active_timeout_s": 600}, "weights": {"fetch_parallelism": 3}}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(data))
    spec = load_spec(tmp_path / "spec.yaml")
    seen: list[CampaignContext] = []

    def capture(ctx: CampaignContext) -> StageOutput:
        seen.append(ctx)
        return StageEnd(StageStatus.SKIPPED, "only looking at the settings")

    monkeypatch.setattr(campaign_module, "CAMPAIGN", (Step(Stage.PLAN, capture),))
    campaign_module.campaign(spec, out_dir=tmp_path / "out")

    [ctx] = seen
    assert ctx.settings.bring_up.poll_seconds == 7  # from the environment
    assert ctx.settings.bring_up.cluster_active_timeout_s == 600  # from the spec
    assert ctx.settings.weights.fetch_parallelism == 3  # the spec wins over the environment
    handed: list[object] = []
    monkeypatch.setattr(  # the stage imports the subflow when it runs
        "capserve.flows.bring_up.bring_up", lambda spec, lease, settings, **_: handed.append(settings) or cluster()
    )
    ctx.lease = lease()
    campaign_module.bring_up_stage(ctx)
    assert handed == [ctx.settings.bring_up]


def test_every_run_of_the_stages_writes_what_it_applied_to_its_report_folder(tmp_path: Path) -> None:
    """The scheduled ``serve`` run (``make demo``'s bring-up, in a worker) runs the stages through run_campaign
    too: the objects its bring-up applies land in the campaign's ``manifests/``, not only the campaign run's."""
    from capserve.tasks.manifests import record_applied

    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "lws-webhook-server-cert",
                                                                "namespace": "lws-system"}}

    def applies(ctx: CampaignContext) -> ClusterResult:
        record_applied(secret)  # what capserve.tasks.kube does after each accepted apply
        return cluster()

    ctx = context(tmp_path, teardown_when_done=True)
    run(ctx, [Step(Stage.ACQUIRE, holds(ReservationState.ACTIVE)), Step(Stage.BRING_UP, applies)], TearDown())
    names = [p.name for p in (tmp_path / "manifests").glob("*.yaml")]
    assert names == ["001-Secret-lws-system-lws-webhook-server-cert.yaml"]


def test_a_run_suspended_for_approval_asks_at_info_where_to_approve(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ctx = context(tmp_path)
    steps = [Step(Stage.ACQUIRE, raises(Pause()))]  # how Prefect suspends the run until a person answers
    with caplog.at_level(logging.INFO), pytest.raises(Pause):
        run_campaign(ctx, steps, TearDown())
    asked = [(r.levelno, r.getMessage()) for r in caplog.records if "waiting for approval" in r.getMessage()]
    assert [level for level, _ in asked] == [logging.INFO] and "approve or reject in" in asked[0][1].lower()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("capserve")]


def test_a_run_that_adopts_the_lease_reports_the_purchase_the_record_keeps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The serve run adopts the reservation the campaign run bought: its report (the campaign's final one) still
    holds the offers considered, the chosen one, the fee and the run that bought it, read from the record."""
    import capserve.campaign.runner as runner_module
    from capserve.core.capacity.offers import Offer
    from capserve.core.capacity.ranking import ConsideredOffer, Ranking
    from capserve.core.capacity.result import AcquireResult
    from capserve.core.locations import BucketLocation
    from capserve.core.record import CampaignRecord, RecordRef

    bought_lease = lease()
    offer = Offer(
        provider="ec2-capacity-block", region="us-east-2", availability_zone="us-east-2a", offering_id="cb-chosen",
        start=T0, end=T0 + timedelta(days=1), instance_type="p6-b300.48xlarge", instance_count=1, upfront_fee=2832.0,
    )
    other = offer.model_copy(update={"offering_id": "cb-other", "region": "us-west-2", "upfront_fee": 3100.0})
    ranking = Ranking(policy="earliest-start", considered=[
        ConsideredOffer(offer=offer, chosen=True, rank=1, reason="earliest start"),
        ConsideredOffer(offer=other, chosen=False, rank=2, reason="dearer"),
    ])
    purchase = AcquireResult(
        campaign_id="k3-demo", outcome="bought", lease=bought_lease, state=ReservationState.SCHEDULED,
        ranking=ranking, message="Bought.", bought_by="campaign-k3-demo", bought_at=T0 - timedelta(days=2),
    )
    stored = CampaignRecord.new("k3-demo", T0).with_purchase(purchase, now=T0)

    class RecordedContext(InMemoryContext):
        @property
        def saving(self) -> bool:
            return True  # the record reached S3: the runner reads what other runs put there

        @property
        def record_ref(self) -> RecordRef:
            return RecordRef(campaign_id="k3-demo", location=BucketLocation(bucket="records", region="us-east-2"))

    monkeypatch.setattr(runner_module, "load_record", lambda ref: stored)
    spec = load_spec(EXAMPLE)
    options = RunOptions(out_dir=tmp_path, staging_dir=tmp_path / "staging")
    ctx = RecordedContext.start(spec, Settings(), options)
    held = bought_lease.model_copy(update={"adopted": True})

    def adopt(context: CampaignContext) -> AcquireResult:
        context.lease, context.reservation_state = held, ReservationState.ACTIVE
        return AcquireResult(campaign_id="k3-demo", outcome="adopted", lease=held, state=ReservationState.ACTIVE,
                             message="Holds cr-0123456789abcdef0 (active).", adopted_by="serve-k3-demo")

    run(ctx, [Step(Stage.ACQUIRE, adopt)], TearDown())

    report = written(tmp_path)
    assert [o["offering_id"] for o in report["offers_considered"]] == ["cb-chosen", "cb-other"]  # type: ignore[index]
    assert report["purchase"] == {  # type: ignore[comparison-overlap]
        "bought_by": "campaign-k3-demo", "bought_at": (T0 - timedelta(days=2)).isoformat(),
        "offering_id": "cb-chosen", "upfront_fee": 2832.0, "adopted_by": "serve-k3-demo", "approval": None,
    }
    markdown = (tmp_path / "report.md").read_text()
    assert "Capacity: bought" in markdown and "adopted by run serve-k3-demo (active)" in markdown
    assert "**chosen**" in markdown
