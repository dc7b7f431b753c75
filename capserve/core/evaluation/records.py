"""Raw per-request timestamps recorded by the load generator; every load metric is derived from these.

Timestamps are seconds on the host's monotonic clock (``time.perf_counter``, CLOCK_MONOTONIC on
Linux, shared by every process of the host), so records from several generator processes merge.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

ErrorKind = Literal[
    "http_status", "stream_cut", "error_event", "no_tokens", "timeout", "connection", "client", "cancelled"
]
# Failures the client caused (local resource limits such as too many open files or no free port, a
# connection pool with no free slot, a request stopped at the evaluation's deadline): never counted
# against the endpoint, and they make the run invalid. A timeout counts here too when the client was
# saturated during the run (result.summarize_run).
CLIENT_ERROR_KINDS: frozenset[str] = frozenset({"client", "cancelled"})


class RequestRecord(BaseModel):
    """One request of a load run, as measured on the client."""

    model_config = ConfigDict(extra="forbid")
    index: int = Field(ge=0, description="Position in the run's request list.")
    prompt_tokens_requested: int = Field(ge=0, description="Nominal prompt length we generated.")
    max_tokens: int = Field(ge=1, description="Output length we asked for.")
    scheduled: float | None = Field(
        default=None, description="Open loop: planned send time; closed loop: slot free time."
    )
    send: float = Field(description="perf_counter just before the POST (vLLM bench's `st`).")
    headers: float | None = Field(default=None, description="Response headers received (TTFB, not TTFT).")
    chunk_times: list[float] = Field(
        default_factory=list, description="Arrival of every SSE chunk with non-empty `choices` (a token event)."
    )
    first_content: float | None = Field(
        default=None, description="First chunk whose delta carried output: thinking, answer text or a tool call."
    )
    first_answer: float | None = Field(
        default=None,
        description="First chunk whose delta carried answer text (content) or a tool call, thinking excluded; "
        "None when the request's output was all thinking.",
    )
    end: float | None = Field(default=None, description="Stream closed ([DONE] or EOF).")
    prompt_tokens: int | None = Field(default=None, ge=0, description="usage.prompt_tokens from the server.")
    completion_tokens: int | None = Field(default=None, ge=0, description="usage.completion_tokens from the server.")
    status: int | None = Field(default=None, description="HTTP status code.")
    success: bool = Field(default=False, description="HTTP 200, at least one token chunk, and a complete stream.")
    error_kind: ErrorKind | None = Field(default=None, description="Why the request failed.")
    error: str | None = Field(default=None, max_length=500, description="Short error text (never carries secrets).")

    @property
    def output_tokens(self) -> int:
        """usage.completion_tokens when the server sent usage, else the number of token chunks."""
        return self.completion_tokens if self.completion_tokens is not None else len(self.chunk_times)


class ClientStats(BaseModel):
    """The generator measuring itself, per process; merged by taking the worst process."""

    model_config = ConfigDict(extra="forbid")
    processes: int = Field(default=1, ge=1, description="Generator processes in the run.")
    cpu_percent: float = Field(ge=0, description="Max over processes of process CPU time ÷ wall time × 100.")
    loop_lag_p99_ms: float = Field(ge=0, description="p99 lateness of a periodic 10 ms event-loop ticker.")
    loop_lag_max_ms: float = Field(ge=0, description="Worst lateness of that ticker.")
    dispatch_delay_p95_ms: float = Field(ge=0, description="p95 of actual send − scheduled send.")
    uvloop: bool = Field(description="Whether uvloop drove the event loop.")


class RunRecord(BaseModel):
    """One load run (a concurrency level or a request rate): raw records plus the client's health."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(max_length=64, description="Run label, e.g. 'c8' or 'rate4'.")
    mode: Literal["closed", "open"] = Field(description="closed = fixed concurrency; open = Poisson arrivals.")
    concurrency: int | None = Field(default=None, ge=1, description="Closed loop: streams in flight.")
    request_rate: float | None = Field(default=None, gt=0, description="Open loop: target requests/s.")
    start: float = Field(description="Benchmark start (after warmup), perf_counter seconds.")
    end: float = Field(description="When the last request finished, perf_counter seconds.")
    requests: list[RequestRecord] = Field(default_factory=list, description="Every measured request.")
    client: ClientStats = Field(description="Client self-measurement.")
