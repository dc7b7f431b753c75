"""Control-plane calls to the endpoint with httpx: the smoke checks and the golden-set quality run.

Low concurrency, so httpx is fine here (docs/evaluation.md §5.2), but with explicit limits and a read
timeout sized for slow MoE first tokens: httpx's 5 s default would kill them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from prefect import get_run_logger
from pydantic import SecretStr

from capserve.core.evaluation import smoke as smoke_core
from capserve.core.evaluation.quality import (
    GoldenItem,
    golden_from_file,
    is_correct,
    packaged_golden,
    quality_messages,
    wilson_interval,
)
from capserve.core.evaluation.result import QualityItemResult, QualityResult, SmokeResult
from capserve.core.evaluation.smoke import SmokeCheck
from capserve.core.evaluation.spec import EvaluationSpec, QualitySpec, SmokeSpec
from capserve.core.evaluation.sse import SseDecoder, StreamState, apply_event
from capserve.tasks.evaluation.load import read_api_key
from capserve.tasks.resilience import endpoint_task


class CheckFailed(Exception):
    """A smoke check saw something wrong; the message says what."""


def make_client(base_url: str, spec: EvaluationSpec, api_key: SecretStr | None, connections: int = 8) -> httpx.Client:
    """An httpx client with explicit limits and timeouts (never the library defaults)."""
    headers = {"Authorization": f"Bearer {api_key.get_secret_value()}"} if api_key is not None else {}
    return httpx.Client(
        base_url=base_url.rstrip("/"),
        headers=headers,
        timeout=httpx.Timeout(spec.read_timeout_s, connect=spec.connect_timeout_s),
        limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
    )


def _expect_ok(response: httpx.Response) -> Any:
    if response.status_code != 200:
        raise CheckFailed(f"HTTP {response.status_code} from {response.request.url.path}: {response.text[:200]}")
    try:
        return response.json()
    except ValueError as exc:
        raise CheckFailed(f"{response.request.url.path} answered non-JSON: {response.text[:120]!r}") from exc


def check_health(client: httpx.Client, model: str, spec: SmokeSpec) -> str:
    response = client.get("/health")
    if response.status_code != 200:
        raise CheckFailed(f"/health answered HTTP {response.status_code}")
    return "HTTP 200"


def check_models(client: httpx.Client, model: str, spec: SmokeSpec) -> str:
    listed = [entry.get("id") for entry in _expect_ok(client.get("/v1/models")).get("data", [])]
    if model not in listed:
        raise CheckFailed(f"/v1/models does not list {model!r}; it lists {listed[:10]}")
    return f"lists {model!r}"


def check_chat_stream(client: httpx.Client, model: str, spec: SmokeSpec) -> str:
    state = StreamState()
    decoder = SseDecoder()
    payload = smoke_core.chat_stream_payload(model, spec.max_tokens)
    try:
        with client.stream("POST", "/v1/chat/completions", json=payload) as response:
            if response.status_code != 200:
                raise CheckFailed(f"HTTP {response.status_code}: {response.read().decode(errors='replace')[:200]}")
            for chunk in response.iter_bytes():
                for event in decoder.feed(chunk):
                    apply_event(state, event)
            for event in decoder.finish():
                apply_event(state, event)
    except httpx.RemoteProtocolError as exc:
        raise CheckFailed(f"stream cut after {state.token_events} chunks ({exc})") from exc
    problems = []
    if state.error:
        problems.append(f"error event: {state.error}")
    if not state.done:
        problems.append(f"stream ended without [DONE] after {state.token_events} chunks")
    if not state.content.strip():
        problems.append("no content in the stream")
    if state.completion_tokens is None or state.prompt_tokens is None:
        problems.append("no usage chunk (stream_options.include_usage ignored)")
    elif not (0 < state.completion_tokens <= spec.max_tokens and state.prompt_tokens > 0):
        problems.append(f"implausible usage: prompt {state.prompt_tokens}, completion {state.completion_tokens}")
    if problems:
        raise CheckFailed("; ".join(problems))
    return f"{state.token_events} chunks, usage {state.prompt_tokens}+{state.completion_tokens} tokens"


class Skipped(Exception):
    """The check does not apply to this endpoint; the message says why."""


def check_image(client: httpx.Client, model: str, spec: SmokeSpec) -> str:
    if spec.image == "skip":
        raise Skipped("image check disabled in the spec")
    response = client.post("/v1/chat/completions", json=smoke_core.image_payload(model, spec.max_tokens))
    if spec.image == "auto" and smoke_core.looks_text_only(response.status_code, response.text):
        raise Skipped(f"text-only model: the endpoint rejected the image ({response.text[:120]})")
    body = _expect_ok(response)
    content = ((body.get("choices") or [{}])[0].get("message") or {}).get("content") or ""
    if not content.strip():
        raise CheckFailed("empty answer to the image prompt")
    return f"answered {content.strip()[:60]!r}"


def check_tool_call(client: httpx.Client, model: str, spec: SmokeSpec) -> str:
    payload = smoke_core.tool_call_payload(model, spec.max_tokens, spec.tool_choice)
    problems = smoke_core.check_tool_call(_expect_ok(client.post("/v1/chat/completions", json=payload)))
    if problems:
        raise CheckFailed("; ".join(problems))
    return "get_weather called with schema-valid arguments"


SMOKE_CHECKS: list[tuple[str, Callable[[httpx.Client, str, SmokeSpec], str]]] = [
    ("health", check_health),
    ("models", check_models),
    ("chat_stream", check_chat_stream),
    ("image", check_image),
    ("tool_call", check_tool_call),
]


def run_smoke_checks(client: httpx.Client, model: str, spec: SmokeSpec) -> SmokeResult:
    """Every check runs whatever the others did; each failure is a clear failed check, not an exception."""
    checks = []
    for name, check in SMOKE_CHECKS:
        started = time.perf_counter()
        try:
            status, detail = "passed", check(client, model, spec)
        except Skipped as exc:
            status, detail = "skipped", str(exc)
        except CheckFailed as exc:
            status, detail = "failed", str(exc)
        except httpx.HTTPError as exc:
            status, detail = "failed", f"{type(exc).__name__}: {str(exc)[:200]}"
        except (ValueError, KeyError, TypeError, json.JSONDecodeError) as exc:
            status, detail = "failed", f"malformed answer: {type(exc).__name__}: {str(exc)[:200]}"
        elapsed = (time.perf_counter() - started) * 1000
        checks.append(SmokeCheck(name=name, status=status, detail=detail[:1000], duration_ms=elapsed))
    return SmokeResult(checks=checks)


@endpoint_task(name="eval-smoke")
def run_smoke(base_url: str, model: str, spec: EvaluationSpec, api_key_env: str | None = None) -> SmokeResult:
    """Smoke profile: health, models, a streamed chat, an image, a tool call."""
    with make_client(base_url, spec, read_api_key(api_key_env)) as client:
        result = run_smoke_checks(client, model, spec.smoke)
    logger = get_run_logger()
    for check in result.checks:
        logger.info("smoke %s: %s %s", check.name, check.status, check.detail[:200])
    return result


def _ask(client: httpx.Client, model: str, item: GoldenItem, spec: QualitySpec) -> QualityItemResult:
    payload = {
        "model": model,
        "messages": quality_messages(item),
        "max_tokens": spec.max_tokens,
        "temperature": 0.0,
        "seed": spec.seed,
    }
    try:
        body = _expect_ok(client.post("/v1/chat/completions", json=payload))
        reply = body["choices"][0]["message"].get("content") or ""
    except (CheckFailed, httpx.HTTPError, KeyError, IndexError, TypeError) as exc:
        return QualityItemResult(
            id=item.id,
            category=item.category,
            correct=False,
            expected=item.answer,
            error=f"{type(exc).__name__}: {str(exc)[:200]}",
        )
    correct, extracted = is_correct(item, reply)
    return QualityItemResult(
        id=item.id, category=item.category, correct=correct, extracted=extracted, expected=item.answer
    )


def score_golden(client: httpx.Client, model: str, spec: QualitySpec) -> QualityResult:
    """Ask every golden item (a few in flight) and score exact match with a Wilson interval."""
    items = golden_from_file(spec.golden_path) if spec.golden_path else packaged_golden()
    if spec.max_items is not None:
        items = items[: spec.max_items]
    with ThreadPoolExecutor(max_workers=spec.concurrency) as pool:
        results = list(pool.map(lambda item: _ask(client, model, item, spec), items))
    correct = sum(r.correct for r in results)
    low, high = wilson_interval(correct, len(results), spec.confidence)
    by_category: dict[str, list[bool]] = {}
    for r in results:
        by_category.setdefault(r.category, []).append(r.correct)
    return QualityResult(
        source=spec.golden_path or "packaged",
        total=len(results),
        correct=correct,
        accuracy=correct / len(results),
        ci_low=low,
        ci_high=high,
        confidence=spec.confidence,
        by_category={k: sum(v) / len(v) for k, v in by_category.items()},
        errors=sum(r.error is not None for r in results),
        items=results,
    )


@endpoint_task(name="eval-quality")
def run_quality(base_url: str, model: str, spec: EvaluationSpec, api_key_env: str | None = None) -> QualityResult:
    """Quality profile: the golden set, exact match, confidence interval."""
    with make_client(base_url, spec, read_api_key(api_key_env), spec.quality.concurrency) as client:
        result = score_golden(client, model, spec.quality)
    get_run_logger().info(
        "quality: %d/%d correct (%.1f%%, CI %.1f–%.1f%%), %d request errors",
        result.correct,
        result.total,
        result.accuracy * 100,
        result.ci_low * 100,
        result.ci_high * 100,
        result.errors,
    )
    return result
