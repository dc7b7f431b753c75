"""Load metrics exactly as ``vllm bench serve`` derives them (vllm/benchmarks/serve.py ``calculate_metrics``).

Definitions (docs/evaluation.md §1):
- TTFT = first chunk with non-empty ``choices`` − send.
- E2EL = last token chunk − send (the usage chunk and ``[DONE]`` do not move it).
- TPOT = (E2EL − TTFT) / (output_tokens − 1), only for requests with more than one output token.
- ITL = every gap between consecutive token chunks, pooled over requests.
- Throughputs divide by the benchmark duration; goodput counts requests meeting *all* given SLOs
  (vLLM uses TPOT 0 for one-token requests there).
- Time to first answer token (capserve's own, not vLLM bench's): first chunk carrying answer text or a
  tool call − send, over the successful requests that got one. For a reasoning model TTFT is its first
  *thinking* token (vLLM bench counts any chunk); this is when its answer starts.
- Percentiles are numpy's default (linear interpolation between closest ranks); std is population std.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from capserve.core.evaluation.records import CLIENT_ERROR_KINDS, RequestRecord, RunRecord

PERCENTILES = (50, 90, 95, 99)


def percentile(values: Sequence[float], q: float) -> float:
    """``numpy.percentile(values, q)`` with the default 'linear' method, in pure Python."""
    if not values:
        raise ValueError("percentile of an empty sequence")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} outside 0..100")
    ordered = sorted(values)
    rank = q / 100 * (len(ordered) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


class Summary(BaseModel):
    """Mean, median, std and percentiles of one metric, in milliseconds."""

    model_config = ConfigDict(extra="forbid")
    count: int = Field(ge=0, description="Number of samples.")
    mean: float = Field(description="Arithmetic mean (ms).")
    median: float = Field(description="Median (ms).")
    std: float = Field(ge=0, description="Population standard deviation (ms), as numpy.std.")
    p50: float = Field(description="50th percentile (ms).")
    p90: float = Field(description="90th percentile (ms).")
    p95: float = Field(description="95th percentile (ms).")
    p99: float = Field(description="99th percentile (ms).")


def summarize_ms(seconds: Sequence[float]) -> Summary:
    """Summary of durations given in seconds, reported in ms; vLLM reports 0 for an empty list."""
    if not seconds:
        return Summary(count=0, mean=0, median=0, std=0, p50=0, p90=0, p95=0, p99=0)
    ms = [s * 1000 for s in seconds]
    mean = sum(ms) / len(ms)
    std = math.sqrt(sum((v - mean) ** 2 for v in ms) / len(ms))
    p = {q: percentile(ms, q) for q in PERCENTILES}
    return Summary(count=len(ms), mean=mean, median=p[50], std=std, p50=p[50], p90=p[90], p95=p[95], p99=p[99])


def ttft(record: RequestRecord) -> float:
    """Time to first token (s)."""
    return record.chunk_times[0] - record.send


def first_answer(record: RequestRecord) -> float | None:
    """Time to the first answer token (s); None when the request streamed no answer (all thinking)."""
    return None if record.first_answer is None else record.first_answer - record.send


def e2el(record: RequestRecord) -> float:
    """End-to-end latency (s): send → last token chunk."""
    return record.chunk_times[-1] - record.send


def tpot(record: RequestRecord) -> float | None:
    """Time per output token after the first (s); None when the request produced one token or fewer."""
    if record.output_tokens <= 1:
        return None
    return (e2el(record) - ttft(record)) / (record.output_tokens - 1)


def itls(record: RequestRecord) -> list[float]:
    """Every gap between consecutive token chunks (s)."""
    times = record.chunk_times
    return [later - earlier for earlier, later in itertools.pairwise(times)]


class Slo(BaseModel):
    """Goodput SLOs in ms; None = not part of the goodput condition (vLLM ``--goodput``)."""

    model_config = ConfigDict(extra="forbid")
    ttft_ms: float | None = Field(default=None, gt=0, description="TTFT must be ≤ this.")
    tpot_ms: float | None = Field(default=None, gt=0, description="TPOT must be ≤ this.")
    e2el_ms: float | None = Field(default=None, gt=0, description="E2E latency must be ≤ this.")

    @property
    def empty(self) -> bool:
        return self.ttft_ms is None and self.tpot_ms is None and self.e2el_ms is None


class LoadMetrics(BaseModel):
    """What ``vllm bench serve`` prints for one run, named the same way."""

    model_config = ConfigDict(extra="forbid")
    completed: int = Field(ge=0, description="Successful requests.")
    failed: int = Field(ge=0, description="Requests that failed because of the endpoint.")
    client_failed: int = Field(
        default=0, ge=0, description="Requests that failed because of the client (not counted against the endpoint)."
    )
    duration_s: float = Field(ge=0, description="Benchmark duration: start → last request finished.")
    total_input_tokens: int = Field(ge=0, description="Sum of prompt tokens of successful requests.")
    total_output_tokens: int = Field(ge=0, description="Sum of output tokens of successful requests.")
    request_throughput: float = Field(ge=0, description="Completed requests per second.")
    output_throughput: float = Field(ge=0, description="Output tokens per second.")
    total_token_throughput: float = Field(ge=0, description="(Input + output) tokens per second.")
    goodput: float | None = Field(default=None, ge=0, description="Requests/s meeting every SLO (None: no SLO given).")
    goodput_fraction: float | None = Field(default=None, ge=0, le=1, description="Good requests ÷ completed requests.")
    error_rate: float = Field(
        ge=0, le=1, description="Endpoint failures ÷ requests the endpoint was judged on (client failures excluded)."
    )
    ttft_ms: Summary = Field(description="Time to first token (any chunk with choices, thinking included).")
    first_answer_ms: Summary = Field(
        default_factory=lambda: summarize_ms([]),
        description="Time to first answer token (content or tool call, thinking excluded), over the successful "
        "requests that streamed an answer (count says how many).",
    )
    tpot_ms: Summary = Field(description="Time per output token (excluding the first).")
    itl_ms: Summary = Field(description="Inter-token (inter-chunk) latency, pooled.")
    e2el_ms: Summary = Field(description="End-to-end latency.")


def _is_good(record: RequestRecord, slo: Slo) -> bool:
    # vLLM compares SLO ≥ value with TPOT taken as 0 for one-token requests.
    checks = [
        (slo.ttft_ms, ttft(record)),
        (slo.tpot_ms, tpot(record) or 0.0),
        (slo.e2el_ms, e2el(record)),
    ]
    return all(limit / 1000 >= value for limit, value in checks if limit is not None)


def compute_metrics(
    run: RunRecord, slo: Slo | None = None, client_error_kinds: frozenset[str] = CLIENT_ERROR_KINDS
) -> LoadMetrics:
    """Derive the vLLM-named metrics of one run from its raw request records.

    Failures whose kind is in ``client_error_kinds`` are the client's: counted apart and left out of
    the error rate (a saturated client must not fail the endpoint).
    """
    ok = [r for r in run.requests if r.success and r.chunk_times]
    failures = [r for r in run.requests if not (r.success and r.chunk_times)]
    client_failed = sum(1 for r in failures if (r.error_kind or "client") in client_error_kinds)
    failed = len(failures) - client_failed
    duration = max(run.end - run.start, 1e-9)
    total_in = sum(r.prompt_tokens if r.prompt_tokens is not None else r.prompt_tokens_requested for r in ok)
    total_out = sum(r.output_tokens for r in ok)
    tpots = [value for value in (tpot(r) for r in ok) if value is not None]
    goodput = goodput_fraction = None
    if slo is not None and not slo.empty:
        good = sum(1 for r in ok if _is_good(r, slo))
        goodput = good / duration
        goodput_fraction = good / len(ok) if ok else 0.0
    return LoadMetrics(
        completed=len(ok),
        failed=failed,
        client_failed=client_failed,
        duration_s=duration,
        total_input_tokens=total_in,
        total_output_tokens=total_out,
        request_throughput=len(ok) / duration,
        output_throughput=total_out / duration,
        total_token_throughput=(total_in + total_out) / duration,
        goodput=goodput,
        goodput_fraction=goodput_fraction,
        error_rate=failed / (len(ok) + failed) if ok or failed else 0.0,
        ttft_ms=summarize_ms([ttft(r) for r in ok]),
        first_answer_ms=summarize_ms([t for t in (first_answer(r) for r in ok) if t is not None]),
        tpot_ms=summarize_ms(tpots),
        itl_ms=summarize_ms([gap for r in ok for gap in itls(r)]),
        e2el_ms=summarize_ms([e2el(r) for r in ok]),
    )
