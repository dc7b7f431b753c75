"""Incremental Server-Sent-Events parsing for OpenAI-style streams, shared by the smoke check and the load generator.

Framing as vLLM bench's ``StreamedResponseHandler`` (docs/evaluation.md §3): events are split
on a blank line; lines starting with ``:`` are comments/pings; the ``data: `` prefix is stripped; a
trailing event without its separator is accepted at EOF. Errors can arrive in-band as
``data: {"error": ...}``.

What a chunk carries (docs/evaluation.md §4): a reasoning server (``vllm serve --reasoning-parser``)
streams the model's thinking in ``delta.reasoning`` (vLLM 0.32's ``DeltaMessage``; older vLLM and
other servers call it ``reasoning_content``) and the answer in ``delta.content``. Both are output: a
stream that only thought within its token budget is a working stream. ``content`` is kept apart as
the answer, so callers can time the first answer token and score only the answer.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

DONE = "[DONE]"


class SseDecoder:
    """Feed raw bytes, get back the ``data`` payload of every complete event."""

    def __init__(self) -> None:
        self._buffer = ""
        self._pending = b""

    def feed(self, chunk: bytes) -> list[str]:
        data = self._pending + chunk
        try:
            text = data.decode("utf-8")
            self._pending = b""
        except UnicodeDecodeError as exc:
            # A multi-byte character split across reads: keep its head for the next chunk.
            text = data[: exc.start].decode("utf-8")
            self._pending = data[exc.start :]
        self._buffer += text.replace("\r\n", "\n")
        events: list[str] = []
        while (cut := self._buffer.find("\n\n")) >= 0:
            block, self._buffer = self._buffer[:cut], self._buffer[cut + 2 :]
            payload = _payload(block)
            if payload is not None:
                events.append(payload)
        return events

    def finish(self) -> list[str]:
        """At EOF: the last event if it lacked its blank line (vLLM accepts it too)."""
        block, self._buffer = self._buffer, ""
        payload = _payload(block)
        return [payload] if payload is not None else []


def _payload(block: str) -> str | None:
    lines = [line[5:].removeprefix(" ") for line in block.split("\n") if line.startswith("data:")]
    return "\n".join(lines) if lines else None


class StreamState(BaseModel):
    """What a chat-completion stream said so far."""

    model_config = ConfigDict(extra="forbid")
    token_events: int = Field(default=0, ge=0, description="Chunks with non-empty `choices`.")
    content: str = Field(default="", description="The answer: concatenated delta content (or completion text).")
    reasoning: str = Field(default="", description="The thinking: concatenated delta reasoning / reasoning_content.")
    tool_call_chunks: int = Field(default=0, ge=0, description="Chunks carrying tool-call deltas.")
    prompt_tokens: int | None = Field(default=None, description="usage.prompt_tokens, once seen.")
    completion_tokens: int | None = Field(default=None, description="usage.completion_tokens, once seen.")
    finish_reason: str | None = Field(default=None, description="Last finish_reason seen.")
    done: bool = Field(default=False, description="`[DONE]` received.")
    error: str | None = Field(default=None, description="In-band error message or an unparsable event.")


class ChunkKind(NamedTuple):
    """What one event was: a token chunk (``choices`` non-empty, vLLM bench's TTFT/ITL unit), and
    whether it carried output of any kind (thinking, answer or a tool call) or answer (content or a
    tool call)."""

    token: bool
    output: bool
    answer: bool


_NOT_A_TOKEN = ChunkKind(token=False, output=False, answer=False)
# vLLM 0.32 names the field `reasoning`; vLLM before 0.10 and DeepSeek's API `reasoning_content`.
REASONING_FIELDS = ("reasoning", "reasoning_content")


def apply_event(state: StreamState, payload: str) -> ChunkKind:
    """Update ``state`` with one event and say what it carried."""
    if payload == DONE:
        state.done = True
        return _NOT_A_TOKEN
    try:
        event: Any = json.loads(payload)
    except ValueError:
        state.error = f"unparsable SSE event: {payload[:80]!r}"
        return _NOT_A_TOKEN
    if not isinstance(event, dict):
        state.error = f"SSE event is not an object: {payload[:80]!r}"
        return _NOT_A_TOKEN
    if "error" in event:
        err = event["error"]
        state.error = str(err.get("message", err) if isinstance(err, dict) else err)[:300]
        return _NOT_A_TOKEN
    usage = event.get("usage")
    if isinstance(usage, dict):
        state.prompt_tokens = usage.get("prompt_tokens", state.prompt_tokens)
        state.completion_tokens = usage.get("completion_tokens", state.completion_tokens)
    choices = event.get("choices") or []
    if not choices:
        return _NOT_A_TOKEN
    state.token_events += 1
    output = answer = False
    for choice in choices:
        delta = choice.get("delta") or {}
        thought = next((delta[f] for f in REASONING_FIELDS if isinstance(delta.get(f), str) and delta[f]), "")
        if thought:
            state.reasoning += thought
            output = True
        text = delta.get("content") or choice.get("text") or ""
        if isinstance(text, str) and text:
            state.content += text
            output = answer = True
        if delta.get("tool_calls"):
            state.tool_call_chunks += 1
            output = answer = True
        if choice.get("finish_reason"):
            state.finish_reason = choice["finish_reason"]
    return ChunkKind(token=True, output=output, answer=answer)
