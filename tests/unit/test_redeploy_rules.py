"""When a redeploy may run, when it has nothing to do, and what a verdict makes of it (capserve.core.redeploy)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from capserve.core.lease import Lease
from capserve.core.record import CampaignRecord, RolloutRecord, StageEntry
from capserve.core.redeploy import RedeployEntry, outcome_for, swap_time
from capserve.core.redeploy_rules import already_handled, refusal
from capserve.core.report import CampaignReport
from capserve.core.rollout.start_history import MeasuredStart, StartHistory
from capserve.core.spec import load_spec
from capserve.core.stages import Stage, StageStatus
from tests.unit.rollout_fixtures import config_for, k3_plan

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kimi-k3-sandbox.yaml"
NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
OLD, NEW = "a" * 40, "b" * 40


def running(**stages: StageStatus) -> CampaignRecord:
    lease = Lease(
        provider="ec2-capacity-block", region="us-east-2", availability_zone="us-east-2a", reservation_id="cr-0abc",
        start=NOW - timedelta(hours=1), end=NOW + timedelta(hours=23), instance_type="p6-b300.48xlarge",
        instance_count=1, upfront_fee=1.0,
    )
    serving = config_for(k3_plan()).model_copy(update={"revision_sha": OLD})
    good = RolloutRecord(ready_at=NOW, color="blue", config=serving)
    record = (
        CampaignRecord.new("k3-demo", NOW).with_spec(load_spec(EXAMPLE), now=NOW)
        .with_lease(lease, offering_id=None, now=NOW).with_rollout(good)
    )
    for name, status in {"bring_up": StageStatus.COMPLETED, **stages}.items():
        record = record.with_stage(Stage(name), StageEntry(status=status))
    return record


def entry(to: str, outcome: str = "rolled-back") -> RedeployEntry:
    return RedeployEntry.model_validate({
        "from_sha": OLD, "to_sha": to, "trigger": "manual", "strategy": "recreate", "verdict": "fail",
        "outcome": outcome, "started_at": NOW, "ended_at": NOW,
    })


def test_a_running_campaign_may_be_redeployed_while_the_swap_ends_before_its_drain_point() -> None:
    record = running()
    assert refusal(record, now=NOW) is None
    assert record.lease is not None and record.last_good_rollout is not None
    drain = record.lease.end - timedelta(minutes=34)
    swap = swap_time(record.last_good_rollout.config)
    last_chance = drain - timedelta(seconds=swap.total_s)
    assert refusal(record, now=last_chance) is None
    why = refusal(record, now=last_chance + timedelta(minutes=1))
    assert why is not None and "it would not finish before the drain" in why, why
    why = refusal(record, now=drain)
    assert why is not None and "drain window" in why and "teardown.drain_before_end_minutes = 34" in why


def test_a_k3_redeploy_is_judged_by_its_cold_start_its_gate_and_a_warm_rollback() -> None:
    record = running()
    assert record.last_good_rollout is not None
    swap = swap_time(record.last_good_rollout.config)
    # K3 on one p6-b300 (docs/timeline.md §4): about 9 minutes cold, 5 warm, and the 10-minute gate.
    assert (round(swap.start_s / 60), round(swap.evaluation_s / 60), round(swap.rollback_s / 60)) == (9, 10, 5)


def test_a_campaign_without_a_cluster_or_a_good_rollout_is_refused_naming_why() -> None:
    assert "it was torn down" in (refusal(running(teardown=StageStatus.COMPLETED), now=NOW) or "")
    assert "it was drained" in (refusal(running(drain=StageStatus.COMPLETED), now=NOW) or "")
    assert "bring one up first" in (refusal(running(bring_up=StageStatus.FAILED), now=NOW) or "")
    assert "bring one up first" in (refusal(running(), now=NOW, has_cluster=False) or "")
    no_rollout = running().model_copy(update={"last_good_rollout": None})
    assert "no good rollout to roll back to" in (refusal(no_rollout, now=NOW) or "")
    no_lease = running().model_copy(update={"lease": None})
    assert "run the campaign first" in (refusal(no_lease, now=NOW) or "")


def test_a_revision_served_or_tried_already_has_nothing_to_do() -> None:
    record = running()
    assert "already serves" in (already_handled(record, OLD) or "")
    assert already_handled(record, NEW) is None
    assert "already tried" in (already_handled(record.with_redeploy(entry(NEW)), NEW) or "")


def test_only_a_pass_is_promoted_and_the_report_lists_the_redeploys_in_its_contract() -> None:
    assert [outcome_for(v) for v in ("pass", "fail", "invalid", "not-evaluated")] == [
        "promoted", "rolled-back", "rolled-back", "rolled-back",
    ]
    report = CampaignReport(campaign="k3-demo", redeploys=[entry(NEW)])
    [listed] = report.to_json()["redeploys"]
    assert {k: listed[k] for k in ("from", "to", "trigger", "strategy", "verdict", "outcome")} == {
        "from": OLD, "to": NEW, "trigger": "manual", "strategy": "recreate", "verdict": "fail",
        "outcome": "rolled-back",
    }
    assert "## Redeploys" in report.to_markdown(images=False)


def test_measured_starts_of_what_serves_predict_the_swap_in_place_of_the_model() -> None:
    record = running()
    assert record.last_good_rollout is not None
    config = record.last_good_rollout.config

    def measured(seconds: float) -> MeasuredStart:
        return MeasuredStart(to_listening_s=seconds, measured_at=NOW, campaign_id="k3-demo", revision_sha=OLD)

    past = StartHistory(cold=measured(95 * 60), warm=measured(14 * 60))
    swap = swap_time(config, past=past)
    assert (swap.start_s, swap.rollback_s) == (95 * 60, 14 * 60)
    # Twenty minutes longer than the model's cold start: a redeploy the model would allow is refused.
    drain = NOW + timedelta(hours=23) - timedelta(minutes=34)
    modelled = swap_time(config)
    just_enough = drain - timedelta(seconds=modelled.total_s)
    assert refusal(record, now=just_enough) is None
    why = refusal(record, now=just_enough, past=past)
    assert why is not None and "vLLM start cold 95 min" in why, why
