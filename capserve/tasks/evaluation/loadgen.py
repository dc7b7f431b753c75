"""The load generator: aiohttp (+ uvloop) in its own process, measuring the server and itself.

Why not httpx here: httpx tops out near 200 requests/s on this machine and inflates TTFT under many
streams (httpcore's O(n²) pool bookkeeping, encode/httpx#3215; docs/evaluation.md §5.1). aiohttp
is what ``vllm bench serve`` uses. Each process pre-opens its connections, says READY, waits for a
common GO time from the parent (perf_counter is CLOCK_MONOTONIC on Linux, shared across processes),
runs its share, and writes a ``RunRecord`` JSON. It records its own event-loop lag (10 ms ticker),
dispatch delay and CPU, so a saturated client invalidates a run instead of failing the model.

    python -m capserve.tasks.evaluation.loadgen JOB.json OUT.json     (API key in $CAPSERVE_LOADGEN_API_KEY)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from pathlib import Path

import aiohttp

from capserve.core.evaluation.metrics import percentile
from capserve.core.evaluation.records import ClientStats, ErrorKind, RequestRecord, RunRecord
from capserve.core.evaluation.sse import SseDecoder, StreamState, apply_event
from capserve.core.evaluation.workload import LoadJob, PlannedRequest, stream_chat_payload

API_KEY_ENV = "CAPSERVE_LOADGEN_API_KEY"
TICK_S = 0.010
# Long outputs arrive in big reads; aiohttp's 64 KiB default collapses throughput at long context
# (vllm-project/vllm#39963).
READ_BUFSIZE = 4 * 1024 * 1024


def _headers() -> dict[str, str]:
    key = os.environ.get(API_KEY_ENV)
    return {"Authorization": f"Bearer {key}"} if key else {}


async def send_one(
    session: aiohttp.ClientSession, job: LoadJob, planned: PlannedRequest, scheduled: float | None
) -> RequestRecord:
    """One streamed chat completion, timed exactly as vLLM bench times it."""
    payload = stream_chat_payload(job.model, planned.prompt, planned.max_tokens, ignore_eos=job.ignore_eos)
    chunk_times: list[float] = []
    first_content: float | None = None
    headers_at: float | None = None
    status: int | None = None
    state = StreamState()
    error_kind: ErrorKind | None = None
    error: str | None = None
    send = time.perf_counter()
    try:
        async with session.post(job.url, json=payload) as response:
            headers_at = time.perf_counter()
            status = response.status
            if status != 200:
                body = (await response.text())[:200]
                error_kind, error = "http_status", f"HTTP {status}: {body}"
            else:
                decoder = SseDecoder()
                async for chunk in response.content.iter_any():
                    now = time.perf_counter()
                    for event in decoder.feed(chunk):
                        is_token, carried = apply_event(state, event)
                        if is_token:
                            chunk_times.append(now)
                            if carried and first_content is None:
                                first_content = now
                    if state.done:
                        break  # some servers keep the connection open after [DONE]
                for event in decoder.finish():
                    apply_event(state, event)
    except TimeoutError:
        error_kind, error = "timeout", f"no complete answer within {job.request_timeout_s:g} s"
    except aiohttp.ClientPayloadError as exc:
        error_kind, error = "stream_cut", f"stream cut after {len(chunk_times)} token chunks: {type(exc).__name__}"
    except aiohttp.ClientError as exc:
        error_kind, error = "connection", f"{type(exc).__name__}: {str(exc)[:150]}"
    end = time.perf_counter()
    if error_kind is None:
        if state.error is not None:
            error_kind, error = "error_event", state.error[:300]
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


async def _warmup(session: aiohttp.ClientSession, job: LoadJob) -> None:
    """Pre-open one connection per slot so TTFT never includes a TCP connect, then a few real requests."""

    async def touch() -> None:
        async with session.get(job.models_url) as response:
            await response.read()

    await asyncio.gather(*(touch() for _ in range(job.concurrency)), return_exceptions=True)
    warm = PlannedRequest(index=0, prompt="Warm up.", prompt_tokens=2, max_tokens=4)
    for _ in range(job.warmup_requests):
        await send_one(session, job, warm, None)


async def _closed_loop(session: aiohttp.ClientSession, job: LoadJob, start: float) -> list[RequestRecord]:
    pending = list(reversed(job.requests))
    records: list[RequestRecord] = []

    async def worker() -> None:
        free_at = start
        while pending:
            planned = pending.pop()
            record = await send_one(session, job, planned, free_at)
            records.append(record)
            free_at = time.perf_counter()

    await asyncio.gather(*(worker() for _ in range(job.concurrency)))
    return records


async def _open_loop(session: aiohttp.ClientSession, job: LoadJob, start: float) -> list[RequestRecord]:
    slots = asyncio.Semaphore(job.concurrency)
    loop = asyncio.get_running_loop()
    offset = loop.time() - time.perf_counter()  # map perf_counter times onto the loop's clock

    async def fire(planned: PlannedRequest) -> RequestRecord:
        async with slots:
            return await send_one(session, job, planned, start + planned.delay_s)

    tasks = []
    for planned in job.requests:
        due = start + planned.delay_s + offset
        if due > loop.time():
            await asyncio.sleep(due - loop.time())
        tasks.append(loop.create_task(fire(planned)))
    return list(await asyncio.gather(*tasks))


async def run_job(job: LoadJob, wait_for_go: bool = True) -> RunRecord:
    """Warm up, wait for the parent's GO time, run, and measure ourselves."""
    uses_uvloop = type(asyncio.get_running_loop()).__module__.startswith("uvloop")
    connector = aiohttp.TCPConnector(limit=job.concurrency, limit_per_host=job.concurrency, keepalive_timeout=60)
    timeout = aiohttp.ClientTimeout(total=job.request_timeout_s)
    async with aiohttp.ClientSession(
        connector=connector, timeout=timeout, headers=_headers(), read_bufsize=READ_BUFSIZE
    ) as session:
        await _warmup(session, job)
        start = time.perf_counter()
        if wait_for_go:
            print("READY", flush=True)
            line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
            start = float(line.split()[1])  # "GO <perf_counter time>"
            await asyncio.sleep(max(0.0, start - time.perf_counter()))
        ticker = _Ticker()
        ticker.start()
        cpu0, wall0 = time.process_time(), time.perf_counter()
        runner = _closed_loop if job.mode == "closed" else _open_loop
        records = await runner(session, job, start)
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
    install_uvloop()
    record = asyncio.run(run_job(job))
    Path(argv[1]).write_text(record.model_dump_json(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
