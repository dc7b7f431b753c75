"""Gates and the verdict: pass, fail, invalid (saturated client), quality regression vs a baseline."""

from __future__ import annotations

from capserve.core.evaluation.records import ClientStats, RequestRecord, RunRecord
from capserve.core.evaluation.result import (
    EvaluationResult,
    LoadResult,
    QualityResult,
    SmokeResult,
    evaluate_gates,
    summarize_run,
)
from capserve.core.evaluation.smoke import SmokeCheck, check_tool_call
from capserve.core.evaluation.spec import EvaluationSpec, GateSpec, LoadSpec


def _run(ttft_s: float, cpu: float = 5.0, lag: float = 0.5) -> RunRecord:
    client = ClientStats(
        cpu_percent=cpu, loop_lag_p99_ms=lag, loop_lag_max_ms=lag, dispatch_delay_p95_ms=0, uvloop=True
    )
    reqs = [
        RequestRecord(
            index=i,
            prompt_tokens_requested=5,
            max_tokens=3,
            send=0.0,
            chunk_times=[ttft_s, ttft_s + 0.01, ttft_s + 0.02],
            completion_tokens=3,
            status=200,
            success=True,
        )
        for i in range(10)
    ]
    return RunRecord(name="c4", mode="closed", concurrency=4, start=0, end=1, requests=reqs, client=client)


def _quality(correct: int, total: int = 50) -> QualityResult:
    from capserve.core.evaluation.quality import wilson_interval

    low, high = wilson_interval(correct, total)
    return QualityResult(
        source="packaged",
        total=total,
        correct=correct,
        accuracy=correct / total,
        ci_low=low,
        ci_high=high,
        confidence=0.95,
    )


def test_pass_and_fail_on_latency_gate() -> None:
    spec = EvaluationSpec(gates=GateSpec(p95_ttft_ms=200))
    fast = LoadResult(points=[summarize_run(_run(0.1), spec.load, spec.gates)])
    gates, verdict = evaluate_gates(spec, None, None, fast)
    assert verdict == "pass"
    ttft_gate = next(g for g in gates if g.name == "p95_ttft_ms@c4")
    assert ttft_gate.value == 100.0 and ttft_gate.threshold == 200 and ttft_gate.passed
    slow = LoadResult(points=[summarize_run(_run(0.5), spec.load, spec.gates)])
    gates, verdict = evaluate_gates(spec, None, None, slow)
    assert verdict == "fail" and next(g for g in gates if g.name == "p95_ttft_ms@c4").passed is False


def test_saturated_client_makes_the_run_invalid_not_failed() -> None:
    spec = EvaluationSpec(gates=GateSpec(p95_ttft_ms=200), load=LoadSpec(max_loop_lag_p99_ms=5))
    point = summarize_run(_run(0.5, lag=40.0), spec.load, spec.gates)
    assert not point.valid and "event-loop lag" in point.invalid_reasons[0]
    gates, verdict = evaluate_gates(spec, None, None, LoadResult(points=[point]))
    assert verdict == "invalid"
    assert next(g for g in gates if g.name == "p95_ttft_ms@c4").passed is None


def test_a_failed_smoke_check_fails_the_verdict_and_is_named() -> None:
    smoke = SmokeResult(
        checks=[
            SmokeCheck(name="health", status="passed"),
            SmokeCheck(name="tool_call", status="failed", detail="not JSON"),
        ]
    )
    gates, verdict = evaluate_gates(EvaluationSpec(), smoke, None, None)
    assert verdict == "fail" and gates[0].note == "tool_call" and gates[0].value == 1


def test_quality_floor_and_regression_beyond_the_interval() -> None:
    spec = EvaluationSpec(gates=GateSpec(quality_floor=0.5))
    baseline = EvaluationResult(url="u", model="m", profiles=["quality"], verdict="pass", quality=_quality(45))
    _, small_drop = evaluate_gates(spec, None, _quality(43), None, baseline)  # 0.90 → 0.86: within the CI
    assert small_drop == "pass"
    gates, big_drop = evaluate_gates(spec, None, _quality(30), None, baseline)  # 0.90 → 0.60
    assert big_drop == "fail"
    drop = next(g for g in gates if g.name == "quality_drop_vs_baseline")
    assert drop.value is not None and drop.value > drop.threshold
    _, below_floor = evaluate_gates(spec, None, _quality(20), None, None)
    assert below_floor == "fail"


def test_report_section_shape() -> None:
    spec = EvaluationSpec()
    load = LoadResult(points=[summarize_run(_run(0.1), spec.load, spec.gates)])
    gates, verdict = evaluate_gates(spec, None, _quality(40), load)
    result = EvaluationResult(
        url="u", model="m", profiles=["quality", "load"], verdict=verdict, gates=gates, quality=_quality(40), load=load
    )
    section = result.report_section()
    assert {"verdict", "gates", "smoke", "quality", "load"} <= set(section)
    assert set(section["gates"][0]) >= {"name", "value", "threshold", "passed"}
    assert "| c4 |" in result.markdown()


def test_tool_call_schema_check_catches_mis_emission() -> None:
    def answer(args: object) -> dict[str, object]:
        call = {"function": {"name": "get_weather", "arguments": args}}
        return {"choices": [{"message": {"tool_calls": [call]}}]}

    assert check_tool_call(answer('{"city": "Paris"}')) == []
    assert "not JSON" in check_tool_call(answer('{"city": '))[0]
    assert "violate the schema" in check_tool_call(answer('{"city": 3}'))[0]
    assert "violate the schema" in check_tool_call(answer('{"town": "Paris"}'))[0]
    assert "no tool_calls" in check_tool_call({"choices": [{"message": {"content": "sunny"}}]})[0]
