"""The evaluation spec: what to test, how hard, and the gates that turn numbers into a verdict.

Defaults are sized for a large MoE endpoint (slow first tokens) and finish in well under a minute
against a fast server; the load levels stay within what one generator process drives on a busy
2-core host (docs/load-client.md). ``EvaluationSpec()`` is valid; the campaign spec embeds it as
``evaluation:``. Numbers and booleans are strict: ``true`` is not a count and ``"8"`` is not a number.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, model_validator

_STRICT = ConfigDict(extra="forbid", frozen=True)


class LengthSpec(BaseModel):
    """A token length: fixed, or sampled uniformly in [n·(1−range_ratio), n·(1+range_ratio)].

    Same meaning as ``vllm bench serve --random-range-ratio`` (docs/evaluation.md §2).
    """

    model_config = _STRICT
    tokens: StrictInt = Field(default=128, ge=1, le=1_000_000, description="Nominal length in tokens.")
    range_ratio: StrictFloat = Field(
        default=0.0, ge=0.0, lt=1.0, description="0 = fixed length; r samples uniformly within ±r of `tokens`."
    )


class LoadSpec(BaseModel):
    """Sizes of the load profile: closed-loop concurrency levels and open-loop (Poisson) rates."""

    model_config = _STRICT
    concurrency_levels: tuple[StrictInt, ...] = Field(
        default=(1, 4, 16),
        max_length=32,
        description="Closed-loop runs: each level keeps exactly this many streams in flight (1..100000).",
    )
    request_rates: tuple[StrictFloat, ...] = Field(
        default=(8.0,), max_length=32, description="Open-loop runs: Poisson arrival rates in requests/s (empty = none)."
    )
    requests_per_stream: StrictInt = Field(
        default=8,
        ge=1,
        le=10_000,
        description="Closed loop: requests per level = concurrency × this (at least min_requests).",
    )
    min_requests: StrictInt = Field(default=16, ge=1, le=100_000, description="Lower bound on requests in every run.")
    open_loop_requests: StrictInt = Field(
        default=48, ge=1, le=100_000, description="Requests sent in each open-loop run."
    )
    open_loop_max_concurrency: StrictInt = Field(
        default=256, ge=1, le=100_000, description="Cap on in-flight requests of an open-loop run (the client's slots)."
    )
    burstiness: StrictFloat = Field(
        default=1.0, gt=0.0, le=100.0, description="Gamma shape of inter-arrival gaps; 1.0 = Poisson (as vLLM bench)."
    )
    prompt: LengthSpec = Field(default_factory=lambda: LengthSpec(tokens=128), description="Prompt length.")
    output: LengthSpec = Field(default_factory=lambda: LengthSpec(tokens=64), description="Output length (max_tokens).")
    ignore_eos: StrictBool = Field(
        default=True, description="Send vLLM's `ignore_eos` so every request generates exactly its output length."
    )
    warmup_requests: StrictInt = Field(
        default=2, ge=0, le=1000, description="Streamed requests before each run, excluded from metrics."
    )
    processes: StrictInt = Field(default=1, ge=1, le=64, description="Load-generator processes (one per spare core).")
    seed: StrictInt = Field(default=0, ge=0, le=2**63 - 1, description="Seed for lengths, prompts and arrival times.")
    request_timeout_s: StrictFloat = Field(
        default=600.0, gt=0, le=86_400, description="Total time allowed per request (MoE first tokens can be slow)."
    )
    run_timeout_s: StrictFloat = Field(
        default=900.0, gt=0, le=86_400, description="Wall-clock budget of one run (one level/rate)."
    )
    # Client self-checks: a saturated client makes a run invalid, not failed (docs/load-client.md).
    max_loop_lag_p99_ms: StrictFloat | None = Field(
        default=None,
        gt=0,
        le=60_000,
        description="Event-loop lag p99 above this invalidates the run; default: client_error_tolerance of the "
        "tightest latency gate (at least 5 ms), i.e. the most the client's own delays may move a gated number.",
    )
    client_error_tolerance: StrictFloat = Field(
        default=0.02,
        gt=0,
        le=0.5,
        description="Largest share of a latency gate the client's own delays may account for before a run is "
        "invalid (sets the default max_loop_lag_p99_ms).",
    )
    max_dispatch_delay_p95_ms: StrictFloat = Field(
        default=50.0, gt=0, le=60_000, description="Open loop: send-time lateness p95 above this invalidates the run."
    )
    max_client_cpu_percent: StrictFloat = Field(
        default=90.0, gt=0, le=100, description="Client process CPU above this (per process) invalidates the run."
    )
    # Client capacity: levels beyond these are refused before they run (docs/load-client.md).
    max_streams_per_process: StrictInt = Field(
        default=1024,
        ge=1,
        le=65_536,
        description="Most concurrent streams one generator process keeps open (also bounded by its open-file limit).",
    )
    client_events_per_s_per_process: StrictInt = Field(
        default=12_000,
        ge=100,
        le=1_000_000,
        description="Streamed chunks per second one generator process reads while staying accurate (one core "
        "saturates near 23,000/s with aiohttp and uvloop; about half of that is the budget).",
    )
    client_requests_per_s_per_process: StrictInt = Field(
        default=1000,
        ge=1,
        le=1_000_000,
        description="Open loop: requests per second one generator process can start on schedule.",
    )

    @model_validator(mode="after")
    def _levels_positive(self) -> LoadSpec:
        if any(c < 1 or c > 100_000 for c in self.concurrency_levels):
            raise ValueError("concurrency levels must be within 1..100000")
        if any(r <= 0 for r in self.request_rates):
            raise ValueError("request rates must be > 0 requests/s")
        if not self.concurrency_levels and not self.request_rates:
            raise ValueError("the load profile needs at least one concurrency level or request rate")
        return self

    def requests_for(self, concurrency: int) -> int:
        """Number of requests in the closed-loop run at ``concurrency``."""
        return max(self.min_requests, concurrency * self.requests_per_stream)


class SmokeSpec(BaseModel):
    """The smoke profile: a handful of single calls that must each work."""

    model_config = _STRICT
    check_timeout_s: StrictFloat = Field(
        default=60.0,
        gt=0,
        le=3600,
        description="Most time one smoke check may take; an endpoint that never answers fails the check after this.",
    )
    max_tokens: StrictInt = Field(default=32, ge=1, le=100_000, description="max_tokens of the smoke chat completions.")
    thinking_budget_tokens: StrictInt = Field(
        default=4096,
        ge=0,
        le=1_000_000,
        description="Added to max_tokens of the image and tool-call checks once the streamed chat showed the "
        "model thinks: its thinking comes before the answer or the call and counts against max_tokens.",
    )
    image: Literal["auto", "required", "skip"] = Field(
        default="auto",
        description="auto: send an image, skip with a note when the endpoint rejects it as text-only; "
        "required: a rejection fails; skip: do not send.",
    )
    tool_choice: Literal["auto", "required"] = Field(
        default="auto",
        description="auto exercises the server's tool-call parser (what mis-emits); required forces "
        "a call through structured outputs.",
    )


class QualitySpec(BaseModel):
    """The quality profile: a golden set scored by exact match with a confidence interval."""

    model_config = _STRICT
    golden_path: str | None = Field(
        default=None, max_length=4096, description="JSONL file in the golden format; None = the packaged golden set."
    )
    max_items: StrictInt | None = Field(
        default=None, ge=1, le=100_000, description="Use only the first N items (None = all)."
    )
    max_tokens: StrictInt = Field(
        default=256, ge=1, le=100_000, description="max_tokens per golden item for the answer (thinking apart)."
    )
    thinking: Literal["leave_room", "off"] = Field(
        default="leave_room",
        description="For a model that thinks (the catalog says so, or the smoke stream carried thinking): "
        "leave_room asks for max_tokens + thinking_budget_tokens and scores the answer after the thinking; off "
        "sends the catalog's chat-template switch that turns thinking off (refused for a catalog model without "
        "one; a model outside the catalog seen thinking gets room instead).",
    )
    thinking_budget_tokens: StrictInt = Field(
        default=8192,
        ge=0,
        le=1_000_000,
        description="Tokens added to max_tokens for the thinking of a thinking model (leave_room); vLLM caps "
        "the total at what the context leaves.",
    )
    concurrency: StrictInt = Field(default=4, ge=1, le=256, description="Golden items in flight at once.")
    seed: StrictInt = Field(
        default=1234, ge=0, le=2**63 - 1, description="Sampling seed sent with every request (temperature is 0)."
    )
    request_timeout_s: StrictFloat = Field(
        default=300.0, gt=0, le=86_400, description="Most time one golden item may take before it counts as wrong."
    )
    confidence: StrictFloat = Field(
        default=0.95, gt=0.5, lt=1.0, description="Confidence level of the Wilson interval."
    )


class GateSpec(BaseModel):
    """Thresholds of the verdict. Latency gates apply to every load run; None disables a gate."""

    model_config = _STRICT
    smoke_must_pass: StrictBool = Field(default=True, description="Any failed smoke check fails the verdict.")
    p95_ttft_ms: StrictFloat | None = Field(
        default=3000.0, gt=0, le=86_400_000, description="Max p95 time to first token (ms)."
    )
    p95_tpot_ms: StrictFloat | None = Field(
        default=100.0, gt=0, le=86_400_000, description="Max p95 time per output token (ms)."
    )
    max_error_rate: StrictFloat | None = Field(
        default=0.01, ge=0, le=1, description="Max fraction of load requests that failed because of the endpoint."
    )
    min_goodput_fraction: StrictFloat | None = Field(
        default=0.9, ge=0, le=1, description="Min fraction of requests meeting all SLOs below (goodput ÷ request rate)."
    )
    slo_ttft_ms: StrictFloat | None = Field(
        default=3000.0, gt=0, le=86_400_000, description="Goodput SLO on TTFT (ms), as vLLM --goodput ttft:."
    )
    slo_tpot_ms: StrictFloat | None = Field(
        default=100.0, gt=0, le=86_400_000, description="Goodput SLO on TPOT (ms), as vLLM --goodput tpot:."
    )
    slo_e2el_ms: StrictFloat | None = Field(
        default=None, gt=0, le=86_400_000, description="Goodput SLO on E2E latency (ms), as --goodput e2el:."
    )
    quality_floor: StrictFloat | None = Field(
        default=0.6, ge=0, le=1, description="Min exact-match accuracy on the golden set."
    )
    quality_regression_allowance: StrictFloat = Field(
        default=0.0,
        ge=0,
        le=1,
        description="Accuracy drop vs the last accepted result tolerated on top of the confidence interval.",
    )


class EvaluationSpec(BaseModel):
    """Everything the evaluate stage needs besides the endpoint itself."""

    model_config = _STRICT
    smoke: SmokeSpec = Field(default_factory=SmokeSpec, description="Smoke profile.")
    quality: QualitySpec = Field(default_factory=QualitySpec, description="Quality profile.")
    load: LoadSpec = Field(default_factory=LoadSpec, description="Load profile sizes.")
    gates: GateSpec = Field(default_factory=GateSpec, description="Verdict thresholds.")
    connect_timeout_s: StrictFloat = Field(
        default=10.0, gt=0, le=600, description="TCP connect timeout of every call to the endpoint."
    )
    timeout_s: StrictFloat = Field(
        default=3600.0,
        gt=0,
        le=7 * 86_400,
        description="Overall deadline of the evaluation: what is still pending then is stopped and reported as not "
        "judged (verdict invalid, never fail); `capserve eval --timeout` sets it.",
    )
    gate_budget_minutes: StrictInt = Field(
        default=10,
        ge=1,
        le=24 * 60,
        description="The gate before traffic: smoke and quality must fit in this many minutes of the block "
        "(docs/evaluation.md §8); the time model books it. The load profile is not part of the gate: "
        "`capserve eval --profile load` runs it on demand, within timeout_s.",
    )

    @model_validator(mode="after")
    def _gate_fits(self) -> EvaluationSpec:
        worst = gate_floor_s(self)
        if worst > self.gate_budget_minutes * 60:
            raise ValueError(
                f"evaluation.gate_budget_minutes {self.gate_budget_minutes}: the smoke checks and one golden item "
                f"may take {math.ceil(worst / 60)} min at worst ({len(SMOKE_CHECKS)} × smoke.check_timeout_s "
                f"{self.smoke.check_timeout_s:g} s + quality.request_timeout_s {self.quality.request_timeout_s:g} s); "
                "raise the budget or lower those timeouts"
            )
        return self


SMOKE_CHECKS = ("health", "models", "chat_stream", "image", "tool_call")
"""The smoke profile's calls, each bounded by ``smoke.check_timeout_s`` (docs/evaluation.md §1)."""


def gate_floor_s(spec: EvaluationSpec) -> float:
    """The longest the gate's least work may take: every smoke check and one round of golden items at their
    timeouts. A budget below this cannot be kept even by an endpoint that answers at the last moment allowed."""
    return len(SMOKE_CHECKS) * spec.smoke.check_timeout_s + spec.quality.request_timeout_s
