"""What the load client can drive and measure, so that its own limits are never blamed on the endpoint.

Three rules (docs/load-client.md explains the numbers):

1. **Refuse what cannot be driven, before it runs.** One generator process keeps at most
   ``max_streams_per_process`` streams open (and never more than its open-file limit allows), reads
   about ``client_events_per_s_per_process`` streamed chunks per second accurately, and starts about
   ``client_requests_per_s_per_process`` requests per second on schedule. Processes beyond the cores
   this host gives us add no capacity. A level above ``processes × streams`` (concurrency 100000 on
   a laptop) is refused in milliseconds with a message saying what the client can drive, instead of
   running for minutes and ending FAIL on errors the client caused.
2. **Predict from what was measured.** Once a run has measured how fast one stream delivers chunks,
   a higher level whose predicted chunk rate exceeds the client's budget is marked invalid without
   running.
3. **Judge the client's lag against the gates.** A busy host delays the client by a few
   milliseconds now and then; that moves a 3 s TTFT gate by nothing. A run is invalid only when the
   client's event-loop lag could move a gated latency by more than ``client_error_tolerance`` of its
   threshold (TTFT and E2E latency shift by the lag; TPOT by twice the lag spread over the output
   tokens), or when the client ran out of CPU.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from capserve.core.evaluation.metrics import percentile
from capserve.core.evaluation.records import RunRecord
from capserve.core.evaluation.spec import GateSpec, LoadSpec

# The generator process (capserve.tasks.evaluation.loadgen) reads the endpoint's Authorization header from this
# variable, not from its command line.
AUTHORIZATION_ENV = "CAPSERVE_LOADGEN_AUTHORIZATION"
# Warm-up requests must not hold the parent's READY wait for an endpoint that does not answer.
WARMUP_TIMEOUT_S = 60.0
# File descriptors a generator process needs besides its sockets (interpreter, uvloop, pipes, logs).
FD_RESERVE = 64
# Below this the lag of a 10 ms ticker is timer resolution, not load (uvloop rounds timers to 1 ms).
MIN_LAG_ALLOWANCE_MS = 5.0


class ClientCapacity(BaseModel):
    """How much load this host's generator processes can drive."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    processes: int = Field(ge=1, description="Generator processes that add capacity (at most one per core).")
    requested_processes: int = Field(ge=1, description="Processes the spec asked for.")
    cores: int = Field(ge=1, description="CPU cores this process may run on.")
    open_files_limit: int = Field(ge=1, description="Open-file limit of one generator process.")
    streams_per_process: int = Field(ge=0, description="Concurrent streams one process keeps open.")
    events_per_s: float = Field(gt=0, description="Streamed chunks per second all processes read accurately.")
    requests_per_s: float = Field(gt=0, description="Requests per second all processes start on schedule.")

    @property
    def max_streams(self) -> int:
        return self.processes * self.streams_per_process

    def describe(self) -> str:
        """'at most 1,024 streams (1 process × 1,024; open-file limit 20,000, 2 cores)'."""
        why = f"open-file limit {self.open_files_limit:,} per process, {self.cores} core{'s' * (self.cores != 1)}"
        if self.requested_processes > self.processes:
            why += f"; {self.requested_processes} processes asked, but only {self.processes} add capacity here"
        plural = "es" if self.processes != 1 else ""
        return (
            f"at most {self.max_streams:,} concurrent streams ({self.processes} process{plural} × "
            f"{self.streams_per_process:,}; {why}), about {self.events_per_s:,.0f} streamed chunks/s and "
            f"{self.requests_per_s:,.0f} new requests/s"
        )


def client_capacity(load: LoadSpec, *, cores: int, open_files_limit: int) -> ClientCapacity:
    """The capacity of ``load.processes`` generator processes on a host with ``cores`` usable cores."""
    cores = max(1, cores)
    processes = min(load.processes, cores)
    streams = max(0, min(load.max_streams_per_process, open_files_limit - FD_RESERVE))
    return ClientCapacity(
        processes=processes,
        requested_processes=load.processes,
        cores=cores,
        open_files_limit=max(1, open_files_limit),
        streams_per_process=streams,
        events_per_s=float(processes * load.client_events_per_s_per_process),
        requests_per_s=float(processes * load.client_requests_per_s_per_process),
    )


_FIX = "lower the level, or run the evaluation from a host with more cores (--processes / load.processes)"


def closed_loop_refusal(
    concurrency: int, capacity: ClientCapacity, chunks_per_s_per_stream: float | None
) -> str | None:
    """Why a closed-loop level cannot be driven by this client, or None when it can.

    ``chunks_per_s_per_stream`` is what an earlier run measured (None before any run).
    """
    if concurrency > capacity.max_streams:
        return (
            f"concurrency {concurrency:,} is more than this client can drive: {capacity.describe()}; {_FIX}"
        )
    if chunks_per_s_per_stream is not None:
        predicted = concurrency * chunks_per_s_per_stream
        if predicted > capacity.events_per_s:
            return (
                f"concurrency {concurrency:,} would stream about {predicted:,.0f} chunks/s "
                f"({chunks_per_s_per_stream:,.0f}/s per stream measured so far); this client reads about "
                f"{capacity.events_per_s:,.0f}/s accurately; {_FIX}"
            )
    return None


def open_loop_refusal(rate: float, load: LoadSpec, capacity: ClientCapacity) -> str | None:
    """Why an open-loop rate cannot be driven by this client, or None when it can."""
    if rate > capacity.requests_per_s:
        return f"rate {rate:g} requests/s is more than this client can start on schedule: {capacity.describe()}; {_FIX}"
    if load.open_loop_max_concurrency > capacity.max_streams:
        return (
            f"open_loop_max_concurrency {load.open_loop_max_concurrency:,} is more than this client can keep open: "
            f"{capacity.describe()}; lower load.open_loop_max_concurrency"
        )
    return None


def load_refusals(load: LoadSpec, capacity: ClientCapacity) -> dict[str, str]:
    """Every run of the load profile this client cannot drive, by run name (checked before anything runs)."""
    refused: dict[str, str] = {}
    for concurrency in load.concurrency_levels:
        reason = closed_loop_refusal(concurrency, capacity, None)
        if reason:
            refused[f"c{concurrency}"] = reason
    for rate in load.request_rates:
        reason = open_loop_refusal(rate, load, capacity)
        if reason:
            refused[f"rate{rate:g}"] = reason
    return refused


def lag_allowance_ms(load: LoadSpec, gates: GateSpec) -> float:
    """The event-loop lag p99 above which a run is invalid (rule 3 above)."""
    if load.max_loop_lag_p99_ms is not None:
        return load.max_loop_lag_p99_ms
    shortest_output = max(2, int(load.output.tokens * (1 - load.output.range_ratio)))
    # A lag of L ms moves TTFT and E2E latency by up to L, and TPOT by up to 2·L/(tokens − 1).
    bounds = [t for t in (gates.p95_ttft_ms, gates.slo_ttft_ms, gates.slo_e2el_ms) if t is not None]
    bounds += [t * (shortest_output - 1) / 2 for t in (gates.p95_tpot_ms, gates.slo_tpot_ms) if t is not None]
    if not bounds:
        return MIN_LAG_ALLOWANCE_MS
    return max(MIN_LAG_ALLOWANCE_MS, load.client_error_tolerance * min(bounds))


def chunks_per_s_per_stream(run: RunRecord) -> float | None:
    """How fast one stream delivered chunks in ``run`` (90th percentile over its requests), or None.

    Measured between a request's first and last chunk, so the prefill wait does not dilute it: a
    higher level can at most multiply this by its stream count.
    """
    rates = [
        (len(r.chunk_times) - 1) / (r.chunk_times[-1] - r.chunk_times[0])
        for r in run.requests
        if r.success and len(r.chunk_times) >= 3 and r.chunk_times[-1] > r.chunk_times[0]
    ]
    return percentile(rates, 90) if rates else None
