"""Ledger inputs read from report.json's stages and evaluation section."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from capserve.core.cost.adapters import intervals_from_report_stages, throughput_from_evaluation
from capserve.core.cost.causes import Cause
from capserve.core.cost.inputs import BlockWindow, CostInputs, Interval
from capserve.core.cost.ledger import build_ledger
from capserve.core.cost.prices import load_price_table

START = datetime(2026, 12, 3, 11, 30, tzinfo=UTC)


def stage(name: str, status: str, start_min: int, end_min: int | None) -> dict[str, object]:
    return {
        "name": name,
        "status": status,
        "started_at": (START + timedelta(minutes=start_min)).isoformat(),
        "ended_at": None if end_min is None else (START + timedelta(minutes=end_min)).isoformat(),
    }


def test_report_stages_become_intervals_and_a_failed_stage_is_a_failure() -> None:
    stages = [
        stage("plan", "completed", -300, -299),
        stage("acquire", "completed", -299, -290),
        stage("stage_weights", "completed", -290, -100),
        stage("bring_up", "completed", 0, 25),
        stage("weights_to_nodes", "completed", 25, 55),
        stage("rollout", "failed", 55, 150),
        stage("evaluate", "skipped", 150, 150),
        stage("teardown", "running", 150, None),
        stage("not_a_stage", "completed", 150, 160),
    ]
    intervals = intervals_from_report_stages(stages)
    assert [(i.cause, i.failed, i.label) for i in intervals] == [
        (Cause.BRING_UP, False, "bring_up"),
        (Cause.WEIGHTS_TO_NODES, False, "weights_to_nodes"),
        (Cause.VLLM_COLD_START, True, "rollout"),
    ]
    assert intervals[2].effective_cause is Cause.FAILURES_AND_ROLLBACKS
    # Through the ledger: 25 bring-up + 30 weights + 95 failure; the rest of the block before the drain is idle.
    ledger = build_ledger(
        CostInputs(
            campaign="k3",
            upfront_fee=2880,
            region="us-east-1",
            window=BlockWindow.for_block(START, START + timedelta(hours=24), drain_before_end=timedelta(minutes=45)),
            instance_count=1,
            gpus_per_instance=8,
            intervals=intervals,
        ),
        load_price_table(),
    )
    minutes = {c: m // 8 for c, m in ledger.lost_gpu_minutes.items()}
    assert minutes[Cause.FAILURES_AND_ROLLBACKS] == 95
    assert minutes[Cause.IDLE] == 1440 - 45 - 150
    assert ledger.serving_gpu_minutes == 0


def _level(
    name: str, concurrency: int | None, tps: float, valid: bool = True, mode: str = "closed"
) -> dict[str, object]:
    return {
        "name": name,
        "mode": mode,
        "concurrency": concurrency,
        "valid": valid,
        "metrics": {"output_throughput": tps},
    }


def test_throughput_levels_carry_their_own_gates() -> None:
    section = {
        "load": [
            _level("c8", 8, 900.0),
            _level("c32", 32, 2400.0),
            _level("c64", 64, 3100.0),
            _level("c128", 128, 3300.0, valid=False),  # the client was saturated
            _level("rate4", None, 500.0, mode="open"),
        ],
        "gates": [
            {"name": "p95_ttft_ms@c8", "passed": True},
            {"name": "p95_ttft_ms@c32", "passed": True},
            {"name": "error_rate@c32", "passed": True},
            {"name": "p95_ttft_ms@c64", "passed": False},
            {"name": "p95_ttft_ms@c128", "passed": None},
            {"name": "quality_accuracy", "passed": True},
        ],
    }
    points = throughput_from_evaluation(section)
    assert [(p.concurrency, p.passed_gates) for p in points] == [(8, True), (32, True), (64, False), (128, False)]


def test_an_evaluation_without_load_gives_no_throughput() -> None:
    assert throughput_from_evaluation({"load": None, "gates": []}) == []


def test_a_serving_interval_added_by_the_wiring_completes_the_picture() -> None:
    window = BlockWindow.for_block(START, START + timedelta(hours=24), drain_before_end=timedelta(minutes=45))
    intervals = intervals_from_report_stages(
        [
            stage("bring_up", "completed", 0, 20),
            stage("rollout", "completed", 20, 95),
            stage("evaluate", "completed", 95, 125),
        ]
    )
    intervals.append(Interval(cause=Cause.SERVING, start=START + timedelta(minutes=95), end=window.drain_at))
    ledger = build_ledger(
        CostInputs(
            campaign="k3",
            upfront_fee=2880,
            region="us-east-1",
            window=window,
            instance_count=1,
            gpus_per_instance=8,
            intervals=intervals,
        ),
        load_price_table(),
    )
    # Serving from the end of evaluation (125) to the drain (1395): 1270 minutes.
    assert ledger.serving_gpu_minutes == 1270 * 8


def test_an_interrupted_stage_is_not_a_failure() -> None:
    # A worker restart interrupted the rollout: the time went to vLLM's start, not to a failure of ours.
    intervals = intervals_from_report_stages(
        [stage("rollout", "interrupted", 20, 60), stage("drain", "completed", 1395, 1400)]
    )
    assert [(i.cause, i.failed) for i in intervals] == [
        (Cause.VLLM_COLD_START, False),
        (Cause.DRAIN_AND_TEARDOWN_MARGIN, False),
    ]
