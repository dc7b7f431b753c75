"""A reasoning model judged as vLLM streams it (docs/evaluation.md §4 and §6.4).

vLLM 0.32 with ``--reasoning-parser`` streams the thinking in ``delta.reasoning`` (older servers:
``reasoning_content``) before the answer in ``delta.content``. A healthy server whose thinking outlasts the
smoke check's tokens must pass the smoke and quality checks; TTFT stays the first chunk's (thinking
included, as vLLM bench counts it) and the time to the first answer token is reported beside it.
"""

from __future__ import annotations

import json

import httpx
import pytest
from capserve_sandbox.openai_server import SandboxConfig, serve

from capserve.core.catalog import get_model
from capserve.core.errors import SpecError
from capserve.core.evaluation.quality import packaged_golden, quality_payload
from capserve.core.evaluation.result import load_table_row, summarize_run
from capserve.core.evaluation.spec import EvaluationSpec, LoadSpec, QualitySpec
from capserve.core.evaluation.sse import StreamState, apply_event
from capserve.tasks.evaluation.control import make_client, run_smoke_checks, score_golden
from capserve.tasks.evaluation.load import run_point

SPEC = EvaluationSpec()
K3 = get_model("kimi-k3")


def _chunk(delta: dict[str, str]) -> str:
    return json.dumps({"choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}]})


@pytest.mark.parametrize("field", ["reasoning", "reasoning_content"])
def test_streamed_thinking_is_output_but_not_answer(field: str) -> None:
    state = StreamState()
    assert apply_event(state, _chunk({field: "Let me think."})) == (True, True, False)
    assert apply_event(state, _chunk({"content": "Hello."})) == (True, True, True)
    assert (state.reasoning, state.content) == ("Let me think.", "Hello.")


def test_thinking_that_outlasts_the_smoke_tokens_passes_every_check() -> None:
    # 48 tokens of thinking against the smoke's 32: the stream is all thinking, as a real K3's would be.
    config = SandboxConfig(reasoning_parser="kimi_k3", thinking_tokens=48)
    with serve(config) as url, make_client(url, SPEC, None) as client:
        result = run_smoke_checks(client, config.model, SPEC.smoke)
    checks = {c.name: c for c in result.checks}
    assert {name: c.status for name, c in checks.items()} == dict.fromkeys(checks, "passed"), [
        c.detail for c in result.checks if c.status != "passed"
    ]
    stream = checks["chat_stream"]
    # TTFT is the first thinking chunk's; no answer token came within max_tokens, and the report says so.
    assert stream.ttft_ms is not None and stream.first_answer_ms is None and stream.thinking is True
    assert "no answer token within max_tokens" in stream.detail
    assert result.saw_thinking


def test_time_to_first_answer_token_is_reported_beside_ttft() -> None:
    config = SandboxConfig(reasoning_parser="kimi_k3", thinking_tokens=8)
    with serve(config) as url, make_client(url, SPEC, None) as client:
        result = run_smoke_checks(client, config.model, SPEC.smoke)
    stream = next(c for c in result.checks if c.name == "chat_stream")
    assert stream.status == "passed" and stream.thinking is True
    assert stream.ttft_ms is not None and stream.first_answer_ms is not None
    assert stream.first_answer_ms >= stream.ttft_ms
    assert section_smoke(result.model_dump(mode="json"))["first_answer_ms"] == stream.first_answer_ms


def section_smoke(dumped: dict[str, object]) -> dict[str, object]:
    checks = dumped["checks"]
    assert isinstance(checks, list)
    return next(c for c in checks if c["name"] == "chat_stream")


def test_quality_leaves_room_for_thinking_and_scores_the_answer() -> None:
    # An answer budget of 16 tokens: without room for the 48 tokens of thinking every answer is cut off.
    spec = QualitySpec(max_items=6, max_tokens=16)
    with serve(SandboxConfig(reasoning_parser="kimi_k3", thinking_tokens=48)) as url:
        with make_client(url, SPEC, None) as client:
            result = score_golden(client, "sandbox-model", spec, thinking=K3.thinking)
    assert (result.total, result.correct, result.errors) == (6, 6, 0)


def test_quality_thinking_seen_in_the_smoke_stream_gets_room_too() -> None:
    spec = QualitySpec(max_items=4, max_tokens=16)
    with serve(SandboxConfig(reasoning_parser="kimi_k3", thinking_tokens=48)) as url:
        with make_client(url, SPEC, None) as client:
            result = score_golden(client, "sandbox-model", spec, thinks=True)
    assert (result.total, result.correct) == (4, 4)


def test_quality_can_turn_the_thinking_off_with_the_catalogs_switch() -> None:
    spec = QualitySpec(max_items=4, max_tokens=16, thinking="off", thinking_budget_tokens=0)
    item = packaged_golden()[0]
    assert quality_payload("m", item, spec, thinking=K3.thinking)["chat_template_kwargs"] == {"thinking": False}
    with serve(SandboxConfig(reasoning_parser="kimi_k3", thinking_tokens=48)) as url:
        with make_client(url, SPEC, None) as client:
            result = score_golden(client, "sandbox-model", spec, thinking=K3.thinking)
    assert (result.total, result.correct) == (4, 4)


def test_quality_payload_budgets_thinking_plus_answer() -> None:
    item = packaged_golden()[0]
    spec = QualitySpec(max_tokens=256, thinking_budget_tokens=8192)
    assert quality_payload("m", item, spec)["max_tokens"] == 256  # a model that answers directly
    assert quality_payload("m", item, spec, thinking=K3.thinking)["max_tokens"] == 256 + 8192
    assert "chat_template_kwargs" not in quality_payload("m", item, spec, thinking=K3.thinking)


def test_thinking_that_cannot_be_turned_off_is_refused_with_what_to_change() -> None:
    spec = QualitySpec(thinking="off")
    with pytest.raises(SpecError, match="cannot be turned off: set quality.thinking to 'leave_room'"):
        quality_payload("m", packaged_golden()[0], spec, thinking=get_model("gpt-oss-120b").thinking)


def test_load_ttft_counts_thinking_and_first_answer_is_apart() -> None:
    spec = LoadSpec(
        output={"tokens": 6}, prompt={"tokens": 8}, warmup_requests=0, min_requests=4, requests_per_stream=1  # type: ignore[arg-type]
    )
    with serve(SandboxConfig(reasoning_parser="kimi_k3", thinking_tokens=48)) as url:
        all_thinking = run_point(url, "sandbox-model", spec, name="c2", concurrency=2)
    point = summarize_run(all_thinking, spec, SPEC.gates)
    m = point.metrics
    assert m.completed == 4 and m.ttft_ms.count == 4 and m.first_answer_ms.count == 0
    assert all(r.first_content is not None and r.first_answer is None for r in all_thinking.requests)
    assert "| none |" in load_table_row(point)
    with serve(SandboxConfig(reasoning_parser="kimi_k3", thinking_tokens=2)) as url:
        answered = run_point(url, "sandbox-model", spec, name="c2", concurrency=2)
    m = summarize_run(answered, spec, SPEC.gates).metrics
    assert m.completed == 4 and m.first_answer_ms.count == 4
    assert all(r.first_answer is not None and r.chunk_times[0] <= r.first_answer for r in answered.requests)


def test_the_stand_in_refuses_max_tokens_beyond_the_context_as_vllm_does() -> None:
    with serve(SandboxConfig(max_model_len=512)) as url:
        body = {"model": "sandbox-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 513}
        answer = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30)
    assert answer.status_code == 400
    assert answer.json()["error"]["message"].startswith("max_tokens=513 cannot be greater than max_model_len=512.")


def test_room_for_thinking_stays_within_the_served_context() -> None:
    # 4096 (smoke) and 8192 (quality) tokens of room would be refused by a 512-token context.
    config = SandboxConfig(reasoning_parser="kimi_k3", thinking_tokens=48, max_model_len=512)
    with serve(config) as url, make_client(url, SPEC, None) as client:
        smoke = run_smoke_checks(client, config.model, SPEC.smoke)
        quality = score_golden(client, config.model, QualitySpec(max_items=4, max_tokens=16), thinks=True)
    assert [c.status for c in smoke.checks] == ["passed"] * 5, [c.detail for c in smoke.checks]
    assert (quality.total, quality.correct, quality.errors) == (4, 4, 0)
