"""The campaign's typed vocabulary: stages, the report model and its JSON contract, the record, the rules
that sequence a run, settings from the environment and the spec, and where things live."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from spec_changes import changed

from capserve.core.capacity.states import ReservationState
from capserve.core.cluster.result import ClusterResult
from capserve.core.errors import PermanentError, SpecError
from capserve.core.lease import Lease
from capserve.core.locations import default_records_bucket, resolve_locations
from capserve.core.record import CampaignRecord, SpecSnapshot, StageEntry, stage_outputs
from capserve.core.report import CampaignReport
from capserve.core.schedule import LeaseSchedule, ScheduledStage, ScheduleEntry, WindowFacts
from capserve.core.sequencing import blocked_by, decide_ending
from capserve.core.settings import RecordSettings, Settings
from capserve.core.spec import CampaignSpec, load_spec
from capserve.core.stages import CampaignPart, Stage, StageStatus
from capserve.core.teardown.result import KeptResource
from capserve.tasks.settings import settings_from_environment

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kimi-k3-sandbox.yaml"
T0 = datetime(2026, 12, 1, 11, 30, tzinfo=UTC)


def spec(**changes: object) -> CampaignSpec:
    return CampaignSpec.model_validate(changed(load_spec(EXAMPLE).model_dump(mode="json"), **changes))


def lease(**changes: object) -> Lease:
    values: dict[str, object] = {
        "provider": "ec2-capacity-block", "region": "us-east-2", "availability_zone": "us-east-2a",
        "reservation_id": "cr-0123456789abcdef0", "start": T0, "end": T0 + timedelta(days=1),
        "instance_type": "p6-b300.48xlarge", "instance_count": 1, "upfront_fee": 2832.0,
    }
    return Lease.model_validate({**values, **changes})


# ---------------------------------------------------------------- stages


def test_stage_values_and_order_are_the_contract() -> None:
    assert [s.value for s in Stage] == [
        "plan", "acquire", "stage_weights", "stage_image", "bring_up", "weights_to_nodes", "rollout", "evaluate",
        "drain", "teardown",
    ]
    assert Stage.PLAN.precedes(Stage.ACQUIRE) and not Stage.TEARDOWN.precedes(Stage.DRAIN)
    assert Stage.BRING_UP.later()[:2] == (Stage.WEIGHTS_TO_NODES, Stage.ROLLOUT)


def test_stage_behaviour() -> None:
    assert [s for s in Stage if s.part is CampaignPart.PREPARE] == [
        Stage.PLAN, Stage.ACQUIRE, Stage.STAGE_WEIGHTS, Stage.STAGE_IMAGE
    ]
    # The image is copied into the block's region once the lease names it, before the block is active.
    assert Stage.STAGE_IMAGE.needs_capacity and not Stage.STAGE_IMAGE.needs_active_capacity
    assert [s for s in Stage if s.part is CampaignPart.SERVE] == [
        Stage.BRING_UP, Stage.WEIGHTS_TO_NODES, Stage.ROLLOUT, Stage.EVALUATE
    ]
    assert not Stage.ACQUIRE.needs_capacity and Stage.STAGE_WEIGHTS.needs_capacity
    assert not Stage.STAGE_WEIGHTS.needs_active_capacity and Stage.BRING_UP.needs_active_capacity
    assert Stage.DRAIN.needs_active_capacity and not Stage.TEARDOWN.needs_active_capacity
    assert [s for s in Stage if s.leaves_resources] == [Stage.BRING_UP, Stage.WEIGHTS_TO_NODES, Stage.ROLLOUT]
    assert not StageStatus.RUNNING.is_terminal


# ---------------------------------------------------------------- sequencing


def test_blocked_by_capacity() -> None:
    assert blocked_by(Stage.ACQUIRE, lease=None, state=None, no_capacity="") is None
    assert blocked_by(Stage.STAGE_WEIGHTS, lease=None, state=None, no_capacity="rejected by alice") == (
        "no capacity: rejected by alice"
    )
    held = lease()
    assert blocked_by(Stage.STAGE_WEIGHTS, lease=held, state=ReservationState.SCHEDULED, no_capacity="") is None
    why = blocked_by(Stage.BRING_UP, lease=held, state=ReservationState.SCHEDULED, no_capacity="")
    assert why is not None and "scheduled" in why and "run the campaign again" in why
    assert blocked_by(Stage.BRING_UP, lease=held, state=ReservationState.ACTIVE, no_capacity="") is None


def test_only_a_stage_failing_on_its_own_merits_tears_down() -> None:
    failed = decide_ending(PermanentError("add-ons failed"), resources_made=True, teardown_when_done=False)
    assert failed.teardown == "failed-stage" and not failed.left_standing
    for interruption in (KeyboardInterrupt(), SystemExit(1), BrokenPipeError(32, "Broken pipe"), OSError("x")):
        ending = decide_ending(interruption, resources_made=True, teardown_when_done=True)
        assert ending.teardown is None and ending.left_standing
        assert "scheduled at purchase" in ending.why and "reaper" in ending.why
    assert decide_ending(PermanentError("x"), resources_made=False, teardown_when_done=True).teardown is None
    assert decide_ending(None, resources_made=True, teardown_when_done=True).teardown == "campaign-finished"
    done = decide_ending(None, resources_made=True, teardown_when_done=False)
    assert done.teardown is None and done.left_standing


def test_a_run_suspended_for_approval_asks_a_person_and_reports_no_interruption() -> None:
    # Prefect's Pause is how the orchestrator suspends the run: the runner says so with awaiting_approval.
    waiting = decide_ending(
        BaseException("Pause"), resources_made=False, teardown_when_done=True, awaiting_approval=True
    )
    assert (waiting.teardown, waiting.asks_a_person) == (None, True)
    assert waiting.why.startswith("waiting for a person's approval") and "interrupted" not in waiting.why


# ---------------------------------------------------------------- report


def cluster() -> ClusterResult:
    return ClusterResult(
        kind="eks", name="capserve-k3-demo", region="us-east-2", endpoint="https://k8s", gpu_pool="gpu",
        nodes_ready=1, gpus_allocatable=8,
    )


def test_the_report_renders_sections_in_campaign_order_with_their_own_json() -> None:
    report = CampaignReport(campaign="k3-demo")
    line = report.begin(Stage.BRING_UP, T0)
    report.end(line, StageStatus.COMPLETED, now=T0 + timedelta(seconds=6))
    report.skip(Stage.EVALUATE, "no endpoint", T0 + timedelta(seconds=7))
    report.add(cluster())
    report.add(LeaseSchedule(
        runs=(ScheduleEntry(
            name="teardown-k3-demo", stage=ScheduledStage.TEARDOWN, scheduled_at=T0, state="Scheduled"
        ),),
        window=WindowFacts(block_start=T0 - timedelta(days=1), block_end=T0),
    ))
    out = report.to_json()
    assert list(out) == ["campaign", "stages", "schedule", "window", "cluster", "events", "redeploys"]
    assert out["window"]["aws_terminates_at"] == (T0 - timedelta(minutes=30)).isoformat()
    assert out["schedule"] == [{
        "name": "teardown-k3-demo", "stage": "teardown", "scheduled_at": T0.isoformat(), "flow_run_id": None,
        "state": "Scheduled", "fired_at": None,
    }]
    assert out["cluster"] == {"kind": "eks", "name": "capserve-k3-demo", "nodes_ready": 1, "gpus_allocatable": 8,
                              "node_join": None}
    assert out["stages"][1] == {
        "name": "evaluate", "status": "skipped", "started_at": (T0 + timedelta(seconds=7)).isoformat(),
        "ended_at": (T0 + timedelta(seconds=7)).isoformat(), "detail": "no endpoint",
    }
    assert "detail" not in out["stages"][0]
    markdown = report.to_markdown()
    assert markdown.index("## Scheduled runs") < markdown.index("## Cluster")
    assert "| bring_up | this run | completed | 2026-12-01 11:30:00 | — | 6.0 s |" in markdown
    assert report.status_of(Stage.EVALUATE) is StageStatus.SKIPPED and report.status_of(Stage.PLAN) is None


def test_a_section_is_written_once_and_only_where_its_type_belongs() -> None:
    report = CampaignReport(campaign="k3-demo")
    report.add(cluster())
    with pytest.raises(ValueError, match="already written"):
        report.add(cluster())
    with pytest.raises(TypeError, match="no report section holds a KeptResource"):
        report.add(KeptResource(resource="s3-bucket/x", why="shared"))


def test_interrupted_and_failed_stages_are_spelled_out() -> None:
    report = CampaignReport(campaign="k3-demo")
    line = report.begin(Stage.WEIGHTS_TO_NODES, T0)
    report.end(line, StageStatus.INTERRUPTED, "KeyboardInterrupt: ; left for the reaper", T0)
    assert "**weights_to_nodes interrupted:** KeyboardInterrupt: ; left for the reaper" in report.to_markdown()


# ---------------------------------------------------------------- record


def test_the_spec_round_trips_through_the_record_with_its_digest() -> None:
    original = spec(settings={"bring_up": {"poll_seconds": 3}})
    snapshot = SpecSnapshot.of(original)
    assert snapshot.load() == original and len(snapshot.digest) == 64
    assert SpecSnapshot.of(spec()).digest != snapshot.digest
    loaded = CampaignRecord.new("k3-demo", T0).with_spec(original, now=T0)
    again = CampaignRecord.model_validate_json(loaded.model_dump_json())
    restored = again.load_spec()
    assert restored is not None and restored.campaign_settings() == original.campaign_settings()


def test_inputs_digest_changes_with_the_spec_sections_a_stage_reads_and_with_upstream_outputs() -> None:
    record = CampaignRecord.new("k3-demo", T0)
    base = record.inputs_digest(Stage.EVALUATE, spec())
    assert record.inputs_digest(Stage.EVALUATE, spec(cluster__min_serving_minutes=60)) == base
    assert record.inputs_digest(Stage.EVALUATE, spec(serving__max_num_seqs=12)) != base
    weights = record.inputs_digest(Stage.WEIGHTS_TO_NODES, spec())
    produced = record.with_stage(
        Stage.STAGE_WEIGHTS, StageEntry(status=StageStatus.COMPLETED, outputs={"revision_sha": "b06506cc"})
    )
    assert produced.inputs_digest(Stage.WEIGHTS_TO_NODES, spec()) != weights


def test_stage_outputs_keep_a_few_fields_of_the_typed_result() -> None:
    assert stage_outputs(Stage.BRING_UP, cluster()) == {
        "kind": "eks", "name": "capserve-k3-demo", "region": "us-east-2", "gpu_pool": "gpu", "nodes_ready": 1,
        "node_names": [],
    }
    assert stage_outputs(Stage.BRING_UP, None) == {}


# ---------------------------------------------------------------- settings


def test_environment_then_spec_settings_reach_their_section() -> None:
    env = settings_from_environment({
        "CAPSERVE_BRING_UP__POLL_SECONDS": "5",
        "capserve_weights__fetch_parallelism": "2",
        "CAPSERVE_BRING_UP__KUBE__NODES_READY_TIMEOUT_S": "60",
        "CAPSERVE_SANDBOX_AUTO_ACTIVATE": "1",  # not a setting: no '__'
        "HOME": "/root",
    })
    assert (env.bring_up.poll_seconds, env.weights.fetch_parallelism) == (5, 2)
    overrides = spec(settings={"weights": {"fetch_parallelism": 8}, "teardown": {"poll_seconds": 1}})
    merged = env.for_campaign(overrides.campaign_settings())
    assert merged.weights.fetch_parallelism == 8  # the spec wins where it speaks
    assert merged.bring_up.poll_seconds == 5 and merged.bring_up.kube.nodes_ready_timeout_s == 60  # elsewhere env
    assert merged.teardown.poll_seconds == 1
    assert merged.weights.publish_parallelism == Settings().weights.publish_parallelism


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"CAPSERVE_BRING_UP__POLL_SECONDZ": "5"}, "CAPSERVE_BRING_UP__POLL_SECONDZ: unknown setting"),
        ({"CAPSERVE_BRING_UP__POLL_SECONDS": "-1"}, "CAPSERVE_BRING_UP__POLL_SECONDS: Input should be greater"),
        ({"CAPSERVE_NOPE__X": "1"}, "CAPSERVE_NOPE__X: unknown setting"),
        ({"CAPSERVE_RECORDS__BUCKET": "Not_A_Bucket"}, "CAPSERVE_RECORDS__BUCKET: String should match"),
    ],
)
def test_a_bad_setting_in_the_environment_names_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        settings_from_environment(env)


def test_the_spec_settings_block_is_strict() -> None:
    with pytest.raises(ValueError, match=r"bring_up.poll_secondz: unknown field"):
        spec(settings={"bring_up": {"poll_secondz": 1}})
    with pytest.raises(ValueError, match="records: unknown field"):  # where records live is not per campaign
        spec(settings={"records": {"bucket": "elsewhere"}})


# ---------------------------------------------------------------- locations


def test_locations_are_resolved_in_one_place() -> None:
    two_regions = spec(weights__s3_region="us-west-2")
    where = resolve_locations(two_regions, RecordSettings(), account_id="123456789012")
    assert where.records.bucket == default_records_bucket("123456789012", "us-east-2") == (
        "capserve-records-123456789012-us-east-2"
    )
    assert where.records.region == "us-east-2" and where.weights.region == "us-west-2"
    assert where.weights.bucket == two_regions.weights.s3_bucket
    named = resolve_locations(two_regions, RecordSettings(bucket="my-records", region="eu-west-1"), account_id=None)
    assert (named.records.bucket, named.records.region) == ("my-records", "eu-west-1")
    with pytest.raises(ValueError, match="pass account_id"):
        resolve_locations(two_regions, RecordSettings(), account_id=None)


def test_one_bucket_cannot_hold_records_and_weights_in_two_regions() -> None:
    two_regions = spec(weights__s3_region="us-west-2")
    same_bucket = RecordSettings(bucket=two_regions.weights.s3_bucket)
    with pytest.raises(SpecError, match="a bucket has one region"):
        resolve_locations(two_regions, same_bucket, account_id=None)
