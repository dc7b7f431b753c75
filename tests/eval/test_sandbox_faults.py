"""Smoke checks and the load generator against the sandbox server with injected faults.

Each fault must give a clear failed check (or a failed request of the right kind) while the rest
of the run goes on and is reported.
"""

from __future__ import annotations

import httpx
import pytest
from capserve_sandbox.openai_server import Dist, Faults, SandboxConfig, serve

from capserve.core.evaluation.result import summarize_run
from capserve.core.evaluation.spec import EvaluationSpec, LoadSpec
from capserve.tasks.evaluation.control import make_client, run_smoke_checks, score_golden
from capserve.tasks.evaluation.load import run_point

SPEC = EvaluationSpec()


def smoke_against(config: SandboxConfig) -> dict[str, tuple[str, str]]:
    with serve(config) as url, make_client(url, SPEC, None) as client:
        result = run_smoke_checks(client, config.model, SPEC.smoke)
    return {c.name: (c.status, c.detail) for c in result.checks}


def test_healthy_sandbox_passes_every_check() -> None:
    checks = smoke_against(SandboxConfig())
    assert {name: status for name, (status, _) in checks.items()} == {
        "health": "passed",
        "models": "passed",
        "chat_stream": "passed",
        "image": "passed",
        "tool_call": "passed",
    }


def test_stream_cut_fails_chat_check_and_the_rest_still_runs() -> None:
    checks = smoke_against(SandboxConfig(faults=Faults(stream_cut_rate=1.0, cut_after_chunks=2)))
    status, detail = checks["chat_stream"]
    assert status == "failed" and "cut" in detail
    assert checks["tool_call"][0] == "passed" and checks["models"][0] == "passed"


def test_5xx_fails_generation_checks_with_the_status_named() -> None:
    checks = smoke_against(SandboxConfig(faults=Faults(http_5xx_rate=1.0)))
    assert checks["health"][0] == "passed" and checks["models"][0] == "passed"
    for name in ("chat_stream", "image", "tool_call"):
        assert checks[name][0] == "failed" and "503" in checks[name][1]


def test_malformed_tool_call_is_caught_not_trusted() -> None:
    checks = smoke_against(SandboxConfig(faults=Faults(malformed_tool_call_rate=1.0), vision=False))
    assert checks["tool_call"][0] == "failed" and "not JSON" in checks["tool_call"][1]
    assert checks["image"][0] == "skipped" and "text-only" in checks["image"][1]
    assert checks["chat_stream"][0] == "passed"


def test_quality_scores_a_known_accuracy() -> None:
    spec = EvaluationSpec(quality={"max_items": 20})  # type: ignore[arg-type]
    with serve(SandboxConfig(quality_accuracy=0.0)) as url, make_client(url, spec, None) as client:
        result = score_golden(client, "sandbox-model", spec.quality)
    assert (result.total, result.correct, result.errors) == (20, 0, 0)
    assert result.ci_low == 0.0 and 0 < result.ci_high < 0.25


def test_load_run_reports_each_failure_kind_and_keeps_going() -> None:
    spec = LoadSpec(output={"tokens": 6}, prompt={"tokens": 8}, warmup_requests=0, min_requests=40)  # type: ignore[arg-type]
    faults = Faults(http_5xx_rate=0.25, stream_cut_rate=0.25, cut_after_chunks=1)
    with serve(SandboxConfig(faults=faults, seed=3)) as url:
        record = run_point(url, "sandbox-model", spec, name="c4", concurrency=4)
    point = summarize_run(record, spec, SPEC.gates)
    assert point.metrics.completed + point.metrics.failed == 40
    assert point.errors.get("http_status", 0) > 0 and point.errors.get("stream_cut", 0) > 0
    assert point.metrics.completed > 0 and point.metrics.ttft_ms.count == point.metrics.completed


@pytest.mark.slow
@pytest.mark.solo  # the other test processes would take the CPU the measurement is about
def test_injected_ttft_measured_within_2ms_at_64_streams() -> None:
    """The issue's own accuracy requirement: known TTFT, 64 concurrent streams, error < 2 ms.

    The sandbox reports its own clock (CLOCK_MONOTONIC, shared with the generator on this host).
    The time a request waits in the server's intake queue before its handler runs is real server
    latency, not measurement error, so it is taken out: measured TTFT − (server arrival − send)
    must equal the injected TTFT within 2 ms.
    """
    injected_ms = 50.0
    spec = LoadSpec(output={"tokens": 8}, prompt={"tokens": 8}, warmup_requests=0)  # type: ignore[arg-type]
    config = SandboxConfig(ttft=Dist(mean_ms=injected_ms), itl=Dist(mean_ms=5.0), record_timings=True)
    with serve(config) as url:
        record = run_point(url, "sandbox-model", spec, name="c64", concurrency=64)
        timings = httpx.get(f"{url}/sandbox/timings").json()
    # Prompts start with "Request <index>:" (workload.synthetic_prompt), which joins the two sides.
    by_index = {int(t["prompt_head"].split()[1].rstrip(":")): t for t in timings}
    errors = []
    for r in record.requests:
        assert r.success, r.error
        truth = by_index[r.index]
        measured_ms = (r.chunk_times[0] - r.send) * 1000
        queue_ms = (truth["arrival"] - r.send) * 1000
        errors.append(measured_ms - queue_ms - injected_ms)
    assert len(errors) == spec.requests_for(64)
    errors.sort()
    median = errors[len(errors) // 2]
    # The median, not the tail: a shared 2-core CI box can preempt any single read by milliseconds.
    assert abs(median) < 2.0, f"median TTFT error {median:.2f} ms (p95 {errors[int(len(errors) * 0.95)]:.2f} ms)"
