"""The sandbox's simulated vLLM streams what vLLM 0.32's own protocol classes produce (docs/evaluation.md §4).

``fixtures/vllm_stream_chunks.json`` holds, per case, a sandbox config and request, the plan of what the
stream carries, and the chunks ``scripts/vllm_stream_reference.py`` built from that plan with vLLM's
``ChatCompletionStreamResponse``, ``DeltaMessage`` and ``DeltaToolCall``, serialized as vLLM serializes
them. The sandbox must send those chunks byte for byte (the wall-clock ``created`` aside); when
``.venv-vllm`` is present the fixture itself is rebuilt from vLLM's classes and must not have drifted (in the run's
one ask of vLLM, tests/vllm_answers.py).
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from capserve_sandbox.openai_server import SandboxConfig, serve

from capserve.core.evaluation.sse import SseDecoder
from tests.vllm_answers import stream_cases, vllm_answers

CASES: dict[str, dict[str, Any]] = stream_cases()


def _sandbox_chunks(case: dict[str, Any]) -> list[str]:
    with serve(SandboxConfig.model_validate(case["config"])) as url:
        raw = httpx.post(f"{url}/v1/chat/completions", json=case["request"], timeout=30).content
    decoder = SseDecoder()
    payloads = decoder.feed(raw) + decoder.finish()
    created = case["plan"]["created"]
    out = []
    for payload in payloads:
        if payload != "[DONE]":
            chunk = json.loads(payload)
            chunk["created"] = created  # wall-clock seconds: the one field a fixture cannot hold
            payload = json.dumps(chunk, separators=(",", ":"), ensure_ascii=False)
        out.append(payload)
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_sandbox_streams_vllm_chunks_field_for_field(name: str) -> None:
    case = CASES[name]
    assert _sandbox_chunks(case) == case["chunks"]


def test_fixture_is_what_vllms_own_classes_build(tmp_path_factory: pytest.TempPathFactory) -> None:
    rebuilt = vllm_answers(tmp_path_factory)["stream"]  # skips without .venv-vllm
    assert {name: rebuilt[name] for name in CASES} == {name: case["chunks"] for name, case in CASES.items()}
