"""Load-generator capacity: the highest request rate and SSE event rate our aiohttp generator sustains
against the sandbox server with under 1 ms added TTFT error, beside the same figure for a plain httpx
client (one AsyncClient, as a naive harness would use it) measured in the same run.

Added TTFT error per request = measured TTFT − (server arrival − send) − server's own TTFT, using the
sandbox's own CLOCK_MONOTONIC timestamps (same host): what the client adds on top of the server.
A level counts as sustained when the median added error is < 1 ms and no request failed.
Printed as ratios (ours ÷ httpx); absolute numbers depend on this shared 2-core machine.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time

import httpx
from capserve_sandbox.openai_server import Dist, SandboxConfig, serve

from capserve.core.evaluation.spec import LoadSpec
from capserve.core.evaluation.workload import plan_requests, stream_chat_payload
from capserve.tasks.evaluation.load import run_point

LEVELS = (8, 32, 64, 128, 256)
OUTPUT_TOKENS = 20
CONFIG = SandboxConfig(ttft=Dist(mean_ms=20.0), itl=Dist(mean_ms=10.0), record_timings=True)
SPEC = LoadSpec(
    prompt={"tokens": 8},
    output={"tokens": OUTPUT_TOKENS},
    warmup_requests=0,  # type: ignore[arg-type]
    requests_per_stream=3,
    min_requests=32,
    max_loop_lag_p99_ms=1000,
    max_client_cpu_percent=100,
)


def _errors(samples: list[tuple[int, float, float]], timings: list[dict[str, float]]) -> list[float]:
    """(prompt number, send, first token time) joined with the server's clock → added error in ms."""
    truth = {int(str(t["prompt_head"]).split()[1].rstrip(":")): t for t in timings}
    out = []
    for number, send, first in samples:
        t = truth[number]
        out.append(((first - send) - (t["arrival"] - send) - (t["first_write"] - t["arrival"])) * 1000)
    return out


def ours(url: str, concurrency: int) -> tuple[float, float, float, int]:
    record = run_point(url, CONFIG.model, SPEC, name=f"c{concurrency}", concurrency=concurrency)
    ok = [r for r in record.requests if r.success]
    timings = httpx.get(f"{url}/sandbox/timings").json()
    errors = _errors([(r.index, r.send, r.chunk_times[0]) for r in ok], timings)
    duration = record.end - record.start
    events = sum(len(r.chunk_times) for r in ok)
    return len(ok) / duration, events / duration, statistics.median(errors), len(record.requests) - len(ok)


async def _httpx_run(url: str, concurrency: int) -> tuple[float, float, float, int]:
    planned = plan_requests(SPEC, SPEC.requests_for(concurrency))
    pending = list(reversed(planned))
    samples: list[tuple[int, float, float]] = []
    events = failed = 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=httpx.Timeout(120.0)) as client:
        await asyncio.gather(*(client.get("/v1/models") for _ in range(concurrency)))  # pre-open, as ours does

        async def worker() -> None:
            nonlocal events, failed
            while pending:
                p = pending.pop()
                body = stream_chat_payload(CONFIG.model, p.prompt, p.max_tokens, ignore_eos=True)
                send, first, seen = time.perf_counter(), None, 0
                async with client.stream("POST", "/v1/chat/completions", json=body) as response:
                    async for line in response.aiter_lines():
                        if line.startswith("data: {") and '"choices": [{' in line:
                            seen += 1
                            first = first or time.perf_counter()
                if first is None:
                    failed += 1
                    continue
                events += seen
                samples.append((p.index, send, first))

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        duration = time.perf_counter() - start
        timings = (await client.get("/sandbox/timings")).json()
    return len(samples) / duration, events / duration, statistics.median(_errors(samples, timings)), failed


def best(rows: list[tuple[int, float, float, float, int]]) -> tuple[float, float]:
    sustained = [(rps, eps) for _, rps, eps, err, failed in rows if err < 1.0 and failed == 0]
    return (max(r for r, _ in sustained), max(e for _, e in sustained)) if sustained else (0.0, 0.0)


def main() -> int:
    results: dict[str, list[tuple[int, float, float, float, int]]] = {"aiohttp (ours)": [], "httpx": []}
    for level in LEVELS:
        for name, runner in (("aiohttp (ours)", ours), ("httpx", lambda u, c: asyncio.run(_httpx_run(u, c)))):
            with serve(CONFIG) as url:  # a fresh server per run: clean timings, no leftover load
                rps, eps, err, failed = runner(url, level)
            results[name].append((level, rps, eps, err, failed))
            print(
                f"{name:15s} c={level:4d}: {rps:7.1f} req/s {eps:8.0f} SSE events/s, median added TTFT "
                f"{err:6.2f} ms, failed {failed}",
                flush=True,
            )
    (our_rps, our_eps), (base_rps, base_eps) = best(results["aiohttp (ours)"]), best(results["httpx"])
    print(
        f"\nsustained with < 1 ms added TTFT error: ours {our_rps:.0f} req/s, {our_eps:.0f} events/s; "
        f"httpx {base_rps:.0f} req/s, {base_eps:.0f} events/s"
    )
    if base_rps > 0:
        print(f"ratio ours/httpx: request rate {our_rps / base_rps:.2f}x, SSE event rate {our_eps / base_eps:.2f}x")
    else:
        print("httpx never stayed under 1 ms added TTFT error at these levels")
    return 0


if __name__ == "__main__":
    sys.exit(main())
