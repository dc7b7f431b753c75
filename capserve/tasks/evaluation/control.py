"""Control-plane calls to the endpoint with httpx: the smoke checks and the golden-set quality run.

Low concurrency, so httpx is fine here (docs/evaluation.md §5.2), but never with its defaults: explicit
connection limits, and every call bounded by time. httpx's timeouts apply per socket read, so a
server that trickles bytes could outlast them: each call here streams its body and checks a
monotonic deadline between reads — the smaller of the check's (or item's) own timeout and what is
left of the evaluation's overall deadline. Whatever the endpoint sends back is redacted before it
becomes a check detail, an error or a log line (an endpoint may echo the API key in an error body).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import httpx
from prefect import get_run_logger

from capserve.core.catalog.models import Thinking
from capserve.core.deadline import Deadline
from capserve.core.evaluation import smoke as smoke_core
from capserve.core.evaluation.quality import (
    GoldenItem,
    fit_max_tokens,
    golden_from_file,
    is_correct,
    model_context,
    packaged_golden,
    quality_payload,
    wilson_interval,
)
from capserve.core.evaluation.result import QualityItemResult, QualityResult, SmokeResult
from capserve.core.evaluation.smoke import SmokeCheck
from capserve.core.evaluation.spec import EvaluationSpec, QualitySpec, SmokeSpec
from capserve.core.evaluation.sse import REASONING_FIELDS, SseDecoder, StreamState, apply_event
from capserve.core.redaction import Redactor
from capserve.tasks.evaluation import deadline
from capserve.tasks.evaluation.auth import EndpointAuth, read_auth
from capserve.tasks.resilience import endpoint_task
from capserve.tasks.secrets import redactor

# A smoke or golden answer is a few kilobytes; a body past this is an endpoint misbehaving.
MAX_BODY_BYTES = 4 * 1024 * 1024


def _timeout(budget: Deadline, connect_s: float) -> httpx.Timeout:
    """httpx's per-operation timeouts, none longer than what is left of ``budget``."""
    left = max(0.001, budget.remaining())
    return httpx.Timeout(left, connect=min(connect_s, left))


class CheckFailed(Exception):
    """A smoke check saw something wrong; the message says what."""


class Unreachable(CheckFailed):
    """No answer at all: the connection failed or the deadline passed before the endpoint answered."""


def make_client(base_url: str, spec: EvaluationSpec, auth: EndpointAuth | None, connections: int = 8) -> httpx.Client:
    """An httpx client with explicit limits and timeouts (never the library defaults)."""
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    return httpx.Client(
        base_url=base_url.rstrip("/"),
        headers=auth.headers() if auth is not None else {},
        timeout=httpx.Timeout(spec.smoke.check_timeout_s, connect=spec.connect_timeout_s),
        limits=limits,
        transport=deadline.transport(limits),  # a call ends at its deadline, however slowly the bytes come
    )


@contextmanager
def _endpoint_session(
    base_url: str,
    spec: EvaluationSpec,
    api_key_env: str | None,
    basic_auth_env: str | None,
    time_budget_s: float | None,
    connections: int = 8,
) -> Iterator[tuple[httpx.Client, Deadline]]:
    """What each profile calls the endpoint with: the credentials from the environment, a bounded client,
    and the profile's time budget (``time_budget_s``, else the spec's ``timeout_s``) counted from now."""
    auth = read_auth(api_key_env, basic_auth_env)
    budget = Deadline(spec.timeout_s if time_budget_s is None else time_budget_s)
    with make_client(base_url, spec, auth, connections) as client:
        yield client, budget


class StreamTimes:
    """What a streamed check measured: seconds from send to the first token chunk of any kind (TTFT) and
    to the first answer token (thinking excluded), and whether the stream carried thinking."""

    def __init__(self) -> None:
        self.first_token: float | None = None
        self.first_answer: float | None = None
        self.thinking: bool | None = None

    def describe(self) -> str:
        ttft = "no token" if self.first_token is None else f"TTFT {self.first_token * 1000:.0f} ms"
        answer = (
            "no answer token within max_tokens"
            if self.first_answer is None
            else f"first answer token {self.first_answer * 1000:.0f} ms"
        )
        return f"{ttft}, {answer}" + (" (thinking streamed first)" if self.thinking else "")


class Call:
    """One check's (or item's) access to the endpoint: bounded in time, answers redacted."""

    def __init__(self, client: httpx.Client, budget: Deadline, connect_s: float, scrub: Redactor) -> None:
        self.client, self.budget, self.connect_s, self.scrub = client, budget, connect_s, scrub
        self.stream_times = StreamTimes()
        # Set when an earlier check saw the model think: later checks leave room for the thinking.
        self.thinking_seen = False
        # The endpoint's context length, once /v1/models said it: no max_tokens may exceed it.
        self.max_model_len: int | None = None

    def max_tokens(self, spec: SmokeSpec, least: int = 1) -> int:
        """max_tokens of a later check: room for the thinking of a model seen thinking (it precedes the
        answer or the tool call), within the endpoint's context."""
        wanted = max(spec.max_tokens, least) + (spec.thinking_budget_tokens if self.thinking_seen else 0)
        return fit_max_tokens(wanted, self.max_model_len)

    def request(self, method: str, path: str, payload: Any = None) -> tuple[int, bytes]:
        """(status, body), reading no longer than the budget and no more than MAX_BODY_BYTES."""
        if self.budget.expired:
            raise Unreachable(f"{path}: no time left (the check's timeout or the evaluation's deadline)")
        body = bytearray()
        try:
            with deadline.until(self.budget.end), self.client.stream(
                method, path, json=payload, timeout=_timeout(self.budget, self.connect_s)
            ) as r:
                for chunk in r.iter_bytes():
                    body += chunk
                    if len(body) > MAX_BODY_BYTES:
                        raise CheckFailed(f"{path}: answer larger than {MAX_BODY_BYTES:,} bytes")
                    if self.budget.expired:
                        raise Unreachable(f"{path}: no complete answer within {self.budget.seconds:.1f} s")
                return r.status_code, bytes(body)
        except httpx.TimeoutException as exc:
            raise Unreachable(f"{path}: no answer within {self.budget.seconds:.1f} s ({type(exc).__name__})") from None
        except httpx.ConnectError as exc:
            raise Unreachable(f"{path}: cannot connect ({self.scrub.redact(str(exc))[:160]})") from None

    def json(self, method: str, path: str, payload: Any = None) -> Any:
        """The JSON answer of a call that must return HTTP 200."""
        status, body = self.request(method, path, payload)
        text = self.scrub.redact(body.decode("utf-8", errors="replace"))
        if status != 200:
            raise CheckFailed(f"HTTP {status} from {path}: {text[:200]}")
        try:
            return json.loads(body)
        except ValueError:
            raise CheckFailed(f"{path} answered non-JSON: {text[:120]!r}") from None


def check_health(call: Call, model: str, spec: SmokeSpec) -> str:
    status, _ = call.request("GET", "/health")
    if status != 200:
        raise CheckFailed(f"/health answered HTTP {status}")
    return "HTTP 200"


def check_models(call: Call, model: str, spec: SmokeSpec) -> str:
    answer = call.json("GET", "/v1/models")
    listed = [entry.get("id") for entry in answer.get("data", [])]
    if model not in listed:
        raise CheckFailed(f"/v1/models does not list {model!r}; it lists {listed[:10]}")
    call.max_model_len = model_context(answer, model)
    return f"lists {model!r}"


def check_chat_stream(call: Call, model: str, spec: SmokeSpec) -> str:
    """A streamed chat must end with [DONE] and usage and carry output: an answer or, from a reasoning
    model whose thinking outlasts ``max_tokens``, thinking alone (docs/evaluation.md §4). The two first-token
    times go to ``call.stream_times``."""
    state = StreamState()
    decoder = SseDecoder()
    payload = smoke_core.chat_stream_payload(model, spec.max_tokens)
    budget = call.budget
    if budget.expired:
        raise Unreachable("/v1/chat/completions: no time left (the check's timeout or the evaluation's deadline)")
    times = call.stream_times

    def take(event: str, now: float) -> None:
        kind = apply_event(state, event)
        if kind.token and times.first_token is None:
            times.first_token = now - send
        if kind.answer and times.first_answer is None:
            times.first_answer = now - send

    send = time.perf_counter()
    try:
        with deadline.until(budget.end), call.client.stream(
            "POST", "/v1/chat/completions", json=payload, timeout=_timeout(budget, call.connect_s)
        ) as response:
            if response.status_code != 200:
                text = call.scrub.redact(response.read().decode(errors="replace"))
                raise CheckFailed(f"HTTP {response.status_code}: {text[:200]}")
            for chunk in response.iter_bytes():
                now = time.perf_counter()
                for event in decoder.feed(chunk):
                    take(event, now)
                if budget.expired:
                    chunks = state.token_events
                    raise Unreachable(f"stream not finished within {budget.seconds:.1f} s ({chunks} chunks)")
            for event in decoder.finish():
                take(event, time.perf_counter())
    except httpx.RemoteProtocolError as exc:
        raise CheckFailed(f"stream cut after {state.token_events} chunks ({exc})") from exc
    except httpx.TimeoutException as exc:
        raise Unreachable(f"no answer within {budget.seconds:.1f} s ({type(exc).__name__})") from None
    except httpx.ConnectError as exc:
        raise Unreachable(f"cannot connect ({call.scrub.redact(str(exc))[:160]})") from None
    times.thinking = bool(state.reasoning.strip())
    problems = []
    if state.error:
        problems.append(f"error event: {call.scrub.redact(state.error)}")
    if not state.done:
        problems.append(f"stream ended without [DONE] after {state.token_events} chunks")
    if not state.content.strip() and not state.reasoning.strip():
        problems.append("no output in the stream (neither content nor reasoning)")
    if state.completion_tokens is None or state.prompt_tokens is None:
        problems.append("no usage chunk (stream_options.include_usage ignored)")
    elif not (0 < state.completion_tokens <= spec.max_tokens and state.prompt_tokens > 0):
        problems.append(f"implausible usage: prompt {state.prompt_tokens}, completion {state.completion_tokens}")
    if problems:
        raise CheckFailed("; ".join(problems))
    usage = f"usage {state.prompt_tokens}+{state.completion_tokens} tokens"
    return f"{state.token_events} chunks, {usage}; {times.describe()}"


class Skipped(Exception):
    """The check does not apply to this endpoint; the message says why."""


def check_image(call: Call, model: str, spec: SmokeSpec) -> str:
    if spec.image == "skip":
        raise Skipped("image check disabled in the spec")
    payload = smoke_core.image_payload(model, call.max_tokens(spec))
    status, raw = call.request("POST", "/v1/chat/completions", payload)
    text = call.scrub.redact(raw.decode("utf-8", errors="replace"))
    if spec.image == "auto" and smoke_core.looks_text_only(status, text):
        raise Skipped(f"text-only model: the endpoint rejected the image ({text[:120]})")
    if status != 200:
        raise CheckFailed(f"HTTP {status} from /v1/chat/completions: {text[:200]}")
    try:
        body = json.loads(raw)
    except ValueError:
        raise CheckFailed(f"/v1/chat/completions answered non-JSON: {text[:120]!r}") from None
    message = (body.get("choices") or [{}])[0].get("message") or {}
    content = message.get("content") or ""
    if not content.strip():
        # A thinking model that only thought within max_tokens still took the image and answered.
        thought = next((message[f] for f in REASONING_FIELDS if isinstance(message.get(f), str) and message[f]), "")
        if not thought.strip():
            raise CheckFailed("empty answer to the image prompt")
        return f"thought about it ({len(thought)} characters), no answer within max_tokens"
    return f"answered {content.strip()[:60]!r}"


def check_tool_call(call: Call, model: str, spec: SmokeSpec) -> str:
    payload = smoke_core.tool_call_payload(model, call.max_tokens(spec, least=64), spec.tool_choice)
    problems = smoke_core.check_tool_call(call.json("POST", "/v1/chat/completions", payload))
    if problems:
        raise CheckFailed(call.scrub.redact("; ".join(problems)))
    return "get_weather called with schema-valid arguments"


SMOKE_CHECKS: list[tuple[str, Callable[[Call, str, SmokeSpec], str]]] = [
    ("health", check_health),
    ("models", check_models),
    ("chat_stream", check_chat_stream),
    ("image", check_image),
    ("tool_call", check_tool_call),
]


# The checks after these two are not attempted when both got no answer at all: each would wait its
# whole timeout for an endpoint that is not there.
_REACHABILITY_CHECKS = ("health", "models")


def run_smoke_checks(
    client: httpx.Client,
    model: str,
    spec: SmokeSpec,
    budget: Deadline | None = None,
    connect_s: float = 10.0,
    scrub: Redactor | None = None,
) -> SmokeResult:
    """Every check runs whatever the others did (each within ``spec.check_timeout_s`` and ``budget``);
    each failure is a clear failed check, never an exception. Details are redacted."""
    budget = budget or Deadline(float("inf"))
    scrub = scrub or redactor()
    checks: list[SmokeCheck] = []
    unreachable: list[str] = []
    thinking_seen = False
    max_model_len: int | None = None
    for name, check in SMOKE_CHECKS:
        started = time.perf_counter()
        timed: dict[str, Any] = {}
        if budget.expired:
            status, detail = "not_run", "the evaluation's deadline passed before this check"
        elif len(unreachable) == len(_REACHABILITY_CHECKS):
            status, detail = "not_run", "endpoint unreachable: " + "; ".join(unreachable)
        else:
            call = Call(client, budget.within(spec.check_timeout_s), connect_s, scrub)
            call.thinking_seen, call.max_model_len = thinking_seen, max_model_len
            try:
                status, detail = "passed", check(call, model, spec)
            except Skipped as exc:
                status, detail = "skipped", str(exc)
            except Unreachable as exc:
                status, detail = "failed", str(exc)
                if name in _REACHABILITY_CHECKS:
                    unreachable.append(f"{name}: {exc}")
            except CheckFailed as exc:
                status, detail = "failed", str(exc)
            except httpx.HTTPError as exc:
                status, detail = "failed", f"{type(exc).__name__}: {str(exc)[:200]}"
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                status, detail = "failed", f"malformed answer: {type(exc).__name__}: {str(exc)[:200]}"
            times = call.stream_times
            thinking_seen |= bool(times.thinking)
            max_model_len = call.max_model_len or max_model_len
            if times.first_token is not None:
                timed = {
                    "ttft_ms": times.first_token * 1000,
                    "first_answer_ms": None if times.first_answer is None else times.first_answer * 1000,
                    "thinking": times.thinking,
                }
        elapsed = (time.perf_counter() - started) * 1000
        checks.append(
            SmokeCheck(name=name, status=status, detail=scrub.redact(detail)[:1000], duration_ms=elapsed, **timed)
        )
    reason = "; ".join(unreachable) if len(unreachable) == len(_REACHABILITY_CHECKS) else None
    return SmokeResult(checks=checks, unreachable=reason)


@endpoint_task(name="eval-smoke")
def run_smoke(
    base_url: str,
    model: str,
    spec: EvaluationSpec,
    api_key_env: str | None = None,
    basic_auth_env: str | None = None,
    time_budget_s: float | None = None,
) -> SmokeResult:
    """Smoke profile: health, models, a streamed chat, an image, a tool call."""
    with _endpoint_session(base_url, spec, api_key_env, basic_auth_env, time_budget_s) as (client, budget):
        result = run_smoke_checks(client, model, spec.smoke, budget, spec.connect_timeout_s, redactor())
    logger = get_run_logger()
    for check in result.checks:
        logger.info("smoke %s: %s %s", check.name, check.status, check.detail[:200])
    return result


def _ask(model: str, item: GoldenItem, payload: dict[str, Any], call: Call) -> QualityItemResult | None:
    """One golden item; None when the evaluation's deadline passed before it could be asked."""
    if call.budget.expired:
        return None
    try:
        body = call.json("POST", "/v1/chat/completions", payload)
        # The answer only: a reasoning server puts the thinking in message.reasoning (vLLM 0.32) or
        # reasoning_content, and an "Answer:" line the model considered while thinking is not its answer.
        reply = body["choices"][0]["message"].get("content") or ""
    except (CheckFailed, httpx.HTTPError, KeyError, IndexError, TypeError, AttributeError) as exc:
        return QualityItemResult(
            id=item.id,
            category=item.category,
            correct=False,
            expected=item.answer,
            error=call.scrub.redact(f"{type(exc).__name__}: {str(exc)[:200]}"),
        )
    correct, extracted = is_correct(item, reply)
    if extracted is not None:
        extracted = call.scrub.redact(extracted)
    return QualityItemResult(
        id=item.id, category=item.category, correct=correct, extracted=extracted, expected=item.answer
    )


def _served_context(
    client: httpx.Client, model: str, budget: Deadline, connect_s: float, scrub: Redactor
) -> int | None:
    """The context length /v1/models reports for ``model``, so a thinking budget stays within it; None when
    the endpoint does not say (or does not answer: the items will then report what is wrong)."""
    try:
        return model_context(Call(client, budget.within(30.0), connect_s, scrub).json("GET", "/v1/models"), model)
    except (CheckFailed, httpx.HTTPError, AttributeError, TypeError):
        return None


def score_golden(
    client: httpx.Client,
    model: str,
    spec: QualitySpec,
    budget: Deadline | None = None,
    connect_s: float = 10.0,
    scrub: Redactor | None = None,
    *,
    thinks: bool = False,
    thinking: Thinking | None = None,
) -> QualityResult:
    """Ask every golden item (a few in flight) and score exact match with a Wilson interval.

    A model that thinks (``thinking`` from the catalog, or ``thinks``: the smoke stream carried thinking)
    gets room for its thinking or has it turned off, as ``spec.thinking`` says (``quality_payload``).

    Each item gets ``spec.request_timeout_s`` (a timeout counts as a wrong answer: the endpoint did not
    answer in the time the spec allows); items the overall ``budget`` leaves no time for are not asked
    and not scored.
    """
    items = golden_from_file(spec.golden_path) if spec.golden_path else packaged_golden()
    if spec.max_items is not None:
        items = items[: spec.max_items]
    budget = budget or Deadline(float("inf"))
    scrub = scrub or redactor()

    context = _served_context(client, model, budget, connect_s, scrub) if thinks or thinking is not None else None
    payloads = {
        item.id: quality_payload(model, item, spec, thinks=thinks, thinking=thinking, max_model_len=context)
        for item in items
    }

    def ask(item: GoldenItem) -> QualityItemResult | None:
        call = Call(client, budget.within(spec.request_timeout_s), connect_s, scrub)
        return _ask(model, item, payloads[item.id], call)

    with ThreadPoolExecutor(max_workers=spec.concurrency) as pool:
        answered = list(pool.map(ask, items))
    results = [r for r in answered if r is not None]
    correct = sum(r.correct for r in results)
    low, high = wilson_interval(correct, len(results), spec.confidence)
    by_category: dict[str, list[bool]] = {}
    for r in results:
        by_category.setdefault(r.category, []).append(r.correct)
    return QualityResult(
        source=spec.golden_path or "packaged",
        total=len(results),
        correct=correct,
        accuracy=correct / len(results) if results else 0.0,
        ci_low=low,
        ci_high=high,
        confidence=spec.confidence,
        by_category={k: sum(v) / len(v) for k, v in by_category.items()},
        errors=sum(r.error is not None for r in results),
        not_asked=len(answered) - len(results),
        items=results,
    )


@endpoint_task(name="eval-quality")
def run_quality(
    base_url: str,
    model: str,
    spec: EvaluationSpec,
    api_key_env: str | None = None,
    basic_auth_env: str | None = None,
    time_budget_s: float | None = None,
    thinks: bool = False,
    thinking: Thinking | None = None,
) -> QualityResult:
    """Quality profile: the golden set, exact match, confidence interval; a thinking model's answer only."""
    session = _endpoint_session(base_url, spec, api_key_env, basic_auth_env, time_budget_s, spec.quality.concurrency)
    with session as (client, budget):
        result = score_golden(
            client,
            model,
            spec.quality,
            budget,
            spec.connect_timeout_s,
            redactor(),
            thinks=thinks,
            thinking=thinking,
        )
    get_run_logger().info(
        "quality: %d/%d correct (%.1f%%, CI %.1f–%.1f%%), %d request errors, %d not asked (deadline)",
        result.correct,
        result.total,
        result.accuracy * 100,
        result.ci_low * 100,
        result.ci_high * 100,
        result.errors,
        result.not_asked,
    )
    return result
