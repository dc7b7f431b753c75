"""A local OpenAI-compatible chat server with known latencies and injectable faults (tests and demo only).

It streams the way vLLM does (docs/evaluation.md §4): the role arrives with the first token,
one token per chunk, then a ``choices: []`` chunk with ``usage``, then ``data: [DONE]``. Tokens are
scheduled on absolute times from the request's arrival (arrival + TTFT + i·ITL), so the latencies
a client should measure are known. Runs in its own process so a busy test process cannot distort it.

    with serve(SandboxConfig(ttft=Dist(mean_ms=50))) as base_url:
        ...  # base_url == "http://127.0.0.1:<port>"
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import math
import os
import random
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from capserve.core.errors import RetryableError
from capserve.core.evaluation.quality import packaged_golden


class Dist(BaseModel):
    """A latency distribution in milliseconds (samples below zero are clipped to zero)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["constant", "normal", "uniform", "lognormal"] = Field(default="constant", description="Shape.")
    mean_ms: float = Field(default=0.0, ge=0, le=600_000, description="Mean (constant: the value).")
    spread_ms: float = Field(default=0.0, ge=0, le=600_000, description="normal/lognormal: std; uniform: half-width.")

    def sample(self, rng: random.Random) -> float:
        """One sample in seconds."""
        if self.kind == "constant" or self.spread_ms == 0:
            value = self.mean_ms
        elif self.kind == "normal":
            value = rng.gauss(self.mean_ms, self.spread_ms)
        elif self.kind == "uniform":
            value = rng.uniform(self.mean_ms - self.spread_ms, self.mean_ms + self.spread_ms)
        else:
            # lognormal parametrised by its own mean and std
            mu2 = max(self.mean_ms, 1e-6) ** 2
            sigma2 = math.log(1 + self.spread_ms**2 / mu2)
            value = rng.lognormvariate(math.log(mu2) / 2 - sigma2 / 2, sigma2**0.5)
        return max(0.0, value) / 1000


class Faults(BaseModel):
    """Fault injection; each rate is a probability per request (1.0 = every request)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    http_5xx_rate: float = Field(default=0.0, ge=0, le=1, description="Answer 503 instead of generating.")
    stream_cut_rate: float = Field(default=0.0, ge=0, le=1, description="Drop the connection mid-stream.")
    cut_after_chunks: int = Field(default=2, ge=0, le=100_000, description="Token chunks sent before the cut.")
    slow_first_token_rate: float = Field(default=0.0, ge=0, le=1, description="Add slow_first_token_ms to TTFT.")
    slow_first_token_ms: float = Field(default=2000.0, ge=0, le=600_000, description="Extra TTFT of a slow request.")
    malformed_tool_call_rate: float = Field(
        default=0.0, ge=0, le=1, description="Emit tool-call arguments that are not valid JSON."
    )
    echo_credentials_rate: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="Reject a chat request with HTTP 400 whose error body echoes the Authorization header it got "
        "(raw and base64-decoded): an endpoint that leaks the caller's key.",
    )


class SandboxConfig(BaseModel):
    """Behaviour of the sandbox server."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    model: str = Field(default="sandbox-model", min_length=1, max_length=200, description="Served model name.")
    max_model_len: int = Field(default=8192, ge=1, description="Reported in /v1/models.")
    ttft: Dist = Field(default_factory=lambda: Dist(mean_ms=20.0), description="Time to first token.")
    itl: Dist = Field(default_factory=lambda: Dist(mean_ms=2.0), description="Gap between token chunks.")
    default_output_tokens: int = Field(default=16, ge=1, le=100_000, description="When max_tokens is absent.")
    vision: bool = Field(default=True, description="Accept image inputs; False answers 400 like a text-only model.")
    quality_accuracy: float = Field(
        default=1.0, ge=0, le=1, description="Probability of answering a golden-set question correctly."
    )
    faults: Faults = Field(default_factory=Faults, description="Fault injection.")
    seed: int = Field(default=0, ge=0, description="Seed of every random choice.")
    record_timings: bool = Field(
        default=False, description="Keep the server's own clock per stream, served at GET /sandbox/timings."
    )
    tool_choice_auto_refusal: dict[str, Any] | None = Field(
        default=None,
        description="{'status', 'body'}: answer a chat request with tool_choice 'auto' this way, as vLLM does when "
        "started without --enable-auto-tool-choice and --tool-call-parser (the kubelet fills it from vLLM's own "
        "rule, capserve/core/vllm/rules.py); None: auto tool choice is on.",
    )
    reasoning_parser: str | None = Field(
        default=None,
        max_length=64,
        description="vLLM --reasoning-parser the stand-in is served with: its thinking then streams in "
        "delta.reasoning (message.reasoning) before the answer, and usage carries reasoning_tokens. None: no "
        "thinking.",
    )
    thinking_tokens: int = Field(
        default=48,
        ge=0,
        le=100_000,
        description="Tokens of thinking before each answer when a reasoning parser is set (more than the smoke "
        "check's 32, as a real reasoning model's thinking is); chat_template_kwargs thinking=false skips it.",
    )
    api_key_env: str | None = Field(
        default=None,
        max_length=128,
        description="Require 'Authorization: Bearer <value of this environment variable>' on /v1 routes, as "
        "`vllm serve --api-key` does (401 otherwise; /health stays open). The key itself never goes into the "
        "config, which travels on the command line.",
    )


# A sandbox-only file beside a checkpoint's config.json: {"quality_accuracy": 0.0, ...} makes the stand-in serving
# that checkpoint answer golden-set questions right with that probability, so a "bad" revision
# (capserve_sandbox.hub.publish_revision) fails the quality gate on what it really answers. A file of its own, not
# a key of config.json: vLLM's compile cache hashes config.json (docs/serving.md §4), and a new revision that
# changes only its weights keeps config.json as it was.
MODEL_MARKER_FILE = "capserve_sandbox.json"


def quality_of_checkpoint(model_dir: Path) -> float | None:
    """The served quality a checkpoint's marker file asks of the stand-in (None: the server's default)."""
    try:
        marker = json.loads((model_dir / MODEL_MARKER_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    value = marker.get("quality_accuracy") if isinstance(marker, dict) else None
    return float(value) if isinstance(value, int | float) and 0 <= value <= 1 else None


def _text_of(messages: list[dict[str, Any]]) -> tuple[str, bool]:
    """(all text, whether any image part is present)."""
    texts, image = [], False
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            for part in content:
                if part.get("type") == "text":
                    texts.append(part.get("text", ""))
                elif part.get("type") == "image_url":
                    image = True
    return " ".join(texts), image


class _Server:
    def __init__(self, config: SandboxConfig, api_key: str | None = None) -> None:
        self.config = config
        self.api_key = api_key
        self.rng = random.Random(config.seed)  # noqa: S311 - a seeded, reproducible stand-in, not a secret
        self.golden = {item.prompt: item.answer for item in packaged_golden()}
        self.counter = 0
        self.timings: list[dict[str, Any]] = []
        self.api_key = os.environ.get(config.api_key_env) if config.api_key_env else None

    def _roll(self, rate: float) -> bool:
        return rate > 0 and self.rng.random() < rate

    def _reply_words(self, prompt: str, n: int) -> list[str]:
        answer = self.golden.get(prompt)
        if answer is None:
            return [f" tok{i}" for i in range(n)]
        correct = self.config.quality_accuracy == 1 or not self._roll(1 - self.config.quality_accuracy)
        return ["Answer:", *(answer.split() if correct else ["wrong"])]

    async def timings_view(self, request: Any) -> Any:
        from aiohttp import web

        return web.json_response(self.timings)

    async def health(self, request: Any) -> Any:
        from aiohttp import web

        return web.Response(status=200)

    def _unauthorized(self, request: Any) -> Any:
        """vLLM's answer to a /v1 request without the right key, or None when the request may pass."""
        from aiohttp import web

        if self.api_key is None or request.headers.get("Authorization") == f"Bearer {self.api_key}":
            return None
        return web.json_response({"error": "Unauthorized"}, status=401)

    async def models(self, request: Any) -> Any:
        from aiohttp import web

        if (denied := self._unauthorized(request)) is not None:
            return denied
        created = int(time.time())
        data = [
            {"id": self.config.model, "object": "model", "created": created, "max_model_len": self.config.max_model_len}
        ]
        return web.json_response({"object": "list", "data": data})

    def _thinks(self, body: dict[str, Any]) -> bool:
        """Whether this request streams thinking: served with a reasoning parser, and not turned off by the
        request's chat_template_kwargs (``thinking`` or ``enable_thinking`` false, as vLLM 0.32's kimi_k3
        parser reads them: vllm/reasoning/kimi_k3_reasoning_parser.py)."""
        if self.config.reasoning_parser is None or self.config.thinking_tokens == 0:
            return False
        kwargs = body.get("chat_template_kwargs") or {}
        switch = kwargs.get("thinking", kwargs.get("enable_thinking", True)) if isinstance(kwargs, dict) else True
        return bool(switch)

    async def chat(self, request: Any) -> Any:
        from aiohttp import web

        loop = asyncio.get_running_loop()
        arrival, arrival_pc = loop.time(), time.perf_counter()
        if (denied := self._unauthorized(request)) is not None:
            return denied
        body = await request.json()
        cfg, faults = self.config, self.config.faults
        if self._roll(faults.echo_credentials_rate):
            sent = request.headers.get("Authorization", "")
            decoded = ""
            if sent.startswith("Basic "):
                with contextlib.suppress(ValueError):
                    decoded = base64.b64decode(sent[6:]).decode("utf-8", errors="replace")
            leak = f"invalid credentials {sent!r} (decoded: {decoded!r}) for model {body.get('model')}"
            return web.json_response({"error": {"message": leak, "type": "invalid_request_error"}}, status=400)
        if body.get("model") != cfg.model:
            return web.json_response(
                {"error": {"message": f"The model `{body.get('model')}` does not exist."}}, status=404
            )
        refusal = cfg.tool_choice_auto_refusal
        # vLLM's request model makes tool_choice "auto" when tools come without one (ChatCompletionRequest's
        # check_tool_usage, vllm/entrypoints/openai/chat_completion/protocol.py).
        tool_choice = body.get("tool_choice", "auto" if body.get("tools") else None)
        if refusal is not None and tool_choice == "auto":
            return web.json_response(refusal["body"], status=int(refusal["status"]))
        if self._roll(faults.http_5xx_rate):
            return web.json_response({"error": {"message": "injected fault: service unavailable"}}, status=503)
        prompt, has_image = _text_of(body.get("messages", []))
        if has_image and not cfg.vision:
            return web.json_response({"error": {"message": "sandbox-model is not a multimodal model"}}, status=400)
        field = "max_completion_tokens" if body.get("max_completion_tokens") else "max_tokens"
        n = int(body.get(field) or cfg.default_output_tokens)
        if n > cfg.max_model_len:
            # vLLM 0.32 refuses it (vllm/renderers/params.py TokenizeParams); below it, it trims max_tokens
            # to what the prompt leaves (get_max_tokens in vllm/entrypoints/serve/utils/api_utils.py).
            text = f"{field}={n} cannot be greater than max_model_len={cfg.max_model_len}. Please request fewer "
            text += f"output tokens. (parameter={field}, value={n})"
            error = {"message": text, "type": "BadRequestError", "param": field, "code": 400}
            return web.json_response({"error": error}, status=400)
        n = max(1, min(n, cfg.max_model_len - len(prompt.split())))
        user = next((m.get("content") for m in reversed(body.get("messages", [])) if m.get("role") == "user"), "")
        words = self._reply_words(user if isinstance(user, str) else prompt, n)
        tool_call = None
        if body.get("tools") and body.get("tool_choice") != "none":
            malformed = self._roll(faults.malformed_tool_call_rate)
            tool_call = {
                "id": f"chatcmpl-tool-sandbox{self.counter}",
                "type": "function",
                "function": {
                    "name": body["tools"][0]["function"]["name"],
                    "arguments": '{"city": "Paris", ' if malformed else '{"city": "Paris", "unit": "celsius"}',
                },
            }
        reply = _plan_reply(
            thoughts=[f" think{i}" for i in range(cfg.thinking_tokens)] if self._thinks(body) else [],
            words=words,
            tool_call=tool_call,
            max_tokens=n,
            ignore_eos=bool(body.get("ignore_eos")),
        )
        ttft = cfg.ttft.sample(self.rng)
        if self._roll(faults.slow_first_token_rate):
            ttft += faults.slow_first_token_ms / 1000
        itls = [cfg.itl.sample(self.rng) for _ in reply.deltas[1:]]
        prompt_tokens = len(prompt.split())
        # In vLLM's UsageInfo field order (serve/engine/protocol.py), which its JSON keeps.
        usage: dict[str, Any] = {
            "prompt_tokens": prompt_tokens,
            "total_tokens": prompt_tokens + reply.tokens,
            "completion_tokens": reply.tokens,
        }
        if cfg.reasoning_parser is not None:  # vLLM adds the details whenever a reasoning parser is set
            usage["completion_tokens_details"] = {"reasoning_tokens": reply.reasoning_tokens}
        self.counter += 1
        rid = f"chatcmpl-sandbox-{self.counter}"
        if not body.get("stream"):
            await asyncio.sleep(max(0.0, arrival + ttft + sum(itls) - loop.time()))
            message: dict[str, Any] = {"role": "assistant", "content": reply.content or None}
            if reply.tool_call is not None:
                message["tool_calls"] = [reply.tool_call]
            if cfg.reasoning_parser is not None:
                message["reasoning"] = reply.reasoning or None  # vLLM 0.32 ChatMessage.reasoning
            choice = {"index": 0, "message": message, "finish_reason": reply.finish_reason}
            return web.json_response(
                {"id": rid, "object": "chat.completion", "model": cfg.model, "choices": [choice], "usage": usage}
            )
        return await self._stream(request, body, rid, reply, (arrival, arrival_pc), ttft, itls, usage)

    async def _stream(
        self,
        request: Any,
        body: dict[str, Any],
        rid: str,
        reply: Reply,
        arrival_at: tuple[float, float],
        ttft: float,
        itls: list[float],
        usage: dict[str, Any],
    ) -> Any:
        """The chunks vLLM 0.32's chat_completion_stream_generator sends (docs/evaluation.md §4): the role
        chunk, one chunk per token (thinking in ``delta.reasoning``, then ``delta.content`` or tool-call
        deltas), finish_reason on the last, the usage chunk when asked, ``[DONE]``. Field for field as
        vLLM's pydantic classes serialize them (tests/eval/test_sandbox_stream_format.py)."""
        from aiohttp import web

        loop = asyncio.get_running_loop()
        arrival, arrival_pc = arrival_at
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        cut = self._roll(self.config.faults.stream_cut_rate)
        head = {"id": rid, "object": "chat.completion.chunk", "created": int(time.time()), "model": self.config.model}

        def event(payload: dict[str, Any]) -> bytes:
            return b"data: " + json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode() + b"\n\n"

        due = arrival + ttft
        first_write: float | None = None
        for i, delta in enumerate(reply.deltas):
            if i:
                due += itls[i - 1]
            await asyncio.sleep(max(0.0, due - loop.time()))
            if cut and i >= self.config.faults.cut_after_chunks:
                # Drop the TCP connection mid-body: the client sees an incomplete chunked stream.
                request.transport.close()
                return response
            if i == 0:
                # vLLM's first iteration: the role with empty content, before the first token's chunk.
                role = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None}
                first_write = time.perf_counter()
                await response.write(
                    event(
                        {
                            **head,
                            "choices": [{**role, "finish_reason": None}],
                            "prompt_token_ids": None,
                            "prompt_text": None,
                        }
                    )
                )
            choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None}
            if i < len(reply.deltas) - 1:
                choice |= {"finish_reason": None, "token_ids": None}
            else:
                choice |= {"finish_reason": reply.finish_reason, "stop_reason": None, "token_ids": None}
            await response.write(event({**head, "choices": [choice]}))
        if (body.get("stream_options") or {}).get("include_usage"):
            if self.config.record_timings:
                # The server's own clock (CLOCK_MONOTONIC, shared with the client on this host), served at
                # /sandbox/timings, so tests can tell server-side lateness from client-side error.
                truth = {"arrival": arrival_pc, "first_write": first_write, "ttft_s": ttft}
                self.timings.append({"prompt_head": str(body["messages"][-1].get("content"))[:24], **truth})
            await response.write(event({**head, "choices": [], "usage": usage}))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


class Reply(BaseModel):
    """What the stand-in answers one request with, token by token."""

    model_config = ConfigDict(extra="forbid")
    deltas: list[dict[str, Any]] = Field(description="One streamed delta per generated token, in order.")
    tokens: int = Field(ge=0, description="usage.completion_tokens (an EOS token counts, as in vLLM).")
    reasoning_tokens: int = Field(ge=0, description="Tokens of thinking.")
    reasoning: str = Field(default="", description="The thinking text.")
    content: str = Field(default="", description="The answer text.")
    tool_call: dict[str, Any] | None = Field(default=None, description="The tool call, when one was made.")
    finish_reason: str = Field(description="stop, length or tool_calls.")


def _texts(words: list[str]) -> list[str]:
    """Token texts as a detokenizer gives them: a space before every word but the first."""
    return [w.lstrip() if i == 0 else (w if w.startswith(" ") else " " + w) for i, w in enumerate(words)]


def _plan_reply(
    *, thoughts: list[str], words: list[str], tool_call: dict[str, Any] | None, max_tokens: int, ignore_eos: bool
) -> Reply:
    """Thinking first, then the answer (or a tool call), within ``max_tokens``: what vLLM generates.

    A reasoning parser streams the thinking as ``{"reasoning": t}`` deltas and the rest as ``{"content": t}``
    (vllm/reasoning/kimi_k3_reasoning_parser.py ``extract_reasoning_streaming``); a tool parser streams the
    call's name, then its arguments in pieces (vllm/tool_parsers/hermes_tool_parser.py). Past
    ``max_tokens`` the output is cut (finish_reason ``length``), thinking or not; when the model stops by
    itself, its EOS token is one more completion token whose chunk has an empty delta and the
    finish_reason (serving.py sends ``DeltaMessage()`` when a finished output has no text).
    """
    thinking = _texts(thoughts)[:max_tokens]
    room = max_tokens - len(thinking)
    deltas: list[dict[str, Any]] = [{"reasoning": t} for t in thinking]
    answer: list[str] = []
    call = None
    if tool_call is not None and room > 0:
        arguments = tool_call["function"]["arguments"]
        pieces = [arguments[: len(arguments) // 2], arguments[len(arguments) // 2 :]]
        # DeltaToolCall's field order: id, type, index, function.
        name = {
            "id": tool_call["id"],
            "type": "function",
            "index": 0,
            "function": {"name": tool_call["function"]["name"]},
        }
        steps = [{"tool_calls": [name]}] + [
            {"tool_calls": [{"index": 0, "function": {"arguments": p}}]} for p in pieces
        ]
        if len(steps) <= room:
            deltas += steps
            call = tool_call
            deltas.append({})
            return Reply(
                deltas=deltas,
                tokens=len(deltas),
                reasoning_tokens=len(thinking),
                reasoning="".join(thinking),
                tool_call=call,
                finish_reason="tool_calls",
            )
        room = 0
    if ignore_eos and words:
        words = (words * (room // len(words) + 1))[:room]
    answer = _texts(words)[:room]
    deltas += [{"content": t} for t in answer]
    finished = (
        not ignore_eos and len(thinking) == len(thoughts) and len(answer) == len(words) and len(deltas) < max_tokens
    )
    if finished:
        deltas.append({})
    return Reply(
        deltas=deltas,
        tokens=len(deltas),
        reasoning_tokens=len(thinking),
        reasoning="".join(thinking),
        content="".join(answer),
        finish_reason="stop" if finished else "length",
    )


def _api_key_middleware(api_key: str) -> Any:
    """vLLM's ``--api-key`` rule: every ``/v1`` route needs ``Authorization: Bearer <key>``; /health does not."""
    import hmac

    from aiohttp import web

    @web.middleware
    async def check(request: Any, handler: Any) -> Any:
        if request.path.startswith("/v1"):
            given = request.headers.get("Authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {api_key}".encode()):
                return web.json_response({"error": "Unauthorized"}, status=401)
        return await handler(request)

    return check


async def _run(config: SandboxConfig, port: int, listen_after_s: float = 0.0) -> None:
    import os

    from aiohttp import web

    # The key comes from the environment (vLLM reads VLLM_API_KEY too), never from the command line.
    api_key = os.environ.get("VLLM_API_KEY") or None
    server = _Server(config, api_key)
    middlewares = [_api_key_middleware(api_key)] if api_key else []
    app = web.Application(client_max_size=64 * 1024 * 1024, middlewares=middlewares)
    app.router.add_get("/health", server.health)
    app.router.add_get("/v1/models", server.models)
    app.router.add_post("/v1/chat/completions", server.chat)
    app.router.add_get("/sandbox/timings", server.timings_view)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    if listen_after_s > 0:  # a slow start: nothing listens yet, so probes get "connection refused"
        print(f"loading (listening in {listen_after_s:g} s)", flush=True)
        await asyncio.sleep(listen_after_s)
    # Bind ourselves so the chosen port (0 = any free one) can be reported without private attributes.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    site = web.SockSite(runner, sock, backlog=4096)
    await site.start()
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    await asyncio.Event().wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="capserve sandbox OpenAI-compatible server (127.0.0.1 only)")
    parser.add_argument("--config-json", default="{}", help="SandboxConfig as JSON")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--listen-after-s", type=float, default=0.0, help="start listening only after this long")
    args = parser.parse_args(argv)
    config = SandboxConfig.model_validate_json(args.config_json)
    with contextlib.suppress(ImportError):
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_run(config, args.port, args.listen_after_s))


class ServerSettings(BaseModel):
    """How long to wait for the sandbox process."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    start_timeout_s: float = Field(default=30.0, gt=0, le=600, description="Wait for the port line.")
    stop_timeout_s: float = Field(default=5.0, gt=0, le=600, description="Wait after SIGTERM before SIGKILL.")


@contextlib.contextmanager
def serve(config: SandboxConfig | None = None, settings: ServerSettings | None = None) -> Iterator[str]:
    """Run the sandbox in a child process on 127.0.0.1:<free port>; yields its base URL."""
    config = config or SandboxConfig()
    settings = settings or ServerSettings()
    proc = subprocess.Popen(  # noqa: S603 - our own interpreter and module, fixed arguments
        [sys.executable, "-m", "capserve_sandbox.openai_server", "--config-json", config.model_dump_json()],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        port = _read_port(proc, settings.start_timeout_s)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=settings.stop_timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def _read_port(proc: subprocess.Popen[str], timeout_s: float) -> int:
    import selectors

    assert proc.stdout is not None  # noqa: S101 - narrows the type for mypy
    deadline = time.monotonic() + timeout_s
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        while (left := deadline - time.monotonic()) > 0:
            if proc.poll() is not None:
                raise RetryableError(f"sandbox OpenAI server exited with code {proc.returncode} before listening")
            if selector.select(timeout=min(left, 0.2)):
                line = proc.stdout.readline()
                if line.startswith("PORT "):
                    return int(line.split()[1])
    raise RetryableError(f"sandbox OpenAI server did not report its port within {timeout_s:g} s")


if __name__ == "__main__":
    main()
