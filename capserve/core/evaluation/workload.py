"""Pure builders for the load profile: synthetic prompts, sampled lengths, arrival schedules, payloads."""

from __future__ import annotations

import random
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from capserve.core.evaluation.spec import LengthSpec, LoadSpec

# Common short English words: about one token each in BPE tokenizers, so N words ≈ N tokens.
_WORDS = (
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "that",
    "it",
    "for",
    "on",
    "was",
    "with",
    "as",
    "be",
    "at",
    "by",
    "this",
    "had",
    "not",
    "are",
    "but",
    "from",
    "or",
    "have",
    "an",
    "they",
    "which",
    "one",
    "you",
    "were",
    "her",
    "all",
    "she",
    "there",
    "would",
    "their",
    "we",
    "him",
    "been",
    "has",
    "when",
    "who",
    "will",
    "more",
    "no",
    "if",
    "out",
    "so",
    "said",
    "what",
    "up",
    "its",
    "about",
    "into",
    "than",
    "them",
    "can",
    "only",
    "other",
    "new",
    "some",
    "could",
    "time",
    "these",
    "two",
    "may",
    "then",
    "do",
    "first",
    "any",
)


class PlannedRequest(BaseModel):
    """One request of a run, planned before the run starts."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    index: int = Field(ge=0, description="Position in the run.")
    prompt: str = Field(description="User message text.")
    prompt_tokens: int = Field(ge=1, description="Nominal prompt length (words ≈ tokens).")
    max_tokens: int = Field(ge=1, description="Requested output length.")
    delay_s: float = Field(default=0.0, ge=0, description="Open loop: send this long after the run start.")


def sample_length(spec: LengthSpec, rng: random.Random) -> int:
    """A length in [n·(1−r), n·(1+r)], as vLLM bench's random dataset; at least 1."""
    if spec.range_ratio == 0:
        return spec.tokens
    low = max(1, int(spec.tokens * (1 - spec.range_ratio)))
    high = max(low, int(spec.tokens * (1 + spec.range_ratio)))
    return rng.randint(low, high)


def synthetic_prompt(tokens: int, rng: random.Random, index: int) -> str:
    """A prompt of about ``tokens`` tokens; the index prefix defeats prefix caching across requests."""
    words = [f"Request {index}:"] + [rng.choice(_WORDS) for _ in range(max(0, tokens - 3))]
    return " ".join(words)


def poisson_delays(n: int, rate: float, burstiness: float, rng: random.Random) -> list[float]:
    """Cumulative send offsets (s), as vLLM bench ``get_request``.

    Gaps are gamma(shape=burstiness, scale=1/(rate·burstiness)) — Poisson for burstiness 1 — and
    the cumulative schedule is rescaled so the last request lands at exactly n/rate, which vLLM does
    to stabilise throughput across seeds (vllm/benchmarks/serve.py).
    """
    if n <= 0:
        return []
    theta = 1.0 / (rate * burstiness)
    delays: list[float] = []
    total = 0.0
    for _ in range(n):
        total += rng.gammavariate(burstiness, theta)
        delays.append(total)
    factor = (n / rate) / delays[-1] if delays[-1] > 0 else 1.0
    return [d * factor for d in delays]


def plan_requests(spec: LoadSpec, n: int, *, rate: float | None = None, salt: int = 0) -> list[PlannedRequest]:
    """The request list of one run; deterministic for a given seed, salt (run number) and size."""
    rng = random.Random(spec.seed * 1_000_003 + salt)  # noqa: S311 - a seeded, reproducible workload, not a secret
    delays = poisson_delays(n, rate, spec.burstiness, rng) if rate is not None else [0.0] * n
    planned = []
    for i in range(n):
        prompt_len = sample_length(spec.prompt, rng)
        planned.append(
            PlannedRequest(
                index=i,
                prompt=synthetic_prompt(prompt_len, rng, i + salt * 100_000),
                prompt_tokens=prompt_len,
                max_tokens=sample_length(spec.output, rng),
                delay_s=delays[i],
            )
        )
    return planned


def stream_chat_payload(model: str, prompt: str, max_tokens: int, *, ignore_eos: bool) -> dict[str, Any]:
    """The streamed chat request vLLM bench's ``openai-chat`` backend sends (docs/evaluation.md §2)."""
    payload: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_completion_tokens": max_tokens,
        # Older servers only read max_tokens; sending both is harmless.
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0.0,
    }
    if ignore_eos:
        payload["ignore_eos"] = True  # vLLM extension: generate exactly max_tokens
    return payload


class LoadJob(BaseModel):
    """What one load-generator process is told to do (written as JSON; carries no secret)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    url: str = Field(description="Full chat-completions URL.")
    models_url: str = Field(description="URL used to pre-open connections (GET /v1/models).")
    model: str = Field(description="Served model name.")
    name: str = Field(description="Run label.")
    mode: Literal["closed", "open"] = Field(description="closed = fixed concurrency; open = scheduled arrivals.")
    concurrency: int = Field(ge=1, description="Closed: workers in this process; open: max in flight here.")
    request_rate: float | None = Field(default=None, gt=0, description="Open loop: target rate of the whole run.")
    requests: list[PlannedRequest] = Field(description="This process's share of the run.")
    ignore_eos: bool = Field(default=True, description="Send vLLM's ignore_eos.")
    warmup_requests: int = Field(default=0, ge=0, description="Streamed requests before the run, not recorded.")
    request_timeout_s: float = Field(gt=0, description="Total time allowed per request.")
    stop_after_s: float | None = Field(
        default=None,
        gt=0,
        description="Stop this long after GO: requests still running are cut and those not sent are not sent, all "
        "recorded as 'cancelled' (the client's doing, never counted against the endpoint).",
    )


def split_requests(requests: list[PlannedRequest], shards: int) -> list[list[PlannedRequest]]:
    """Round-robin split so every process gets an even share of an arrival schedule."""
    return [requests[i::shards] for i in range(shards)]


def split_concurrency(concurrency: int, shards: int) -> list[int]:
    """Split ``concurrency`` streams over at most ``shards`` processes, none empty."""
    shards = max(1, min(shards, concurrency))
    base, extra = divmod(concurrency, shards)
    return [base + (1 if i < extra else 0) for i in range(shards)]
