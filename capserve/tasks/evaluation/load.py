"""The load profile: plan each run, drive generator processes, merge their records, summarise.

Before each run the client's limits are checked (``core/evaluation/client_limits.py``): a level this
host cannot drive, or one whose predicted chunk rate (from what earlier runs measured) exceeds what
the client reads accurately, is reported invalid without running. Each run is bounded by
``run_timeout_s`` and by what is left of the evaluation's deadline; the generators stop themselves
then and record what they cut as the client's doing.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from prefect import get_run_logger

from capserve.core.errors import RetryableError
from capserve.core.evaluation.client_limits import (
    AUTHORIZATION_ENV,
    WARMUP_TIMEOUT_S,
    ClientCapacity,
    chunks_per_s_per_stream,
    closed_loop_refusal,
    open_loop_refusal,
)
from capserve.core.evaluation.records import ClientStats, RunRecord
from capserve.core.evaluation.result import LoadPointResult, LoadResult, refused_point, summarize_run
from capserve.core.evaluation.spec import GateSpec, LoadSpec
from capserve.core.evaluation.workload import LoadJob, plan_requests, split_concurrency, split_requests
from capserve.core.progress import Progress
from capserve.tasks.evaluation.auth import EndpointAuth, read_auth
from capserve.tasks.evaluation.host import host_capacity
from capserve.tasks.progress import ProgressReporter
from capserve.tasks.resilience import NO_RETRIES, endpoint_task
from capserve.tasks.secrets import redactor

# The parent waits this long for every child to import aiohttp and pre-open its connections (the
# warm-up itself is bounded by WARMUP_TIMEOUT_S inside the child).
READY_TIMEOUT_S = 60.0 + WARMUP_TIMEOUT_S
# GO is announced slightly in the future so every child starts on the same instant.
GO_LEAD_S = 0.05
# After its own deadline a generator still writes its records; this is how long that may take.
STOP_GRACE_S = 30.0
# A run with less time than this left is not started: its numbers would mean nothing.
MIN_RUN_S = 2.0


def _merge(
    name: str, mode: str, parts: list[RunRecord], start: float, concurrency: int | None, rate: float | None
) -> RunRecord:
    requests = sorted((r for p in parts for r in p.requests), key=lambda r: r.index)
    client = ClientStats(
        processes=len(parts),
        cpu_percent=max(p.client.cpu_percent for p in parts),
        loop_lag_p99_ms=max(p.client.loop_lag_p99_ms for p in parts),
        loop_lag_max_ms=max(p.client.loop_lag_max_ms for p in parts),
        dispatch_delay_p95_ms=max(p.client.dispatch_delay_p95_ms for p in parts),
        uvloop=all(p.client.uvloop for p in parts),
    )
    return RunRecord(
        name=name,
        mode=mode,
        concurrency=concurrency,
        request_rate=rate,
        start=start,
        end=max(p.end for p in parts),
        requests=requests,
        client=client,
    )


def _wait_ready(proc: subprocess.Popen[str], timeout_s: float) -> None:
    """Wait for the child's READY line, at most ``timeout_s`` (a hung warm-up must not hang the evaluation)."""
    assert proc.stdout is not None  # noqa: S101 - narrows the type for mypy
    deadline = time.monotonic() + timeout_s
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        while (left := deadline - time.monotonic()) > 0:
            if selector.select(timeout=min(left, 0.5)):
                line = proc.stdout.readline()
                if line.strip() == "READY":
                    return
                if not line:
                    raise RetryableError(f"load generator exited before it was ready (exit code {proc.wait()})")
            elif proc.poll() is not None:
                raise RetryableError(f"load generator exited before it was ready (exit code {proc.returncode})")
    raise RetryableError(f"load generator was not ready within {timeout_s:g} s (warm-up against the endpoint)")


def run_generators(
    jobs: list[LoadJob], auth: EndpointAuth | None, timeout_s: float
) -> list[RunRecord]:
    """Start one generator process per job, release them together, collect their records.

    Each job should carry ``stop_after_s``; ``timeout_s`` is the parent's hard limit after GO, past
    which the children are killed.
    """
    env = {k: v for k, v in os.environ.items() if k != AUTHORIZATION_ENV}
    authorization = auth.authorization() if auth is not None else None
    if authorization:
        env[AUTHORIZATION_ENV] = authorization
    with tempfile.TemporaryDirectory(prefix="capserve-loadgen-") as tmp:
        procs = []
        for number, job in enumerate(jobs):
            job_path, out_path = Path(tmp, f"job{number}.json"), Path(tmp, f"out{number}.json")
            job_path.write_text(job.model_dump_json(), encoding="utf-8")
            cmd = [sys.executable, "-m", "capserve.tasks.evaluation.loadgen", str(job_path), str(out_path)]
            procs.append(
                (subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env), out_path)  # noqa: S603 - our own interpreter and module, fixed arguments
            )
        try:
            for proc, _ in procs:
                _wait_ready(proc, READY_TIMEOUT_S)
            go = time.perf_counter() + GO_LEAD_S
            for proc, _ in procs:
                assert proc.stdin is not None  # noqa: S101 - narrows the type for mypy
                proc.stdin.write(f"GO {go!r}\n")
                proc.stdin.flush()
            deadline = time.monotonic() + timeout_s
            for proc, _ in procs:
                try:
                    code = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired as exc:
                    raise RetryableError(f"load generator did not stop within {timeout_s:g} s") from exc
                if code != 0:
                    raise RetryableError(f"load generator exited with code {code}")
            return [RunRecord.model_validate_json(out.read_text(encoding="utf-8")) for _, out in procs]
        finally:
            for proc, _ in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                for stream in (proc.stdin, proc.stdout):
                    if stream is not None:
                        stream.close()


def run_point(
    base_url: str,
    model: str,
    spec: LoadSpec,
    *,
    name: str,
    concurrency: int | None = None,
    rate: float | None = None,
    salt: int = 0,
    auth: EndpointAuth | None = None,
    stop_after_s: float | None = None,
) -> RunRecord:
    """One closed-loop level (``concurrency``) or one open-loop rate (``rate``), sharded over processes.

    The run stops after ``stop_after_s`` (default ``spec.run_timeout_s``).
    """
    base = base_url.rstrip("/")
    stop = min(spec.run_timeout_s, stop_after_s) if stop_after_s is not None else spec.run_timeout_s
    common = {
        "url": f"{base}/v1/chat/completions",
        "models_url": f"{base}/v1/models",
        "model": model,
        "name": name,
        "ignore_eos": spec.ignore_eos,
        "warmup_requests": spec.warmup_requests,
        "request_timeout_s": spec.request_timeout_s,
        "stop_after_s": stop,
    }
    if concurrency is not None:
        planned = plan_requests(spec, spec.requests_for(concurrency), salt=salt)
        shares = split_concurrency(concurrency, spec.processes)
        parts = split_requests(planned, len(shares))
        jobs = [LoadJob(mode="closed", concurrency=c, requests=p, **common) for c, p in zip(shares, parts, strict=True)]
    elif rate is not None:
        planned = plan_requests(spec, spec.open_loop_requests, rate=rate, salt=salt)
        shares = split_concurrency(spec.open_loop_max_concurrency, spec.processes)
        parts = split_requests(planned, len(shares))
        jobs = [
            LoadJob(mode="open", concurrency=c, request_rate=rate, requests=p, **common)
            for c, p in zip(shares, parts, strict=True)
            if p
        ]
    else:
        raise ValueError("run_point needs a concurrency or a rate")
    records = run_generators(jobs, auth, stop + STOP_GRACE_S)
    start = min(r.start for r in records)
    mode = "closed" if concurrency is not None else "open"
    return _merge(name, mode, records, start, concurrency, rate)


def _refusal(
    concurrency: int | None, rate: float | None, spec: LoadSpec, capacity: ClientCapacity, measured: float | None,
    left_s: float,
) -> str | None:
    if left_s < MIN_RUN_S:
        return f"the evaluation's deadline left {left_s:.1f} s, too little for a run"
    if concurrency is not None:
        return closed_loop_refusal(concurrency, capacity, measured)
    assert rate is not None  # noqa: S101 - narrows the type for mypy
    return open_loop_refusal(rate, spec, capacity)


# A load run is a measurement that takes minutes: repeating one after a transient error would wait far
# longer than the caller's run_timeout_s; the profile records what happened instead.
@endpoint_task(name="eval-load", policy=NO_RETRIES)
def run_load(
    base_url: str,
    model: str,
    spec: LoadSpec,
    gates: GateSpec,
    out_dir: Path,
    api_key_env: str | None = None,
    basic_auth_env: str | None = None,
    time_budget_s: float | None = None,
) -> LoadResult:
    """Every concurrency level, then every Poisson rate; raw records go to ``out_dir`` as JSON."""
    logger = get_run_logger()
    auth = read_auth(api_key_env, basic_auth_env)
    capacity = host_capacity(spec)
    deadline = time.monotonic() + (time_budget_s if time_budget_s is not None else float("inf"))
    out_dir.mkdir(parents=True, exist_ok=True)
    points: list[LoadPointResult] = []
    measured: float | None = None  # chunks/s of one stream, from the runs so far
    runs = [(f"c{c}", c, None) for c in spec.concurrency_levels] + [(f"rate{r:g}", None, r) for r in spec.request_rates]
    planned = {name: spec.requests_for(c) if c is not None else spec.open_loop_requests for name, c, _ in runs}
    reporter, finished = ProgressReporter(), 0
    for salt, (name, concurrency, rate) in enumerate(runs):
        left = deadline - time.monotonic()
        reason = _refusal(concurrency, rate, spec, capacity, measured, left)
        if reason is None:
            try:
                record = run_point(
                    base_url, model, spec, name=name, concurrency=concurrency, rate=rate, salt=salt, auth=auth,
                    stop_after_s=left,
                )
            except RetryableError as exc:  # the generator itself failed: the client's problem, not the endpoint's
                reason = f"the load generator failed: {exc}"
        if reason is not None:
            point = refused_point(name, concurrency=concurrency, rate=rate, reason=reason)
            logger.warning("load %s not run: %s", name, reason)
            points.append(point)
            planned[name] = 0  # a point not run has no requests to wait for
            continue
        raw = out_dir / f"load-{name}.json"
        # Error texts were redacted in the generator; redacting the JSON text again costs nothing.
        raw.write_text(redactor().redact(record.model_dump_json()), encoding="utf-8")
        point = summarize_run(record, spec, gates, raw_path=str(raw))
        rate_now = chunks_per_s_per_stream(record)
        if rate_now is not None:
            measured = max(measured or 0.0, rate_now)
        logger.info(
            "load %s: %d ok / %d failed (+%d client-side), TTFT p95 %.1f ms, TPOT p95 %.2f ms, %.1f out tok/s%s",
            name,
            point.metrics.completed,
            point.metrics.failed,
            point.metrics.client_failed,
            point.metrics.ttft_ms.p95,
            point.metrics.tpot_ms.p95,
            point.metrics.output_throughput,
            "" if point.valid else " — INVALID: " + "; ".join(point.invalid_reasons),
        )
        points.append(point)
        finished += point.metrics.completed + point.metrics.failed + point.metrics.client_failed
        reporter.report(Progress("evaluation requests done", done=finished, total=max(sum(planned.values()), finished),
                                 detail=f"{len(points)} of {len(runs)} load points"))
    return LoadResult(points=points)


def load_raw(path: str) -> RunRecord:
    """Read back a raw run file (for plots)."""
    return RunRecord.model_validate(json.loads(Path(path).read_text(encoding="utf-8")))
