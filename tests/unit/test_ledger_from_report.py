"""Ledger inputs read from the report's typed stages and evaluation (no report.json key read by string)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from capserve.core.campaign_cost import measured_throughput, stage_intervals
from capserve.core.cost.causes import Cause
from capserve.core.cost.inputs import BlockWindow, CostInputs, Interval
from capserve.core.cost.ledger import build_ledger
from capserve.core.cost.prices import load_price_table
from capserve.core.evaluation.metrics import LoadMetrics
from capserve.core.evaluation.result import EvaluationResult, GateResult, LoadPointResult, LoadResult
from capserve.core.report import StageRecord
from capserve.core.stages import Stage, StageStatus

START = datetime(2026, 12, 3, 11, 30, tzinfo=UTC)


def stage(name: Stage, status: StageStatus, start_min: int, end_min: int | None) -> StageRecord:
    return StageRecord(
        name=name,
        status=status,
        started_at=START + timedelta(minutes=start_min),
        ended_at=None if end_min is None else START + timedelta(minutes=end_min),
    )


def test_report_stages_become_intervals_and_a_failed_stage_is_a_failure() -> None:
    stages = [
        stage(Stage.PLAN, StageStatus.COMPLETED, -300, -299),
        stage(Stage.ACQUIRE, StageStatus.COMPLETED, -299, -290),
        stage(Stage.STAGE_WEIGHTS, StageStatus.COMPLETED, -290, -100),
        stage(Stage.BRING_UP, StageStatus.COMPLETED, 0, 25),
        stage(Stage.WEIGHTS_TO_NODES, StageStatus.COMPLETED, 25, 55),
        stage(Stage.ROLLOUT, StageStatus.FAILED, 55, 150),
        stage(Stage.EVALUATE, StageStatus.SKIPPED, 150, 150),
        stage(Stage.TEARDOWN, StageStatus.RUNNING, 150, None),
    ]
    intervals = stage_intervals(stages)
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


def _level(name: str, concurrency: int | None, tps: float, valid: bool = True) -> LoadPointResult:
    metrics = LoadMetrics.model_construct(output_throughput=tps)  # the one figure the ledger reads
    return LoadPointResult.model_construct(
        name=name, mode="closed" if concurrency else "open", concurrency=concurrency, valid=valid, metrics=metrics
    )


def _gate(name: str, passed: bool | None) -> GateResult:
    return GateResult(name=name, value=None, threshold=1.0, passed=passed)


def _evaluation(load: LoadResult | None, gates: list[GateResult]) -> EvaluationResult:
    return EvaluationResult(url="http://endpoint", model="k3", profiles=["load"], verdict="pass", gates=gates,
                            load=load)


def test_throughput_levels_carry_their_own_gates() -> None:
    load = LoadResult.model_construct(points=[
        _level("c8", 8, 900.0),
        _level("c32", 32, 2400.0),
        _level("c64", 64, 3100.0),
        _level("c128", 128, 3300.0, valid=False),  # the client was saturated
        _level("rate4", None, 500.0),
    ])
    gates = [
        _gate("p95_ttft_ms@c8", True),
        _gate("p95_ttft_ms@c32", True),
        _gate("error_rate@c32", True),
        _gate("p95_ttft_ms@c64", False),
        _gate("p95_ttft_ms@c128", None),
        _gate("quality_accuracy", True),
    ]
    points = measured_throughput(_evaluation(load, gates))
    assert [(p.concurrency, p.output_tokens_per_s, p.passed_gates) for p in points] == [
        (8, 900.0, True), (32, 2400.0, True), (64, 3100.0, False), (128, 3300.0, False),
    ]  # fmt: skip


def test_an_evaluation_without_load_gives_no_throughput() -> None:
    assert measured_throughput(_evaluation(None, [])) == []


def test_a_serving_interval_added_by_the_wiring_completes_the_picture() -> None:
    window = BlockWindow.for_block(START, START + timedelta(hours=24), drain_before_end=timedelta(minutes=45))
    intervals = stage_intervals([
        stage(Stage.BRING_UP, StageStatus.COMPLETED, 0, 20),
        stage(Stage.ROLLOUT, StageStatus.COMPLETED, 20, 95),
        stage(Stage.EVALUATE, StageStatus.COMPLETED, 95, 125),
    ])
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
    intervals = stage_intervals(
        [stage(Stage.ROLLOUT, StageStatus.INTERRUPTED, 20, 60), stage(Stage.DRAIN, StageStatus.COMPLETED, 1395, 1400)]
    )
    assert [(i.cause, i.failed) for i in intervals] == [
        (Cause.VLLM_COLD_START, False),
        (Cause.DRAIN_AND_TEARDOWN_MARGIN, False),
    ]
