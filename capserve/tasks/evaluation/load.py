"""The load profile: plan each run, drive generator processes, merge their records, summarise."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from prefect import get_run_logger
from pydantic import SecretStr

from capserve.core.errors import PermanentError, RetryableError
from capserve.core.evaluation.records import ClientStats, RunRecord
from capserve.core.evaluation.result import LoadPointResult, LoadResult, summarize_run
from capserve.core.evaluation.spec import GateSpec, LoadSpec
from capserve.core.evaluation.workload import LoadJob, plan_requests, split_concurrency, split_requests
from capserve.tasks.evaluation.loadgen import API_KEY_ENV
from capserve.tasks.resilience import NO_RETRIES, endpoint_task

# The parent waits this long for every child to import aiohttp and pre-open its connections.
READY_TIMEOUT_S = 120.0
# GO is announced slightly in the future so every child starts on the same instant.
GO_LEAD_S = 0.05


def read_api_key(env_name: str | None) -> SecretStr | None:
    """The endpoint's API key from the named environment variable; never logged."""
    if not env_name:
        return None
    value = os.environ.get(env_name)
    if not value:
        raise PermanentError(f"environment variable {env_name} (the API key) is not set or empty")
    return SecretStr(value)


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


def run_generators(jobs: list[LoadJob], api_key: SecretStr | None, timeout_s: float) -> list[RunRecord]:
    """Start one generator process per job, release them together, collect their records."""
    env = {k: v for k, v in os.environ.items() if k != API_KEY_ENV}
    if api_key is not None:
        env[API_KEY_ENV] = api_key.get_secret_value()
    with tempfile.TemporaryDirectory(prefix="capserve-loadgen-") as tmp:
        procs = []
        for number, job in enumerate(jobs):
            job_path, out_path = Path(tmp, f"job{number}.json"), Path(tmp, f"out{number}.json")
            job_path.write_text(job.model_dump_json(), encoding="utf-8")
            cmd = [sys.executable, "-m", "capserve.tasks.evaluation.loadgen", str(job_path), str(out_path)]
            procs.append(
                (subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env), out_path)
            )
        try:
            for proc, _ in procs:
                assert proc.stdout is not None and proc.stdin is not None
                line = proc.stdout.readline()  # bounded: the child exits (EOF) on any failure
                if line.strip() != "READY":
                    raise RetryableError(f"load generator did not get ready (exit code {proc.poll()})")
            go = time.perf_counter() + GO_LEAD_S
            for proc, _ in procs:
                assert proc.stdin is not None
                proc.stdin.write(f"GO {go!r}\n")
                proc.stdin.flush()
            deadline = time.monotonic() + timeout_s
            for proc, _ in procs:
                try:
                    code = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired as exc:
                    raise RetryableError(f"load run did not finish within {timeout_s:g} s") from exc
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
    api_key: SecretStr | None = None,
) -> RunRecord:
    """One closed-loop level (``concurrency``) or one open-loop rate (``rate``), sharded over processes."""
    base = base_url.rstrip("/")
    common = {
        "url": f"{base}/v1/chat/completions",
        "models_url": f"{base}/v1/models",
        "model": model,
        "name": name,
        "ignore_eos": spec.ignore_eos,
        "warmup_requests": spec.warmup_requests,
        "request_timeout_s": spec.request_timeout_s,
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
    records = run_generators(jobs, api_key, spec.run_timeout_s)
    start = min(r.start for r in records)
    mode = "closed" if concurrency is not None else "open"
    return _merge(name, mode, records, start, concurrency, rate)


# A load run is a measurement that takes minutes: repeating one after a transient error would wait far
# longer than the caller's run_timeout_s; the profile records what happened instead.
@endpoint_task(name="eval-load", policy=NO_RETRIES)
def run_load(
    base_url: str, model: str, spec: LoadSpec, gates: GateSpec, out_dir: Path, api_key_env: str | None = None
) -> LoadResult:
    """Every concurrency level, then every Poisson rate; raw records go to ``out_dir`` as JSON."""
    logger = get_run_logger()
    api_key = read_api_key(api_key_env)
    out_dir.mkdir(parents=True, exist_ok=True)
    points: list[LoadPointResult] = []
    runs = [(f"c{c}", c, None) for c in spec.concurrency_levels] + [(f"rate{r:g}", None, r) for r in spec.request_rates]
    for salt, (name, concurrency, rate) in enumerate(runs):
        record = run_point(
            base_url, model, spec, name=name, concurrency=concurrency, rate=rate, salt=salt, api_key=api_key
        )
        raw = out_dir / f"load-{name}.json"
        raw.write_text(record.model_dump_json(), encoding="utf-8")
        point = summarize_run(record, spec, gates, raw_path=str(raw))
        logger.info(
            "load %s: %d ok / %d failed, TTFT p95 %.1f ms, TPOT p95 %.2f ms, %.1f out tok/s%s",
            name,
            point.metrics.completed,
            point.metrics.failed,
            point.metrics.ttft_ms.p95,
            point.metrics.tpot_ms.p95,
            point.metrics.output_throughput,
            "" if point.valid else " — INVALID: " + "; ".join(point.invalid_reasons),
        )
        points.append(point)
    return LoadResult(points=points)


def load_raw(path: str) -> RunRecord:
    """Read back a raw run file (for plots)."""
    return RunRecord.model_validate(json.loads(Path(path).read_text(encoding="utf-8")))
