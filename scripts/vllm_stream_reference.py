"""Serialize chat-completion stream chunks with vLLM's own protocol classes (run it with .venv-vllm's python).

The reference the sandbox's simulated vLLM is checked against (tests/eval/test_sandbox_stream_format.py,
docs/evaluation.md §4; the test gets the chunks through scripts/vllm_checks.py, in the same vLLM import as the
flag checks). A *plan* names what a stream carries — the role, each delta's text and which
field it is in, the finish reason, the usage numbers — and this script builds the chunks the way vLLM
0.32's ``chat_completion_stream_generator`` (vllm/entrypoints/openai/chat_completion/serving.py) does:
the same constructors with the same arguments, serialized with the same ``model_dump_json`` flags.

    .venv-vllm/bin/python scripts/vllm_stream_reference.py --write-fixture tests/eval/fixtures/vllm_stream_chunks.json

A plan is {"id", "created", "model", "role", "deltas": [...], "finish_reason", "usage": null |
{"prompt_tokens", "completion_tokens", "reasoning_tokens": null | int}}; a delta is {"reasoning": text},
{"content": text}, {"tool_call": {"index", "id", "name"}}, {"tool_args": {"index", "arguments"}} or {}
(the empty delta vLLM sends with finish_reason when the last output has no text, e.g. at EOS).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from vllm.entrypoints.generate.base.protocol import DeltaFunctionCall, DeltaMessage, DeltaToolCall
from vllm.entrypoints.openai.chat_completion.protocol import (
    ChatCompletionResponseStreamChoice,
    ChatCompletionStreamResponse,
)
from vllm.entrypoints.serve.engine.protocol import CompletionTokenUsageInfo, UsageInfo


def _delta(spec: dict[str, Any]) -> DeltaMessage:
    # Each as the parsers build it: DeltaMessage(reasoning=...) / DeltaMessage(content=...) from a
    # reasoning parser; a tool parser's DeltaToolCall with function=DeltaFunctionCall(...).model_dump(
    # exclude_none=True) (vllm/tool_parsers/hermes_tool_parser.py); DeltaMessage() at the end.
    if "reasoning" in spec:
        return DeltaMessage(reasoning=spec["reasoning"])
    if "content" in spec:
        return DeltaMessage(content=spec["content"])
    if "tool_call" in spec:
        call = spec["tool_call"]
        function = DeltaFunctionCall(name=call["name"]).model_dump(exclude_none=True)
        return DeltaMessage(
            tool_calls=[DeltaToolCall(index=call["index"], type="function", id=call["id"], function=function)]
        )
    if "tool_args" in spec:
        args = spec["tool_args"]
        function = DeltaFunctionCall(arguments=args["arguments"]).model_dump(exclude_none=True)
        return DeltaMessage(tool_calls=[DeltaToolCall(index=args["index"], function=function)])
    if spec:
        raise ValueError(f"unknown delta {spec}")
    return DeltaMessage()


def chunks(plan: dict[str, Any]) -> list[str]:
    """The ``data:`` payloads of one stream, in order, ending with ``[DONE]``."""
    common = {"id": plan["id"], "object": "chat.completion.chunk", "created": plan["created"], "model": plan["model"]}
    out = []
    # First iteration: the role, with empty content, and prompt_token_ids/prompt_text passed explicitly.
    role = ChatCompletionResponseStreamChoice(
        index=0, delta=DeltaMessage(role=plan["role"], content=""), logprobs=None, finish_reason=None
    )
    first = ChatCompletionStreamResponse(**common, choices=[role], prompt_token_ids=None, prompt_text=None)
    out.append(first.model_dump_json(exclude_unset=True))
    deltas = plan["deltas"]
    for number, spec in enumerate(deltas):
        if number < len(deltas) - 1:
            choice = ChatCompletionResponseStreamChoice(
                index=0, delta=_delta(spec), logprobs=None, finish_reason=None, token_ids=None
            )
        else:
            choice = ChatCompletionResponseStreamChoice(
                index=0,
                delta=_delta(spec),
                logprobs=None,
                finish_reason=plan["finish_reason"],
                stop_reason=None,
                token_ids=None,
            )
        out.append(ChatCompletionStreamResponse(**common, choices=[choice]).model_dump_json(exclude_unset=True))
    usage = plan.get("usage")
    if usage is not None:
        details = usage.get("reasoning_tokens")
        final = UsageInfo(
            prompt_tokens=usage["prompt_tokens"],
            completion_tokens=usage["completion_tokens"],
            total_tokens=usage["prompt_tokens"] + usage["completion_tokens"],
            completion_tokens_details=None if details is None else CompletionTokenUsageInfo(reasoning_tokens=details),
        )
        final.prompt_tokens_details = None  # --enable-prompt-tokens-details is off
        last = ChatCompletionStreamResponse(**common, choices=[], usage=final, system_fingerprint=None, metrics=None)
        out.append(last.model_dump_json(exclude_unset=True, exclude_none=True))
    out.append("[DONE]")
    return out


def main(argv: list[str]) -> None:
    if argv[:1] != ["--write-fixture"] or len(argv) != 2:
        raise SystemExit("usage: vllm_stream_reference.py --write-fixture FIXTURE.json")
    path = Path(argv[1])
    fixture = json.loads(path.read_text(encoding="utf-8"))
    for case in fixture["cases"].values():
        case["chunks"] = chunks(case["plan"])
    import vllm

    fixture["vllm_version"] = vllm.__version__
    path.write_text(json.dumps(fixture, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1:])
