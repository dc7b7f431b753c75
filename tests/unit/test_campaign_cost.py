"""The ledger of a campaign run, from its typed report, the spec and the lease: ledgers computed by hand.

Every case is a 24 h block of one p6-b300.48xlarge (8 GPUs) from 11:30 UTC: 1,440 min × 8 = 11,520 paid
GPU-minutes; the drain point is end − 34 min (minute 1,406) and AWS terminates at end − 30 (minute 1,410).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from capserve.core.campaign_cost import (
    campaign_cost_inputs,
    expected_timeline,
    offer_forecasts,
    scheduled_runs,
    serving_interval,
)
from capserve.core.capacity.approval import ApprovalRequest
from capserve.core.capacity.offers import Offer
from capserve.core.cluster.network import NetworkIds, SubnetInfo
from capserve.core.cluster.result import ClusterResult, SystemPool
from capserve.core.cost.causes import Cause
from capserve.core.cost.inputs import BlockWindow
from capserve.core.cost.ledger import CostLedger, build_ledger
from capserve.core.cost.planning import forecast_table
from capserve.core.cost.prices import load_price_table
from capserve.core.cost.spec import CostSpec
from capserve.core.evaluation.result import EvaluationResult
from capserve.core.lease import Lease
from capserve.core.report import CampaignReport
from capserve.core.schedule import LeaseSchedule, ScheduledStage, ScheduleEntry, WindowFacts
from capserve.core.spec import CampaignSpec, load_spec
from capserve.core.stages import Stage, StageStatus

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kimi-k3-sandbox.yaml"
START = datetime(2026, 12, 3, 11, 30, tzinfo=UTC)
END = START + timedelta(hours=24)
PRICES = load_price_table()
GPUS = 8


def minute(m: int) -> datetime:
    return START + timedelta(minutes=m)


def spec() -> CampaignSpec:
    return load_spec(EXAMPLE)


def lease(**changes: object) -> Lease:
    fields: dict[str, object] = {
        "provider": "ec2-capacity-block",
        "region": "us-east-2",
        "availability_zone": "us-east-2a",
        "reservation_id": "cr-0123456789abcdef0",
        "start": START,
        "end": END,
        "instance_type": "p6-b300.48xlarge",
        "instance_count": 1,
        "upfront_fee": 2880.0,
    }
    fields.update(changes)
    return Lease.model_validate(fields)


def report(*stages: tuple[Stage, StageStatus, datetime, datetime]) -> CampaignReport:
    out = CampaignReport(campaign="k3-demo")
    for stage, status, began, ended in stages:
        line = out.begin(stage, began)
        out.end(line, status, None if status is StageStatus.COMPLETED else "why", ended)
    return out


def ledger_of(campaign: CampaignReport, held: Lease | None, *, written_at: datetime | None = None) -> CostLedger:
    return build_ledger(campaign_cost_inputs(campaign, spec(), held, written_at=written_at or minute(90)), PRICES)


def lost(ledger: CostLedger, cause: Cause) -> int:
    return ledger.lost_gpu_minutes[cause]


def served_day() -> CampaignReport:
    """bring_up 0–20, weights_to_nodes 20–50, evaluate 50–80 (minutes from the block's start)."""
    return report(
        (Stage.PLAN, StageStatus.COMPLETED, minute(-600), minute(-599)),
        (Stage.ACQUIRE, StageStatus.COMPLETED, minute(-599), minute(-598)),
        (Stage.STAGE_WEIGHTS, StageStatus.COMPLETED, minute(-598), minute(-560)),
        (Stage.BRING_UP, StageStatus.COMPLETED, minute(0), minute(20)),
        (Stage.WEIGHTS_TO_NODES, StageStatus.COMPLETED, minute(20), minute(50)),
        (Stage.EVALUATE, StageStatus.COMPLETED, minute(50), minute(80)),
    )


def test_a_served_day_serves_from_the_evaluated_endpoint_until_the_drain_point() -> None:
    ledger = ledger_of(served_day(), lease())
    assert ledger.paid_gpu_minutes == 1440 * GPUS
    assert lost(ledger, Cause.BRING_UP) == 20 * GPUS
    assert lost(ledger, Cause.WEIGHTS_TO_NODES) == 30 * GPUS
    assert lost(ledger, Cause.EVALUATION) == 30 * GPUS
    # Serving from minute 80 (evaluation outranks serving while it runs) to the drain point at 1,406.
    assert ledger.serving_gpu_minutes == (1406 - 80) * GPUS
    assert lost(ledger, Cause.DRAIN_AND_TEARDOWN_MARGIN) == 4 * GPUS
    assert lost(ledger, Cause.AWS_TERMINATION) == 30 * GPUS
    assert lost(ledger, Cause.IDLE) == lost(ledger, Cause.WAITING_FOR_BRING_UP) == 0
    assert ledger.paid_gpu_minutes == ledger.serving_gpu_minutes + sum(ledger.lost_gpu_minutes.values())
    assert ledger.upfront_fee == 2880.0 and ledger.currency == "USD"
    assert ledger.serving_started_by.startswith("evaluate began on the ready endpoint")
    assert ledger.serving_started_by.endswith("→ the drain point")
    section = ledger.report_section()
    assert section["serving_gpu_hours"] == round(1326 * GPUS / 60, 4)
    assert section["utilisation"] == round(1326 / 1440, 4)
    # The report was written at minute 90: the rest of the serving interval is a projection, and says so.
    assert any("projected" in note for note in ledger.notes)


def test_a_completed_rollout_starts_serving_when_it_was_ready() -> None:
    campaign = report(
        (Stage.BRING_UP, StageStatus.COMPLETED, minute(0), minute(20)),
        (Stage.ROLLOUT, StageStatus.COMPLETED, minute(20), minute(95)),
        (Stage.EVALUATE, StageStatus.COMPLETED, minute(95), minute(125)),
    )
    ledger = ledger_of(campaign, lease(), written_at=minute(2000))
    assert lost(ledger, Cause.VLLM_COLD_START) == 75 * GPUS
    assert lost(ledger, Cause.EVALUATION) == 30 * GPUS
    assert ledger.serving_gpu_minutes == (1406 - 125) * GPUS
    assert ledger.serving_started_by == "rollout ready → the drain point"
    assert not any("projected" in note for note in ledger.notes)


def test_serving_ahead_of_the_report_is_a_projection_said_by_a_field() -> None:
    """Written at minute 90, serving counted to the drain point: a projection, until the drain run has ended."""
    inputs = campaign_cost_inputs(served_day(), spec(), lease(), written_at=minute(90))
    assert inputs.projected_after == minute(90) and inputs.drained_at is None
    [note] = build_ledger(inputs, PRICES).notes[:1]
    assert note.startswith("Serving after 2026-12-03 13:00 UTC is projected")
    drained = build_ledger(inputs.model_copy(update={"drained_at": minute(1410)}), PRICES)
    assert not any("projected" in note for note in drained.notes)
    assert "the drain run ended at 2026-12-04 11:00 UTC (the campaign record)." in drained.notes[0]
    assert drained.serving_gpu_minutes == build_ledger(inputs, PRICES).serving_gpu_minutes  # the figures stay


def test_a_failed_stage_tears_down_and_nothing_is_served() -> None:
    campaign = report(
        (Stage.BRING_UP, StageStatus.COMPLETED, minute(0), minute(20)),
        (Stage.WEIGHTS_TO_NODES, StageStatus.FAILED, minute(20), minute(50)),
        (Stage.TEARDOWN, StageStatus.COMPLETED, minute(50), minute(60)),
    )
    ledger = ledger_of(campaign, lease())
    assert ledger.serving_gpu_minutes == 0
    assert lost(ledger, Cause.FAILURES_AND_ROLLBACKS) == 30 * GPUS
    assert lost(ledger, Cause.DRAIN_AND_TEARDOWN_MARGIN) == (10 + 4) * GPUS  # teardown, then the drain margin
    # Paid and unused from the teardown's end to the drain point: idle.
    assert lost(ledger, Cause.IDLE) == (1406 - 60) * GPUS
    assert ledger.utilisation == 0.0
    assert ledger.serving_started_by.startswith("nothing served")
    biggest = ledger.biggest_loss
    assert biggest is not None and biggest.cause is Cause.IDLE


def test_teardown_when_done_stops_serving_when_teardown_begins() -> None:
    campaign = served_day()
    line = campaign.begin(Stage.TEARDOWN, minute(100))
    campaign.end(line, StageStatus.COMPLETED, None, minute(110))
    ledger = ledger_of(campaign, lease(), written_at=minute(111))
    assert ledger.serving_gpu_minutes == 20 * GPUS  # 80 → 100
    assert lost(ledger, Cause.IDLE) == (1406 - 110) * GPUS
    assert ledger.serving_started_by.endswith("→ teardown began")
    resources = {r.name: r for r in ledger.other_resources}
    # The control plane ran from bring-up's start to teardown's end: 110 min.
    assert "EKS control plane" in resources
    assert resources["EKS control plane"].cost == pytest.approx(0.10 * 110 / 60, abs=1e-4)


def _network() -> NetworkIds:
    subnets = tuple(
        SubnetInfo(id=f"subnet-{i}", name=f"s{i}", availability_zone=f"us-east-2{z}", zone_id=f"use2-az{i}",
                   cidr=f"10.64.{16 * i}.0/20", public=public, control_plane=public)
        for i, (z, public) in enumerate([("a", True), ("b", True), ("a", False)])
    )
    return NetworkIds(
        vpc_id="vpc-1", subnets=subnets, gpu_subnet_id="subnet-2", public_subnet_ids=("subnet-0", "subnet-1"),
        control_plane_subnet_ids=("subnet-0", "subnet-1"), security_group_id="sg-1", internet_gateway_id="igw-1",
        public_route_table_id="rtb-1", private_route_table_id="rtb-2", nat_gateway_id="nat-1",
        nat_subnet_id="subnet-0", eip_allocation_id="eipalloc-1", s3_endpoint_id="vpce-1",
    )


def test_the_nat_gateway_and_public_addresses_are_priced_by_the_hour_and_no_gb_is_claimed() -> None:
    campaign = served_day()
    campaign.add(ClusterResult(
        kind="eks", name="capserve-k3-demo", region="us-east-2", endpoint="https://x", gpu_pool="gpu",
        nodes_ready=1, gpus_allocatable=8, network=_network(),
        system_pool=SystemPool(name="capserve-k3-demo-system", instance_type="m7i.large", node_count=2),
    ))
    line = campaign.begin(Stage.TEARDOWN, minute(100))
    campaign.end(line, StageStatus.COMPLETED, None, minute(110))
    resources = {r.name: r for r in ledger_of(campaign, lease(), written_at=minute(111)).other_resources}
    nat = resources["NAT gateway nat-1 (hours; GB processed not measured)"]
    assert nat.cost == pytest.approx(0.045 * 110 / 60, abs=1e-4) and "vpc.nat_gateway.gb" not in nat.detail
    addresses = resources["public IPv4 (NAT Elastic IP, 2 system nodes)"]
    assert addresses.cost == pytest.approx(3 * 0.005 * 110 / 60, abs=1e-4)


def test_a_failed_evaluation_is_not_serving() -> None:
    campaign = served_day()
    campaign.add(EvaluationResult(url="http://127.0.0.1:1", model="kimi-k3", profiles=["smoke"], verdict="fail"))
    ledger = ledger_of(campaign, lease())
    assert ledger.serving_gpu_minutes == 0
    assert ledger.serving_started_by == "nothing served: the evaluation failed its gates"


def test_a_campaign_that_never_got_capacity_costs_nothing() -> None:
    campaign = report((Stage.PLAN, StageStatus.COMPLETED, minute(-10), minute(-9)))
    campaign.skip(Stage.BRING_UP, "no capacity", minute(-8))
    ledger = ledger_of(campaign, None)
    section = ledger.report_section()
    assert (section["upfront_fee"], section["paid_gpu_hours"], section["serving_gpu_hours"]) == (0.0, 0.0, 0.0)
    assert section["utilisation"] is None and section["usd_per_million_output_tokens"] is None
    assert set(section["lost_gpu_hours"].values()) == {0.0}
    assert section["price_table_date"] == PRICES.date.isoformat()
    assert ledger.serving_started_by.startswith("nothing served")


def test_an_adopted_reservation_has_no_fee_here() -> None:
    ledger = ledger_of(served_day(), lease(upfront_fee=0.0, adopted=True, provider="existing-reservation"))
    assert ledger.adopted and ledger.upfront_fee == 0.0
    assert ledger.serving_gpu_minutes == (1406 - 80) * GPUS
    assert ledger.usd_per_million_output_tokens is None


def test_a_reservation_the_campaign_bought_in_an_earlier_run_keeps_its_fee() -> None:
    # The scheduled serve run (or a re-run) adopts the block by the campaign's tag: the fee is still this campaign's.
    ledger = ledger_of(served_day(), lease(upfront_fee=2832.0, adopted=True))
    assert not ledger.adopted and ledger.upfront_fee == 2832.0


def test_serving_that_begins_after_the_drain_point_is_none() -> None:
    window = BlockWindow.for_block(START, END, drain_before_end=timedelta(minutes=45))
    campaign = report((Stage.EVALUATE, StageStatus.COMPLETED, minute(1400), minute(1405)))
    interval, why = serving_interval(campaign, window)
    assert interval is None and "only after the drain point" in why


def test_the_report_carries_the_ledger_and_links_its_plots() -> None:
    campaign = served_day()
    ledger = ledger_of(campaign, lease())
    campaign.add(ledger)
    document = campaign.to_json()
    assert document["cost"]["paid_gpu_hours"] == 1440 * GPUS / 60
    markdown = campaign.to_markdown()
    assert "## Cost" in markdown and "docs/cost.md §1" in markdown
    assert "![reservation timeline](cost_timeline.png)" in markdown
    assert "![cost waterfall](cost_waterfall.png)" in markdown
    artifact = campaign.to_markdown(images=False)
    assert "![" not in artifact
    assert "| cause | GPU-h |" in artifact and "| from | to | cause |" in artifact  # the plots as tables


def offer(day: int, fee: float, hours: int = 24) -> Offer:
    start = START + timedelta(days=day)
    return Offer(
        provider="ec2-capacity-block", region="us-east-2", availability_zone="us-east-2a",
        offering_id=f"cbo-{day}-{hours}", start=start, end=start + timedelta(hours=hours),
        instance_type="p6-b300.48xlarge", instance_count=1, upfront_fee=fee,
    )  # fmt: skip


def test_the_offers_weighed_show_what_they_would_buy() -> None:
    with_estimate = spec().model_copy(
        update={"cost": CostSpec(expected_output_tokens_per_s=2400.0, throughput_source="report of k3-demo")}
    )
    day, week = offer(0, 2880.0), offer(1, 20160.0, hours=168)
    forecasts = offer_forecasts(with_estimate, [day, week], PRICES)
    # The time model's cold block for the spec's plan on the offer's instance type, as `capserve plan` prints it
    # (not docs/cost.md's fixed stages, which book a 75-minute start and a 30-minute evaluation).
    timeline = expected_timeline(with_estimate, day.instance_type, block_hours=24)
    assert timeline.vllm_cold_start_minutes < 75 and timeline.evaluation_minutes == 10
    lost = sum(minutes for _, minutes in timeline.stages()) + timeline.drain_before_end_minutes
    # The same stages lose the same minutes of either block: a week dilutes them.
    assert forecasts[0].expected_utilisation == pytest.approx((1440 - lost) / 1440)
    assert forecasts[1].expected_utilisation == pytest.approx((10080 - lost) / 10080)
    per_day, per_week = (f.expected_usd_per_million_output_tokens for f in forecasts)
    assert per_day is not None and per_week is not None and per_week < per_day
    request = ApprovalRequest(
        campaign_id="k3-demo", offer=day, approval_threshold_usd=2000, alternatives=1,
        cost_forecast=forecast_table(forecasts),
    )  # fmt: skip
    form = request.markdown()
    shown = f"{forecasts[0].expected_utilisation:.1%}"
    assert "expected utilisation" in form and shown in form and "report of k3-demo" in form
    # Without an estimate the form still shows the utilisation, and says why no cost per token.
    bare = forecast_table(offer_forecasts(spec(), [day], PRICES))
    assert shown in bare and "No throughput estimate" in bare


def test_scheduled_runs_come_from_the_reports_schedule() -> None:
    window = WindowFacts(block_start=START, block_end=END)
    schedule = LeaseSchedule(window=window, runs=(
        ScheduleEntry(name="drain-k3-demo", stage=ScheduledStage.DRAIN, scheduled_at=minute(1400), state="Scheduled"),
        ScheduleEntry(name="teardown-k3-demo", stage=ScheduledStage.TEARDOWN, scheduled_at=minute(1405),
                      state="Completed", fired_at=minute(1405)),
    ))  # fmt: skip
    marks = scheduled_runs(schedule)
    assert [(m.name, m.stage, m.scheduled_at, m.fired_at) for m in marks] == [
        ("drain-k3-demo", "drain", minute(1400), None),
        ("teardown-k3-demo", "teardown", minute(1405), minute(1405)),
    ]
    campaign = served_day()
    campaign.add(schedule)
    assert campaign_cost_inputs(campaign, spec(), lease(), written_at=minute(90)).scheduled_runs == marks
