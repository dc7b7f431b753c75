"""Metric math against hand-computed values from known synthetic timestamps (vLLM bench definitions)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from capserve.core.evaluation.metrics import Slo, compute_metrics, percentile
from capserve.core.evaluation.records import ClientStats, RequestRecord, RunRecord
from capserve.core.evaluation.workload import LoadSpec, plan_requests, poisson_delays, split_concurrency

CLIENT = ClientStats(cpu_percent=1, loop_lag_p99_ms=0, loop_lag_max_ms=0, dispatch_delay_p95_ms=0, uvloop=True)


def rec(index: int, send: float, chunks: list[float], completion: int | None, **kw: object) -> RequestRecord:
    return RequestRecord(
        index=index,
        prompt_tokens_requested=10,
        max_tokens=8,
        send=send,
        chunk_times=chunks,
        end=chunks[-1] if chunks else send,
        completion_tokens=completion,
        prompt_tokens=10,
        status=200,
        success=bool(chunks),
        **kw,
    )  # type: ignore[arg-type]


def run(*records: RequestRecord, start: float = 0.0, end: float = 2.0) -> RunRecord:
    return RunRecord(
        name="t", mode="closed", concurrency=2, start=start, end=end, requests=list(records), client=CLIENT
    )


def test_ttft_tpot_itl_e2el_exact() -> None:
    # Request A: sent at 0, chunks at 0.100, 0.120, 0.150, 0.200; usage says 4 tokens.
    # Request B: sent at 1.0, chunks at 1.300, 1.400; usage says 3 tokens (one chunk held two tokens).
    a = rec(0, 0.0, [0.100, 0.120, 0.150, 0.200], 4)
    b = rec(1, 1.0, [1.300, 1.400], 3)
    m = compute_metrics(run(a, b))
    assert m.ttft_ms.count == 2
    assert m.ttft_ms.mean == pytest.approx(200.0)  # (100 + 300) / 2
    # TPOT A = (200 − 100)/(4 − 1) = 33.33 ms; B = (400 − 300)/(3 − 1) = 50 ms
    assert m.tpot_ms.mean == pytest.approx((100 / 3 + 50) / 2)
    # ITL pools every gap: 20, 30, 50 (A) and 100 (B)
    assert m.itl_ms.count == 4
    assert m.itl_ms.mean == pytest.approx(50.0)
    assert m.itl_ms.p50 == pytest.approx(40.0)  # numpy linear between 30 and 50
    assert m.e2el_ms.p99 == pytest.approx(200 + (400 - 200) * 0.99)
    assert m.total_output_tokens == 7
    assert m.output_throughput == pytest.approx(3.5)
    assert m.request_throughput == pytest.approx(1.0)
    assert m.total_token_throughput == pytest.approx((20 + 7) / 2)


def test_output_tokens_fall_back_to_chunks_without_usage() -> None:
    m = compute_metrics(run(rec(0, 0.0, [0.1, 0.2, 0.3], None)))
    assert m.total_output_tokens == 3
    assert m.tpot_ms.mean == pytest.approx(100.0)


def test_one_token_requests_have_no_tpot_and_failures_count() -> None:
    failed = RequestRecord(
        index=2, prompt_tokens_requested=1, max_tokens=1, send=0.0, status=503, success=False, error_kind="http_status"
    )
    m = compute_metrics(run(rec(0, 0.0, [0.05], 1), failed))
    assert m.completed == 1 and m.failed == 1 and m.error_rate == 0.5
    assert m.tpot_ms.count == 0 and m.tpot_ms.p95 == 0.0
    assert m.itl_ms.count == 0


def test_goodput_requires_every_slo() -> None:
    fast = rec(0, 0.0, [0.1, 0.2], 2)  # TTFT 100, TPOT 100
    slow_first = rec(1, 0.0, [0.5, 0.55], 2)  # TTFT 500, TPOT 50
    m = compute_metrics(run(fast, slow_first), Slo(ttft_ms=200, tpot_ms=100))
    assert m.goodput == pytest.approx(0.5)  # 1 good request / 2 s
    assert m.goodput_fraction == pytest.approx(0.5)
    assert compute_metrics(run(fast), None).goodput is None


@pytest.mark.parametrize("q", [0, 1, 25, 50, 90, 95, 99, 99.9, 100])
def test_percentile_matches_numpy(q: float) -> None:
    values = [random.Random(7).uniform(0, 100) for _ in range(37)]
    values = [random.Random(i).expovariate(0.1) for i in range(37)]
    assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)), rel=1e-12)


def test_std_is_population_std() -> None:
    chunks = [rec(i, 0.0, [t], 1) for i, t in enumerate([0.1, 0.2, 0.4])]
    m = compute_metrics(run(*chunks))
    assert m.ttft_ms.std == pytest.approx(float(np.std([100, 200, 400])))


def test_poisson_schedule_rescaled_to_n_over_rate() -> None:
    delays = poisson_delays(100, rate=4.0, burstiness=1.0, rng=random.Random(3))
    assert delays[-1] == pytest.approx(25.0)
    assert all(b >= a for a, b in zip(delays, delays[1:], strict=False))


def test_plans_are_deterministic_and_sized() -> None:
    spec = LoadSpec(prompt={"tokens": 50, "range_ratio": 0.2}, output={"tokens": 10})  # type: ignore[arg-type]
    first, second = plan_requests(spec, 20, salt=1), plan_requests(spec, 20, salt=1)
    assert first == second
    assert all(40 <= p.prompt_tokens <= 60 and p.max_tokens == 10 for p in first)
    assert spec.requests_for(32) == 32 * spec.requests_per_stream and spec.requests_for(1) == spec.min_requests
    assert split_concurrency(5, 2) == [3, 2] and split_concurrency(1, 4) == [1]
