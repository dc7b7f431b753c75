"""Pure parts of the smoke profile: request bodies, the probe tool, and checks of what came back."""

from __future__ import annotations

import base64
import json
import struct
import zlib
from typing import Any, Literal

import jsonschema
from pydantic import BaseModel, ConfigDict, Field

# skipped: the check does not apply (e.g. an image to a text-only model); not_run: the evaluation's
# deadline passed, or the endpoint was unreachable, before the check could run (nothing judged).
CheckStatus = Literal["passed", "failed", "skipped", "not_run"]


class SmokeCheck(BaseModel):
    """The outcome of one smoke check."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(max_length=32, description="health, models, chat_stream, image, tool_call.")
    status: CheckStatus = Field(description="passed, failed, skipped (does not apply) or not_run (deadline).")
    detail: str = Field(default="", max_length=1000, description="What was seen, or what went wrong and where.")
    duration_ms: float = Field(default=0.0, ge=0, description="Wall time of the check.")
    # The streamed chat's two first-token times (docs/evaluation.md §4): a reasoning model streams its
    # thinking first, so its first token and its first answer token can be far apart.
    ttft_ms: float | None = Field(
        default=None, ge=0, description="chat_stream: send → first chunk with choices, of any kind (vLLM bench's TTFT)."
    )
    first_answer_ms: float | None = Field(
        default=None,
        ge=0,
        description="chat_stream: send → first answer token (delta.content or a tool call; thinking excluded). "
        "None when the stream carried no answer within max_tokens.",
    )
    thinking: bool | None = Field(
        default=None, description="chat_stream: whether the stream carried thinking (delta.reasoning)."
    )


# A tool with a schema tight enough that a mis-emitting parser is caught (wrong type, missing field,
# extra field, arguments that are not JSON at all).
PROBE_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "minLength": 1, "description": "City name, e.g. Paris."},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}


def tool_call_payload(model: str, max_tokens: int, tool_choice: str) -> dict[str, Any]:
    """A chat request that should be answered with one call of ``PROBE_TOOL`` (give it room for the call:
    the caller asks for at least 64 tokens)."""
    return {
        "model": model,
        "messages": [{"role": "user", "content": "What is the weather in Paris right now? Use the tool."}],
        "tools": [PROBE_TOOL],
        "tool_choice": tool_choice,
        "max_tokens": max_tokens,
        "temperature": 0.0,
    }


def check_tool_call(response: dict[str, Any], tool: dict[str, Any] = PROBE_TOOL) -> list[str]:
    """Problems with a non-streamed tool-call answer; empty when it is a well-formed call of ``tool``."""
    try:
        message = response["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        return ["response has no choices[0].message"]
    calls = message.get("tool_calls") or []
    if not calls:
        content = (message.get("content") or "")[:120]
        return [f"no tool_calls in the message (content: {content!r})"]
    problems = []
    expected = tool["function"]["name"]
    for number, call in enumerate(calls):
        function = call.get("function") or {}
        if function.get("name") != expected:
            problems.append(f"call {number}: function name {function.get('name')!r}, expected {expected!r}")
            continue
        raw = function.get("arguments")
        try:
            arguments = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError:
            problems.append(f"call {number}: arguments are not JSON: {str(raw)[:120]!r}")
            continue
        validator = jsonschema.Draft202012Validator(tool["function"]["parameters"])
        for error in validator.iter_errors(arguments):
            problems.append(f"call {number}: arguments violate the schema: {error.message[:200]}")
    return problems


def tiny_png(width: int = 8, height: int = 8, rgb: tuple[int, int, int] = (220, 30, 30)) -> bytes:
    """A solid-colour PNG built in memory (no image library, no file on disk)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    row = b"\x00" + bytes(rgb) * width
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(row * height))
        + chunk(b"IEND", b"")
    )


def image_payload(model: str, max_tokens: int) -> dict[str, Any]:
    """A chat request with one image given as a data URL."""
    url = "data:image/png;base64," + base64.b64encode(tiny_png(32, 32)).decode()
    return {
        "model": model,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What colour is this image? Answer with one word."},
                    {"type": "image_url", "image_url": {"url": url}},
                ],
            }
        ],
        "max_tokens": max_tokens,
        "temperature": 0.0,
    }


def chat_stream_payload(model: str, max_tokens: int) -> dict[str, Any]:
    """The smoke streamed chat request, asking for usage in the final chunk."""
    return {
        "model": model,
        "messages": [{"role": "user", "content": "Say hello in one short sentence."}],
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0.0,
    }


# What OpenAI-compatible servers answer when a text-only model gets an image (lowercased substrings).
TEXT_ONLY_MARKERS = ("multimodal", "image", "vision", "not support")


def looks_text_only(status: int, body: str) -> bool:
    """Whether a rejected image request means 'this model takes no images' rather than a fault."""
    return status == 400 and any(marker in body.lower() for marker in TEXT_ONLY_MARKERS)
