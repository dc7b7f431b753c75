"""The load generator: aiohttp (+ uvloop) in its own process, measuring the server and itself.

Why not httpx here: httpx tops out near 200 requests/s on this machine and inflates TTFT under many
streams (httpcore's O(n²) pool bookkeeping, encode/httpx#3215; docs/evaluation.md §5.1). aiohttp is what
``vllm bench serve`` uses. Each process pre-opens its connections, says READY, waits for a common GO
time from the parent (perf_counter is CLOCK_MONOTONIC on Linux, shared across processes), runs its
share, and writes a ``RunRecord`` JSON. It records its own event-loop lag (10 ms ticker), dispatch
delay and CPU, so a saturated client invalidates a run instead of failing the model.

It also tells its own failures from the endpoint's: a request that hit a local limit (too many open
files, no free local port, no buffer space), that timed out still waiting for a slot in the client's
own connection pool, or that was stopped at the run's deadline (``stop_after_s``) is recorded as the
client's ('client' / 'cancelled'), never as the endpoint's. Error texts are redacted: an endpoint
may echo the Authorization header in an error body.

    python -m capserve.tasks.evaluation.loadgen JOB.json OUT.json
    (the Authorization header value, if any, in $CAPSERVE_LOADGEN_AUTHORIZATION)
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import errno
import os
import resource
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiohttp

from capserve.core.evaluation.client_limits import AUTHORIZATION_ENV, FD_RESERVE, WARMUP_TIMEOUT_S
from capserve.core.evaluation.metrics import percentile
from capserve.core.evaluation.records import ClientStats, ErrorKind, RequestRecord, RunRecord
from capserve.core.evaluation.sse import SseDecoder, StreamState, apply_event
from capserve.core.evaluation.workload import LoadJob, PlannedRequest, stream_chat_payload
from capserve.core.redaction import Redactor

TICK_S = 0.010
# Long outputs arrive in big reads; aiohttp's 64 KiB default collapses throughput at long context
# (vllm-project/vllm#39963).
READ_BUFSIZE = 4 * 1024 * 1024
# Local resource exhaustion: the client's limits, not the endpoint's behaviour.
_LOCAL_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.EADDRNOTAVAIL, errno.ENOBUFS, errno.ENOMEM}


def _authorization() -> str | None:
    return os.environ.get(AUTHORIZATION_ENV) or None


def redactor_for(authorization: str | None) -> Redactor:
    """A redactor for this process: the header value, its token, and a Basic header's decoded parts."""
    if not authorization:
        return Redactor()
    secrets = [authorization]
    kind, _, token = authorization.partition(" ")
    secrets.append(token)
    if kind.lower() == "basic":
        with contextlib.suppress(binascii.Error, UnicodeDecodeError):
            pair = base64.b64decode(token, validate=True).decode("utf-8")
            secrets += [pair, pair.partition(":")[2]]
    return Redactor(secrets)


def _local_errno(exc: BaseException) -> int | None:
    """The errno of a local resource error inside ``exc`` (aiohttp wraps it in ClientConnectorError)."""
    for candidate in (getattr(exc, "os_error", None), exc, exc.__cause__):
        code = getattr(candidate, "errno", None)
        if code in _LOCAL_ERRNOS:
            return int(code)
    return None


def _trace_config() -> aiohttp.TraceConfig:
    """Marks on each request's trace context whether it is still queued for a connection of our pool."""
    config = aiohttp.TraceConfig()

    async def queued(session: Any, ctx: SimpleNamespace, params: Any) -> None:
        if isinstance(ctx.trace_request_ctx, dict):
            ctx.trace_request_ctx["queued"] = True

    async def dequeued(session: Any, ctx: SimpleNamespace, params: Any) -> None:
        if isinstance(ctx.trace_request_ctx, dict):
            ctx.trace_request_ctx["queued"] = False

    config.on_connection_queued_start.append(queued)
    config.on_connection_queued_end.append(dequeued)
    return config


async def send_one(
    session: aiohttp.ClientSession,
    job: LoadJob,
    planned: PlannedRequest,
    scheduled: float | None,
    stop_at: float | None = None,
    scrub: Redactor | None = None,
) -> RequestRecord:
    """One streamed chat completion, timed exactly as vLLM bench times it."""
    scrub = scrub or Redactor()
    payload = stream_chat_payload(job.model, planned.prompt, planned.max_tokens, ignore_eos=job.ignore_eos)
    chunk_times: list[float] = []
    first_content: float | None = None
    first_answer: float | None = None
    headers_at: float | None = None
    status: int | None = None
    state = StreamState()
    error_kind: ErrorKind | None = None
    error: str | None = None
    send = time.perf_counter()
    limit, cut_by_stop = job.request_timeout_s, False
    if stop_at is not None and stop_at - send < limit:
        limit, cut_by_stop = max(stop_at - send, 0.001), True
    trace: dict[str, bool] = {"queued": False}
    try:
        async with session.post(
            job.url, json=payload, timeout=aiohttp.ClientTimeout(total=limit), trace_request_ctx=trace
        ) as response:
            headers_at = time.perf_counter()
            status = response.status
            if status != 200:
                body = scrub.redact((await response.text())[:400])[:200]
                error_kind, error = "http_status", f"HTTP {status}: {body}"
            else:
                decoder = SseDecoder()
                async for chunk in response.content.iter_any():
                    now = time.perf_counter()
                    for event in decoder.feed(chunk):
                        kind = apply_event(state, event)
                        if kind.token:
                            chunk_times.append(now)
                            if kind.output and first_content is None:
                                first_content = now
                            if kind.answer and first_answer is None:
                                first_answer = now
                    if state.done:
                        break  # some servers keep the connection open after [DONE]
                for event in decoder.finish():
                    apply_event(state, event)
    except TimeoutError:
        if cut_by_stop:
            error_kind, error = "cancelled", f"stopped at the run's deadline after {limit:.1f} s"
        elif trace["queued"]:
            error_kind, error = "client", (
                f"timed out after {limit:g} s still waiting for a free connection in the client's own pool"
            )
        else:
            error_kind, error = "timeout", f"no complete answer within {job.request_timeout_s:g} s"
    except aiohttp.ClientPayloadError as exc:
        error_kind, error = "stream_cut", f"stream cut after {len(chunk_times)} token chunks: {type(exc).__name__}"
    except (aiohttp.ClientError, OSError) as exc:
        code = _local_errno(exc)
        if code is not None:
            error_kind, error = "client", f"local resource limit on the client: {os.strerror(code)}"
        elif isinstance(exc, aiohttp.ClientError):
            error_kind, error = "connection", scrub.redact(f"{type(exc).__name__}: {str(exc)[:150]}")
        else:
            raise
    end = time.perf_counter()
    if error_kind is None:
        if state.error is not None:
            error_kind, error = "error_event", scrub.redact(state.error[:300])
        elif not chunk_times:
            error_kind, error = "no_tokens", "HTTP 200 but no chunk with choices"
        elif not state.done:
            error_kind, error = "stream_cut", f"stream ended without [DONE] after {len(chunk_times)} token chunks"
    return RequestRecord(
        index=planned.index,
        prompt_tokens_requested=planned.prompt_tokens,
        max_tokens=planned.max_tokens,
        scheduled=scheduled,
        send=send,
        headers=headers_at,
        chunk_times=chunk_times,
        first_content=first_content,
        first_answer=first_answer,
        end=end,
        prompt_tokens=state.prompt_tokens,
        completion_tokens=state.completion_tokens,
        status=status,
        success=error_kind is None,
        error_kind=error_kind,
        error=error,
    )


class _Ticker:
    """Event-loop lag: how late a 10 ms sleep wakes up."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        # perf_counter, not loop.time(): uvloop's clock has 1 ms resolution.
        while True:
            before = time.perf_counter()
            await asyncio.sleep(TICK_S)
            self.lags.append(max(0.0, time.perf_counter() - before - TICK_S))

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


async def _warmup(session: aiohttp.ClientSession, job: LoadJob, scrub: Redactor) -> None:
    """Pre-open one connection per slot so TTFT never includes a TCP connect, then a few real requests."""
    timeout = aiohttp.ClientTimeout(total=min(WARMUP_TIMEOUT_S, job.request_timeout_s))

    async def touch() -> None:
        async with session.get(job.models_url, timeout=timeout) as response:
            await response.read()

    await asyncio.gather(*(touch() for _ in range(job.concurrency)), return_exceptions=True)
    warm = PlannedRequest(index=0, prompt="Warm up.", prompt_tokens=2, max_tokens=4)
    stop_at = time.perf_counter() + WARMUP_TIMEOUT_S
    for _ in range(job.warmup_requests):
        if time.perf_counter() >= stop_at:
            break
        await send_one(session, job, warm, None, stop_at, scrub)


def _not_sent(planned: PlannedRequest, at: float) -> RequestRecord:
    """A request the run's deadline came before: never sent, the client's doing."""
    return RequestRecord(
        index=planned.index,
        prompt_tokens_requested=planned.prompt_tokens,
        max_tokens=planned.max_tokens,
        send=at,
        end=at,
        success=False,
        error_kind="cancelled",
        error="not sent: the run's deadline passed first",
    )


async def _closed_loop(
    session: aiohttp.ClientSession, job: LoadJob, start: float, stop_at: float | None, scrub: Redactor
) -> list[RequestRecord]:
    pending = list(reversed(job.requests))
    records: list[RequestRecord] = []

    async def worker() -> None:
        free_at = start
        while pending and (stop_at is None or time.perf_counter() < stop_at):
            planned = pending.pop()
            record = await send_one(session, job, planned, free_at, stop_at, scrub)
            records.append(record)
            free_at = time.perf_counter()

    await asyncio.gather(*(worker() for _ in range(job.concurrency)))
    now = time.perf_counter()
    records += [_not_sent(planned, now) for planned in pending]
    return records


async def _open_loop(
    session: aiohttp.ClientSession, job: LoadJob, start: float, stop_at: float | None, scrub: Redactor
) -> list[RequestRecord]:
    slots = asyncio.Semaphore(job.concurrency)
    loop = asyncio.get_running_loop()
    offset = loop.time() - time.perf_counter()  # map perf_counter times onto the loop's clock

    async def fire(planned: PlannedRequest) -> RequestRecord:
        async with slots:
            if stop_at is not None and time.perf_counter() >= stop_at:
                return _not_sent(planned, time.perf_counter())
            return await send_one(session, job, planned, start + planned.delay_s, stop_at, scrub)

    tasks = []
    late: list[RequestRecord] = []
    for planned in job.requests:
        if stop_at is not None and start + planned.delay_s >= stop_at:
            late.append(_not_sent(planned, stop_at))
            continue
        due = start + planned.delay_s + offset
        if due > loop.time():
            await asyncio.sleep(due - loop.time())
        tasks.append(loop.create_task(fire(planned)))
    return list(await asyncio.gather(*tasks)) + late


def raise_open_files_limit(streams: int) -> None:
    """Lift the soft open-file limit towards the hard one when this job needs more sockets than it allows."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = streams + FD_RESERVE
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


async def run_job(job: LoadJob, wait_for_go: bool = True) -> RunRecord:
    """Warm up, wait for the parent's GO time, run (until ``stop_after_s`` at most), and measure ourselves."""
    uses_uvloop = type(asyncio.get_running_loop()).__module__.startswith("uvloop")
    authorization = _authorization()
    scrub = redactor_for(authorization)
    connector = aiohttp.TCPConnector(limit=job.concurrency, limit_per_host=job.concurrency, keepalive_timeout=60)
    timeout = aiohttp.ClientTimeout(total=job.request_timeout_s)
    headers = {"Authorization": authorization} if authorization else {}
    async with aiohttp.ClientSession(
        connector=connector,
        timeout=timeout,
        headers=headers,
        read_bufsize=READ_BUFSIZE,
        trace_configs=[_trace_config()],
    ) as session:
        await _warmup(session, job, scrub)
        start = time.perf_counter()
        if wait_for_go:
            print("READY", flush=True)
            line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
            start = float(line.split()[1])  # "GO <perf_counter time>"
            await asyncio.sleep(max(0.0, start - time.perf_counter()))
        stop_at = start + job.stop_after_s if job.stop_after_s is not None else None
        ticker = _Ticker()
        ticker.start()
        cpu0, wall0 = time.process_time(), time.perf_counter()
        runner = _closed_loop if job.mode == "closed" else _open_loop
        records = await runner(session, job, start, stop_at, scrub)
        cpu = (time.process_time() - cpu0) / max(time.perf_counter() - wall0, 1e-9) * 100
        await ticker.stop()
    delays = [(r.send - r.scheduled) * 1000 for r in records if r.scheduled is not None]
    lags = [lag * 1000 for lag in ticker.lags] or [0.0]
    client = ClientStats(
        cpu_percent=cpu,
        loop_lag_p99_ms=percentile(lags, 99),
        loop_lag_max_ms=max(lags),
        dispatch_delay_p95_ms=max(0.0, percentile(delays, 95)) if delays else 0.0,
        uvloop=uses_uvloop,
    )
    end = max((r.end or r.send for r in records), default=start)
    return RunRecord(
        name=job.name,
        mode=job.mode,
        concurrency=job.concurrency if job.mode == "closed" else None,
        request_rate=job.request_rate,
        start=start,
        end=end,
        requests=sorted(records, key=lambda r: r.index),
        client=client,
    )


def install_uvloop() -> bool:
    """Use uvloop when it is installed (Linux); the generator works without it, only slower."""
    try:
        import uvloop
    except ImportError:
        return False
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return True


def main(argv: list[str]) -> int:
    job = LoadJob.model_validate_json(Path(argv[0]).read_text(encoding="utf-8"))
    raise_open_files_limit(job.concurrency)
    install_uvloop()
    record = asyncio.run(run_job(job))
    Path(argv[1]).write_text(record.model_dump_json(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
