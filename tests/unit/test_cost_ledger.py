"""The cost ledger, against ledgers computed by hand (the arithmetic is in the comments)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from capserve.core.cost.causes import Cause
from capserve.core.cost.inputs import BlockWindow, CostInputs, Interval, ScheduledRunMark, ThroughputPoint
from capserve.core.cost.ledger import CostLedger, build_ledger
from capserve.core.cost.prices import load_price_table
from capserve.core.cost.resources import Ec2InstanceUsage, EksControlPlaneUsage, S3Usage

START = datetime(2026, 12, 3, 11, 30, tzinfo=UTC)  # Capacity Blocks start and end at 11:30 UTC
END = START + timedelta(hours=24)
PRICES = load_price_table()


def at(hh_mm: str, *, day: int = 0) -> datetime:
    """A time on the block's first day (day=1: the next day), e.g. at("12:45")."""
    hours, minutes = (int(x) for x in hh_mm.split(":"))
    return datetime(2026, 12, 3 + day, hours, minutes, tzinfo=UTC)


def window() -> BlockWindow:
    # drain at end − 45 min = 10:45 next day; AWS terminates at end − 30 min = 11:00 next day.
    return BlockWindow.for_block(START, END, drain_before_end=timedelta(minutes=45))


def iv(cause: Cause, start: datetime, end: datetime, *, failed: bool = False, label: str = "") -> Interval:
    return Interval(cause=cause, start=start, end=end, failed=failed, label=label)


def inputs(intervals: list[Interval], **overrides: object) -> CostInputs:
    fields: dict[str, object] = {
        "campaign": "k3-test",
        "upfront_fee": 2880.0,  # $120 per instance-hour × 24 h: $0.25 per GPU-minute on 8 GPUs
        "region": "us-east-1",
        "window": window(),
        "instance_type": "p6-b300.48xlarge",
        "instance_count": 1,
        "gpus_per_instance": 8,
        "intervals": intervals,
    }
    fields.update(overrides)
    return CostInputs.model_validate(fields)


def known_day() -> list[Interval]:
    """A 24 h block with every stage, one overlap (node readiness starts before bring-up ends)."""
    return [
        iv(Cause.BRING_UP, at("11:45"), at("12:05")),
        iv(Cause.NODE_READINESS, at("12:00"), at("12:15")),
        iv(Cause.WEIGHTS_TO_NODES, at("12:15"), at("12:45")),
        iv(Cause.VLLM_COLD_START, at("12:45"), at("14:00")),
        iv(Cause.SERVING, at("14:00"), at("10:45", day=1)),  # rollout ready → drain
        iv(Cause.EVALUATION, at("14:00"), at("14:30")),  # runs on the ready endpoint: outranks serving
    ]


def test_a_24h_block_with_a_known_timeline() -> None:
    ledger = build_ledger(
        inputs(
            known_day(),
            throughput=[
                ThroughputPoint(concurrency=8, output_tokens_per_s=900, passed_gates=True),
                ThroughputPoint(concurrency=32, output_tokens_per_s=2400, passed_gates=True),
                ThroughputPoint(concurrency=64, output_tokens_per_s=3100, passed_gates=False),
            ],
            resources=[
                EksControlPlaneUsage(name="EKS control plane", hours=26),
                Ec2InstanceUsage(name="system node group", instance_type="m7i.large", count=2, hours=26),
            ],
        ),
        PRICES,
    )
    # Wall minutes by hand:
    #   waiting_for_bring_up 11:30–11:45 = 15        bring_up 11:45–12:00 = 15 (12:00–12:05 goes to
    #   node_readiness 12:00–12:15 = 15               node readiness, the later stage)
    #   weights_to_nodes 12:15–12:45 = 30             vllm_cold_start 12:45–14:00 = 75
    #   evaluation 14:00–14:30 = 30                   serving 14:30–10:45 = 9 h 30 + 10 h 45 = 1215
    #   drain_and_teardown_margin 10:45–11:00 = 15    aws_termination 11:00–11:30 = 30
    #   15+15+15+30+75+30+1215+15+30 = 1440 = 24 h.   GPU-minutes = wall minutes × 8 GPUs.
    assert ledger.paid_gpu_minutes == 1440 * 8 == 11520
    assert ledger.serving_gpu_minutes == 1215 * 8 == 9720
    assert ledger.lost_gpu_minutes == {
        Cause.WAITING_FOR_BRING_UP: 15 * 8,
        Cause.BRING_UP: 15 * 8,
        Cause.NODE_READINESS: 15 * 8,
        Cause.WEIGHTS_TO_NODES: 30 * 8,
        Cause.VLLM_COLD_START: 75 * 8,
        Cause.EVALUATION: 30 * 8,
        Cause.IDLE: 0,
        Cause.REDEPLOYS: 0,
        Cause.DRAIN_AND_TEARDOWN_MARGIN: 15 * 8,
        Cause.AWS_TERMINATION: 30 * 8,
        Cause.FAILURES_AND_ROLLBACKS: 0,
    }
    assert ledger.paid_gpu_minutes == ledger.serving_gpu_minutes + sum(ledger.lost_gpu_minutes.values())
    # Hours: paid 11520/60 = 192; serving 9720/60 = 162; utilisation 1215/1440 = 0.84375 ≥ target 0.8.
    assert ledger.paid_gpu_hours == 192.0
    assert ledger.serving_gpu_hours == 162.0
    assert ledger.utilisation == pytest.approx(0.84375)
    assert ledger.meets_target is True
    # Other resources: EKS 26 h × $0.10 = $2.60; system nodes 2 × 26 h × $0.1008 = $5.2416; total $7.8416.
    assert [r.cost for r in ledger.other_resources] == [pytest.approx(2.60), pytest.approx(5.2416)]
    assert ledger.total_cost == pytest.approx(2880 + 7.8416)
    # Throughput: c32 is the highest level that passed (c64 failed its gates): 2400 tok/s.
    # Tokens the serving hours can deliver: 2400 × 1215 min × 60 s = 174,960,000 = 174.96 M.
    assert ledger.throughput is not None and ledger.throughput.concurrency == 32
    assert ledger.output_tokens_servable == pytest.approx(174_960_000)
    assert ledger.usd_per_million_output_tokens == pytest.approx(2887.8416 / 174.96)
    # Had all 1440 minutes served: 2400 × 1440 × 60 = 207.36 M tokens.
    assert ledger.usd_per_million_output_tokens_if_fully_utilised == pytest.approx(2887.8416 / 207.36)
    # The fee is $0.25 per GPU-minute: cold start 600 × 0.25 = $150; serving 9720 × 0.25 = $2430.
    assert ledger.lost_cost[Cause.VLLM_COLD_START] == 150.0
    assert ledger.serving_cost == 2430.0
    assert ledger.serving_cost + sum(ledger.lost_cost.values()) == pytest.approx(2880.0)
    # The biggest loss is the cold start: 600 GPU-min = 10 GPU-h, 600/11520 of paid.
    biggest = ledger.biggest_loss
    assert biggest is not None and biggest.cause is Cause.VLLM_COLD_START
    assert biggest.gpu_hours == 10.0
    assert biggest.share_of_paid == pytest.approx(600 / 11520)
    assert "compile cache" in biggest.advice


def test_the_report_section_has_issue_15s_keys_and_adds_up() -> None:
    ledger = build_ledger(inputs(known_day()), PRICES)
    section = ledger.report_section()
    assert list(section)[:9] == [
        "currency",
        "upfront_fee",
        "paid_gpu_hours",
        "serving_gpu_hours",
        "utilisation",
        "lost_gpu_hours",
        "other_resources",
        "usd_per_million_output_tokens",
        "price_table_date",
    ]
    assert section["currency"] == "USD"
    assert section["price_table_date"] == "2026-12-01"
    assert section["lost_gpu_hours"]["vllm_cold_start"] == 10.0
    assert section["paid_gpu_minutes"] == section["serving_gpu_minutes"] + sum(section["lost_gpu_minutes"].values())
    assert sum(s["end_minute"] - s["start_minute"] for s in section["timeline"]) == 1440
    assert section["usd_per_million_output_tokens"] is None  # no throughput was measured
    markdown = ledger.markdown()
    assert "paid 11,520 GPU-min = serving 9,720 + lost 1,800" in markdown
    assert "| vllm_cold_start | 10.00 | 5.2% | $150.00 |" in markdown


def test_a_failed_rollout_goes_to_failures_and_rollbacks() -> None:
    intervals = [
        iv(Cause.BRING_UP, at("11:30"), at("12:00")),
        iv(Cause.WEIGHTS_TO_NODES, at("12:00"), at("12:30")),
        # First rollout: the startup probe ran out after 90 min.
        iv(Cause.VLLM_COLD_START, at("12:30"), at("14:00"), failed=True, label="rollout r1"),
        iv(Cause.FAILURES_AND_ROLLBACKS, at("14:00"), at("14:10"), label="roll back r1"),
        # Second rollout with a fixed configuration: cold start again, then evaluation, then serving.
        iv(Cause.VLLM_COLD_START, at("14:10"), at("15:25"), label="rollout r2"),
        iv(Cause.SERVING, at("15:25"), at("10:45", day=1)),
        iv(Cause.EVALUATION, at("15:25"), at("15:55")),
    ]
    ledger = build_ledger(inputs(intervals), PRICES)
    # failures_and_rollbacks: r1 12:30–14:00 = 90 + rollback 14:00–14:10 = 10 → 100 min × 8 = 800 GPU-min.
    # serving 15:55–10:45 = 8 h 5 + 10 h 45 = 1130 min; bring_up 30; weights 30; cold start (r2) 75;
    # evaluation 30; drain 15; AWS 30. 30+30+100+75+30+1130+15+30 = 1440.
    assert ledger.lost_gpu_minutes[Cause.FAILURES_AND_ROLLBACKS] == 100 * 8
    assert ledger.lost_gpu_minutes[Cause.VLLM_COLD_START] == 75 * 8
    assert ledger.lost_gpu_minutes[Cause.WAITING_FOR_BRING_UP] == 0
    assert ledger.serving_gpu_minutes == 1130 * 8
    assert ledger.lost_gpu_hours[Cause.FAILURES_AND_ROLLBACKS] == pytest.approx(800 / 60)
    assert ledger.utilisation == pytest.approx(1130 / 1440)
    assert ledger.biggest_loss is not None and ledger.biggest_loss.cause is Cause.FAILURES_AND_ROLLBACKS
    # 1130/1440 = 0.785 < 0.8: the report says the target was missed.
    assert ledger.meets_target is False
    assert "below target" in ledger.markdown()


def test_a_campaign_that_never_got_capacity_costs_nothing_and_divides_by_nothing() -> None:
    nothing = CostInputs(
        campaign="k3-test",
        upfront_fee=0,
        region="us-east-1",
        throughput=[ThroughputPoint(concurrency=8, output_tokens_per_s=900, passed_gates=True)],
    )
    ledger = build_ledger(nothing, PRICES)
    assert ledger.paid_gpu_minutes == ledger.serving_gpu_minutes == 0
    assert set(ledger.lost_gpu_minutes.values()) == {0}
    assert ledger.total_cost == 0
    assert ledger.utilisation is None and ledger.meets_target is None
    assert ledger.usd_per_million_output_tokens is None
    assert ledger.usd_per_million_output_tokens_if_fully_utilised is None
    assert ledger.output_tokens_servable is None
    assert ledger.biggest_loss is None
    section = ledger.report_section()
    assert section["upfront_fee"] == 0 and section["paid_gpu_hours"] == 0 and section["utilisation"] is None
    assert section["usd_per_million_output_tokens"] is None
    assert "No capacity was obtained" in ledger.markdown()


def test_without_capacity_resources_that_ran_are_still_priced() -> None:
    # Weights staged to S3 before acquire found nothing: 1,000 GB for 73 h = 0.1 GB-month ×1000 → 100 GB-month.
    ledger = build_ledger(
        CostInputs(
            campaign="k3-test",
            upfront_fee=0,
            region="us-east-1",
            resources=[S3Usage(name="weights in S3", gb_stored=1000, hours_stored=73)],
        ),
        PRICES,
    )
    # 1000 × 73 / 730 = 100 GB-month × $0.023 = $2.30.
    assert ledger.total_cost == pytest.approx(2.30)
    assert ledger.utilisation is None


def test_an_adopted_reservation_shows_hours_but_no_fee_per_token() -> None:
    ledger = build_ledger(
        inputs(
            known_day(),
            upfront_fee=0,
            adopted=True,
            throughput=[ThroughputPoint(concurrency=16, output_tokens_per_s=2000, passed_gates=True)],
            resources=[EksControlPlaneUsage(name="EKS control plane", hours=24)],
        ),
        PRICES,
    )
    # GPU-hours and utilisation are the same as for a bought block: the minutes were still paid by someone.
    assert ledger.paid_gpu_minutes == 11520 and ledger.serving_gpu_minutes == 9720
    assert ledger.upfront_fee == 0 and set(ledger.lost_cost.values()) == {0.0}
    assert ledger.usd_per_million_output_tokens is None
    assert ledger.usd_per_million_output_tokens_if_fully_utilised is None
    # Only what this campaign paid per token: $2.40 EKS ÷ (2000 × 1215 × 60 / 1e6 = 145.8 M tokens).
    assert ledger.other_usd_per_million_output_tokens == pytest.approx(2.40 / 145.8)
    assert any("Adopted reservation" in note for note in ledger.notes)
    section = ledger.report_section()
    assert section["adopted"] is True and section["upfront_fee"] == 0
    assert "adopted (paid outside this campaign)" in ledger.markdown()


def test_overlaps_follow_the_stated_precedence() -> None:
    intervals = [
        # A failure outranks the stage it overlaps.
        iv(Cause.WEIGHTS_TO_NODES, at("12:00"), at("13:00")),
        iv(Cause.WEIGHTS_TO_NODES, at("12:20"), at("12:30"), failed=True),
        # Serving claims only what nothing else claims, even when recorded past the drain point:
        # the drain margin and AWS's termination take 10:45–11:30 whatever was recorded.
        iv(Cause.SERVING, at("13:00"), at("11:30", day=1)),
        iv(Cause.EVALUATION, at("13:00"), at("13:20")),
        # Evaluation (a later stage) outranks a cold start recorded as still running.
        iv(Cause.VLLM_COLD_START, at("12:55"), at("13:10")),
    ]
    ledger = build_ledger(inputs(intervals), PRICES)
    minutes = {cause: m // 8 for cause, m in ledger.lost_gpu_minutes.items()}
    # waiting 11:30–12:00 = 30; weights 12:00–12:20 + 12:30–12:55 = 45; failed 12:20–12:30 = 10;
    # cold start 12:55–13:00 = 5 (13:00–13:10 goes to evaluation); evaluation 13:00–13:20 = 20;
    # serving 13:20–10:45 = 21 h 25 = 1285; drain 15; AWS 30. 30+45+10+5+20+1285+15+30 = 1440.
    assert minutes[Cause.WAITING_FOR_BRING_UP] == 30
    assert minutes[Cause.WEIGHTS_TO_NODES] == 45
    assert minutes[Cause.FAILURES_AND_ROLLBACKS] == 10
    assert minutes[Cause.VLLM_COLD_START] == 5
    assert minutes[Cause.EVALUATION] == 20
    assert minutes[Cause.DRAIN_AND_TEARDOWN_MARGIN] == 15
    assert minutes[Cause.AWS_TERMINATION] == 30
    assert ledger.serving_gpu_minutes // 8 == 1285


def test_a_failure_recorded_in_the_last_30_minutes_is_still_awss() -> None:
    intervals = [
        iv(Cause.SERVING, at("11:30"), at("10:45", day=1)),
        iv(Cause.FAILURES_AND_ROLLBACKS, at("10:50", day=1), at("11:20", day=1)),
    ]
    ledger = build_ledger(inputs(intervals), PRICES)
    # failure 10:50–11:00 = 10 (11:00–11:20 is AWS's); drain 10:45–10:50 = 5; AWS 30.
    assert ledger.lost_gpu_minutes[Cause.FAILURES_AND_ROLLBACKS] == 10 * 8
    assert ledger.lost_gpu_minutes[Cause.DRAIN_AND_TEARDOWN_MARGIN] == 5 * 8
    assert ledger.lost_gpu_minutes[Cause.AWS_TERMINATION] == 30 * 8


def test_gaps_are_waiting_before_the_first_record_and_idle_after() -> None:
    intervals = [
        iv(Cause.BRING_UP, at("13:30"), at("14:00")),
        # Nothing recorded 14:00–14:20 (a stage that was not timed): idle, not silently serving.
        iv(Cause.VLLM_COLD_START, at("14:20"), at("15:00")),
        iv(Cause.SERVING, at("15:00"), at("03:00", day=1)),
        # The campaign stopped serving at 03:00 (torn down when done): idle until the drain point.
    ]
    ledger = build_ledger(inputs(intervals), PRICES)
    minutes = {cause: m // 8 for cause, m in ledger.lost_gpu_minutes.items()}
    # waiting 11:30–13:30 = 120; idle 14:00–14:20 = 20 and 03:00–10:45 = 465 → 485.
    assert minutes[Cause.WAITING_FOR_BRING_UP] == 120
    assert minutes[Cause.IDLE] == 485
    assert ledger.serving_gpu_minutes // 8 == 12 * 60
    assert ledger.biggest_loss is not None and ledger.biggest_loss.cause is Cause.IDLE


def test_stages_too_short_to_round_to_a_minute_still_end_the_wait() -> None:
    # A fast campaign (the sandbox demo with --teardown-when-done): bring-up, evaluation and teardown all
    # within the block's first 20 seconds. Each rounds to nothing, but after them nothing ran: idle.
    first = START + timedelta(seconds=5)
    intervals = [
        iv(Cause.BRING_UP, first, first + timedelta(seconds=10)),
        iv(Cause.EVALUATION, first + timedelta(seconds=10), first + timedelta(seconds=20)),
    ]
    ledger = build_ledger(inputs(intervals), PRICES)
    assert ledger.lost_gpu_minutes[Cause.WAITING_FOR_BRING_UP] == 0
    assert ledger.lost_gpu_minutes[Cause.IDLE] == 1395 * 8
    assert ledger.biggest_loss is not None and ledger.biggest_loss.cause is Cause.IDLE


def test_a_block_with_nothing_recorded_is_all_waiting_until_the_drain() -> None:
    ledger = build_ledger(inputs([]), PRICES)
    # 11:30 → 10:45 next day = 1395 min waiting; then drain 15 and AWS 30.
    assert ledger.lost_gpu_minutes[Cause.WAITING_FOR_BRING_UP] == 1395 * 8
    assert ledger.serving_gpu_minutes == 0 and ledger.utilisation == 0.0
    assert ledger.meets_target is False


def test_time_outside_the_block_is_not_paid_gpu_time() -> None:
    intervals = [
        # The control plane and system nodes were built an hour before the block (no GPU needed), and bring-up
        # ran 10 min into the block for the GPU node group. A first control-plane attempt failed 10:40–10:50.
        iv(Cause.BRING_UP, at("10:30"), at("11:40")),
        iv(Cause.BRING_UP, at("10:40"), at("10:50"), failed=True),
        iv(Cause.SERVING, at("11:40"), at("10:45", day=1)),
        # Teardown ran past the block's end (cluster deletion after the instances were gone).
        iv(Cause.DRAIN_AND_TEARDOWN_MARGIN, at("10:45", day=1), at("11:50", day=1)),
    ]
    ledger = build_ledger(inputs(intervals), PRICES)
    assert ledger.paid_gpu_minutes == 1440 * 8
    # Inside: bring_up 11:30–11:40 = 10; serving 11:40–10:45 = 1385; drain 15; AWS 30 → 1440.
    assert ledger.lost_gpu_minutes[Cause.BRING_UP] == 10 * 8
    assert ledger.lost_gpu_minutes[Cause.FAILURES_AND_ROLLBACKS] == 0
    assert ledger.serving_gpu_minutes == 1385 * 8
    # Outside (wall minutes, overlaps resolved the same way): before the start, bring-up 10:30–10:40 and
    # 10:50–11:30 = 50 and the failure 10 (it outranks the stage); after the end, the teardown's 20 minutes.
    assert ledger.outside_block_minutes == {
        Cause.BRING_UP: 50,
        Cause.FAILURES_AND_ROLLBACKS: 10,
        Cause.DRAIN_AND_TEARDOWN_MARGIN: 20,
    }
    assert any("not paid GPU time" in note for note in ledger.notes)


def test_instants_round_to_the_nearest_minute_and_still_add_up() -> None:
    seconds = timedelta(seconds=1)
    intervals = [
        # 11:40:29.999 rounds down to 11:40; 12:10:30 rounds up to 12:11.
        Interval(cause=Cause.BRING_UP, start=at("11:40") + 29.999 * seconds, end=at("12:10") + 30 * seconds),
        # A 20-second interval rounds to nothing and disappears.
        Interval(cause=Cause.EVALUATION, start=at("12:20") + 5 * seconds, end=at("12:20") + 25 * seconds),
        Interval(cause=Cause.SERVING, start=at("12:11"), end=at("10:45", day=1)),
    ]
    ledger = build_ledger(inputs(intervals), PRICES)
    minutes = {cause: m // 8 for cause, m in ledger.lost_gpu_minutes.items()}
    assert minutes[Cause.WAITING_FOR_BRING_UP] == 10  # 11:30–11:40
    assert minutes[Cause.BRING_UP] == 31  # 11:40–12:11
    assert minutes[Cause.EVALUATION] == 0
    assert ledger.serving_gpu_minutes // 8 == 1440 - 10 - 31 - 15 - 30
    assert ledger.paid_gpu_minutes == ledger.serving_gpu_minutes + sum(ledger.lost_gpu_minutes.values())


def test_a_block_that_does_not_start_on_a_minute_still_adds_up() -> None:
    odd_start = START + timedelta(seconds=20)
    odd = BlockWindow.for_block(odd_start, odd_start + timedelta(hours=24), drain_before_end=timedelta(minutes=45))
    ledger = build_ledger(
        inputs([iv(Cause.SERVING, at("12:00"), at("10:45", day=1))], window=odd, instance_count=2), PRICES
    )
    assert ledger.gpus == 16
    assert ledger.paid_gpu_minutes == 1440 * 16
    assert ledger.paid_gpu_minutes == ledger.serving_gpu_minutes + sum(ledger.lost_gpu_minutes.values())


def test_no_level_that_passed_the_gates_means_no_cost_per_token() -> None:
    ledger = build_ledger(
        inputs(known_day(), throughput=[ThroughputPoint(concurrency=8, output_tokens_per_s=900, passed_gates=False)]),
        PRICES,
    )
    assert ledger.throughput is None
    assert ledger.usd_per_million_output_tokens is None
    assert "No load level passed the gates" in ledger.markdown()


def test_scheduled_runs_appear_in_the_timeline_table_in_time_order() -> None:
    runs = [
        ScheduledRunMark(name="teardown-k3-test", stage="teardown", scheduled_at=at("10:55", day=1)),
        ScheduledRunMark(name="bring-up-k3-test", stage="bring_up", scheduled_at=at("11:30"), fired_at=at("11:45")),
    ]
    rows = build_ledger(inputs(known_day(), scheduled_runs=runs), PRICES).timeline_table()
    names = [row for row in rows if "run `" in row]
    assert "bring-up-k3-test" in names[0] and "fired 2026-12-03 11:45" in names[0]
    teardown = rows.index(names[1])
    assert "drain_and_teardown_margin" in rows[teardown - 1]  # 10:45 segment, then the 10:55 run


def test_inputs_a_record_kept_with_the_clocks_rate_still_read_and_the_ledger_states_no_rate() -> None:
    kept = {**inputs(known_day()).model_dump(mode="json"), "simulated_rate": 1440.0}  # as an older record holds them
    ledger = build_ledger(CostInputs.model_validate(kept), PRICES)
    assert ledger == build_ledger(inputs(known_day()), PRICES)


def test_check_catches_figures_that_do_not_add_up() -> None:
    ledger = build_ledger(inputs(known_day()), PRICES)
    broken = CostLedger.model_validate({**ledger.model_dump(), "serving_gpu_minutes": ledger.serving_gpu_minutes + 8})
    with pytest.raises(AssertionError, match="paid 11520"):
        broken.check()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"intervals": [{"cause": "bring_up", "start": at("12:00"), "end": at("11:00")}]}, "ends .* before it starts"),
        ({"window": None}, "upfront_fee is set but there is no window"),
        ({"adopted": True}, "adopted reservation was paid outside"),
        ({"gpus_per_instance": 0}, "instance_count and gpus_per_instance"),
        ({"intervals": [{"cause": "lunch", "start": at("12:00"), "end": at("13:00")}]}, "intervals.0.cause"),
    ],
)
def test_bad_inputs_get_one_clear_error(change: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        inputs(**{"intervals": known_day(), **change})  # type: ignore[arg-type]


def test_a_drain_after_aws_termination_is_refused() -> None:
    with pytest.raises(ValidationError, match="drain before AWS terminates"):
        BlockWindow(
            start=START, end=END, aws_terminates_at=END - timedelta(minutes=30), drain_at=END - timedelta(minutes=20)
        )
