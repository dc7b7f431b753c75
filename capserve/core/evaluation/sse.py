"""Incremental Server-Sent-Events parsing for OpenAI-style streams, shared by the smoke check and the load generator.

Framing as vLLM bench's ``StreamedResponseHandler`` (docs/evaluation.md §3): events are split
on a blank line; lines starting with ``:`` are comments/pings; the ``data: `` prefix is stripped; a
trailing event without its separator is accepted at EOF. Errors can arrive in-band as
``data: {"error": ...}``.
"""

from __future__ import annotations

import json
from typing import Any

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
    content: str = Field(default="", description="Concatenated delta content.")
    tool_call_chunks: int = Field(default=0, ge=0, description="Chunks carrying tool-call deltas.")
    prompt_tokens: int | None = Field(default=None, description="usage.prompt_tokens, once seen.")
    completion_tokens: int | None = Field(default=None, description="usage.completion_tokens, once seen.")
    finish_reason: str | None = Field(default=None, description="Last finish_reason seen.")
    done: bool = Field(default=False, description="`[DONE]` received.")
    error: str | None = Field(default=None, description="In-band error message or an unparsable event.")


def apply_event(state: StreamState, payload: str) -> tuple[bool, bool]:
    """Update ``state`` with one event; returns (is_token_event, carried_content)."""
    if payload == DONE:
        state.done = True
        return False, False
    try:
        event: Any = json.loads(payload)
    except ValueError:
        state.error = f"unparsable SSE event: {payload[:80]!r}"
        return False, False
    if not isinstance(event, dict):
        state.error = f"SSE event is not an object: {payload[:80]!r}"
        return False, False
    if "error" in event:
        err = event["error"]
        state.error = str(err.get("message", err) if isinstance(err, dict) else err)[:300]
        return False, False
    usage = event.get("usage")
    if isinstance(usage, dict):
        state.prompt_tokens = usage.get("prompt_tokens", state.prompt_tokens)
        state.completion_tokens = usage.get("completion_tokens", state.completion_tokens)
    choices = event.get("choices") or []
    if not choices:
        return False, False
    state.token_events += 1
    carried = False
    for choice in choices:
        delta = choice.get("delta") or {}
        text = delta.get("content") or delta.get("reasoning_content") or choice.get("text") or ""
        if text:
            state.content += text
            carried = True
        if delta.get("tool_calls"):
            state.tool_call_chunks += 1
            carried = True
        if choice.get("finish_reason"):
            state.finish_reason = choice["finish_reason"]
    return True, carried
