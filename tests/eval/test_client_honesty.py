"""Evaluation honesty: the client's limits are refused or reported invalid, never blamed on the endpoint;
deadlines bound every check, run and the whole evaluation."""

from __future__ import annotations

import errno
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from capserve_sandbox.openai_server import Dist, SandboxConfig, serve

from capserve.cli import main
from capserve.core.deadline import Deadline
from capserve.core.evaluation.client_limits import (
    chunks_per_s_per_stream,
    client_capacity,
    closed_loop_refusal,
    lag_allowance_ms,
    load_refusals,
)
from capserve.core.evaluation.records import ClientStats, RequestRecord, RunRecord
from capserve.core.evaluation.result import LoadResult, evaluate_gates, refused_point, summarize_run
from capserve.core.evaluation.spec import EvaluationSpec, GateSpec, LoadSpec
from capserve.flows.evaluate import evaluate_endpoint
from capserve.tasks.evaluation.control import make_client, run_smoke_checks
from capserve.tasks.evaluation.load import run_point
from capserve.tasks.evaluation.loadgen import _local_errno

TINY = {"prompt": {"tokens": 8}, "output": {"tokens": 8}, "warmup_requests": 0}


def _record(kind: str | None, cpu: float = 5.0, lag: float = 1.0, n: int = 10) -> RunRecord:
    client = ClientStats(
        cpu_percent=cpu, loop_lag_p99_ms=lag, loop_lag_max_ms=lag, dispatch_delay_p95_ms=0, uvloop=True
    )
    requests = [
        RequestRecord(
            index=i,
            prompt_tokens_requested=5,
            max_tokens=3,
            send=0.0,
            chunk_times=[0.1, 0.11, 0.12] if kind is None or i % 2 else [],
            completion_tokens=3,
            status=200,
            success=kind is None or bool(i % 2),
            error_kind=None if kind is None or i % 2 else kind,  # type: ignore[arg-type]
        )
        for i in range(n)
    ]
    return RunRecord(name="c4", mode="closed", concurrency=4, start=0, end=1, requests=requests, client=client)


def test_concurrency_100000_is_refused_with_what_the_client_can_drive() -> None:
    capacity = client_capacity(LoadSpec(processes=4), cores=2, open_files_limit=20_000)
    assert (capacity.processes, capacity.streams_per_process, capacity.max_streams) == (2, 1024, 2048)
    refused = load_refusals(LoadSpec(concurrency_levels=(8, 100_000), request_rates=(1e6,)), capacity)
    assert set(refused) == {"c100000", "rate1e+06"}
    assert "at most 2,048 concurrent streams" in refused["c100000"] and "4 processes asked" in refused["c100000"]
    # The open-file limit bounds streams too.
    assert client_capacity(LoadSpec(), cores=1, open_files_limit=256).max_streams == 256 - 64


def test_a_level_whose_predicted_chunk_rate_is_too_high_is_refused() -> None:
    capacity = client_capacity(LoadSpec(), cores=1, open_files_limit=20_000)
    assert closed_loop_refusal(16, capacity, 500.0) is None
    reason = closed_loop_refusal(64, capacity, 500.0)
    assert reason is not None and "32,000 chunks/s" in reason


def test_chunk_rate_is_measured_between_first_and_last_chunk() -> None:
    assert chunks_per_s_per_stream(_record(None)) == pytest.approx(100.0)


def test_lag_allowance_follows_the_tightest_gate() -> None:
    assert lag_allowance_ms(LoadSpec(), GateSpec()) == pytest.approx(60.0)  # 2 % of the 3 s TTFT gate
    assert lag_allowance_ms(LoadSpec(output={"tokens": 5}), GateSpec()) == pytest.approx(5.0)  # type: ignore[arg-type]
    assert lag_allowance_ms(LoadSpec(max_loop_lag_p99_ms=7.0), GateSpec()) == 7.0
    none = GateSpec(p95_ttft_ms=None, p95_tpot_ms=None, slo_ttft_ms=None, slo_tpot_ms=None)
    assert lag_allowance_ms(LoadSpec(), none) == 5.0


def test_a_busy_host_lag_does_not_invalidate_but_a_saturated_client_does() -> None:
    spec = EvaluationSpec()
    assert summarize_run(_record(None, lag=25.0), spec.load, spec.gates).valid
    saturated = summarize_run(_record("timeout", cpu=99.0), spec.load, spec.gates)
    assert not saturated.valid and "client CPU 99%" in saturated.invalid_reasons[0]
    # Its timeouts are the client's: not in the error rate, so the error gate cannot fail the endpoint.
    assert (saturated.metrics.failed, saturated.metrics.client_failed, saturated.metrics.error_rate) == (0, 5, 0.0)
    gates, verdict = evaluate_gates(spec, None, None, LoadResult(points=[saturated]))
    assert verdict == "invalid" and all(g.passed is not False for g in gates)


def test_the_same_timeouts_with_a_healthy_client_are_the_endpoints() -> None:
    spec = EvaluationSpec()
    point = summarize_run(_record("timeout"), spec.load, spec.gates)
    assert point.valid and point.metrics.failed == 5 and point.metrics.error_rate == 0.5
    assert evaluate_gates(spec, None, None, LoadResult(points=[point]))[1] == "fail"


@pytest.mark.parametrize("kind", ["client", "cancelled"])
def test_client_side_failures_never_count_against_the_endpoint(kind: str) -> None:
    spec = EvaluationSpec()
    point = summarize_run(_record(kind), spec.load, spec.gates)
    assert not point.valid and "failed on the client side" in point.invalid_reasons[-1]
    assert point.metrics.error_rate == 0.0 and point.metrics.client_failed == 5
    assert evaluate_gates(spec, None, None, LoadResult(points=[point]))[1] == "invalid"


def test_a_refused_level_is_not_judged() -> None:
    point = refused_point("c100000", concurrency=100_000, rate=None, reason="too many streams")
    gates, verdict = evaluate_gates(EvaluationSpec(), None, None, LoadResult(points=[point]))
    assert verdict == "invalid" and [g.passed for g in gates] == [None]
    assert not point.ran and point.invalid_reasons == ["not run: too many streams"]


def test_local_resource_errors_are_recognised() -> None:
    import aiohttp

    emfile = OSError(errno.EMFILE, "Too many open files")
    wrapped = aiohttp.ClientConnectorError(connection_key=None, os_error=emfile)  # type: ignore[arg-type]
    assert _local_errno(wrapped) == errno.EMFILE
    assert _local_errno(OSError(errno.EADDRNOTAVAIL, "no port")) == errno.EADDRNOTAVAIL
    by_endpoint = ConnectionRefusedError(errno.ECONNREFUSED, "refused")
    refused = aiohttp.ClientConnectorError(connection_key=None, os_error=by_endpoint)  # type: ignore[arg-type]
    assert _local_errno(refused) is None  # refused by the endpoint: its failure


@pytest.fixture
def silent_endpoint() -> Iterator[str]:
    """Accepts connections and never answers (the endpoint that hung `capserve eval` for 600 s per call)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


def test_a_silent_endpoint_fails_smoke_within_the_check_timeout_and_the_rest_is_not_attempted(
    silent_endpoint: str,
) -> None:
    spec = EvaluationSpec(smoke={"check_timeout_s": 0.5})  # type: ignore[arg-type]
    with make_client(silent_endpoint, spec, None) as client:
        result = run_smoke_checks(client, "m", spec.smoke, Deadline(30), spec.connect_timeout_s)
    statuses = {c.name: c.status for c in result.checks}
    assert statuses == {
        "health": "failed", "models": "failed", "chat_stream": "not_run", "image": "not_run", "tool_call": "not_run"
    }
    assert result.unreachable and "no answer within 0.5 s" in result.checks[0].detail


def test_the_overall_deadline_cuts_the_evaluation_short(silent_endpoint: str, tmp_path: Path) -> None:
    spec = EvaluationSpec(timeout_s=1.0)
    result = evaluate_endpoint(silent_endpoint, "m", spec, out_dir=tmp_path)
    assert result.smoke is not None and result.smoke.checks[0].status == "failed"
    assert {c.status for c in result.smoke.checks[1:]} == {"not_run"}
    assert result.quality is None and result.load is None
    assert any(line.startswith("quality: not run") for line in result.not_judged)


def test_capserve_eval_timeout_against_a_silent_endpoint_exits_fail(silent_endpoint: str, tmp_path: Path) -> None:
    code = main(["eval", "--url", silent_endpoint, "--model", "m", "--timeout", "1", "--out-dir", str(tmp_path)])
    assert code == 1  # health did not answer: the endpoint's failure, judged


TRICKLED = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
TRICKLE_EVERY_S = 0.25  # the whole answer takes ~20 s, far past the deadlines below


@pytest.fixture
def trickling_endpoint() -> Iterator[str]:
    """Answers every request with HTTP 200, one byte at a time (the endpoint that kept `capserve eval --timeout 60`
    running past 300 s: each byte started httpx's read timeout again). Bounded: it stops at the test's end."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    stop = threading.Event()
    threads: list[threading.Thread] = []

    def trickle(conn: socket.socket) -> None:
        with conn:
            for byte in TRICKLED:
                if stop.wait(TRICKLE_EVERY_S):
                    return
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    return

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn = server.accept()[0]
            except OSError:
                continue
            threads.append(threading.Thread(target=trickle, args=(conn,), daemon=True))
            threads[-1].start()

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    for thread in [acceptor, *threads]:
        thread.join()
    server.close()


def test_a_trickling_endpoint_is_cut_at_the_deadline_not_answered_late(trickling_endpoint: str) -> None:
    spec = EvaluationSpec()
    with make_client(trickling_endpoint, spec, None) as client:
        result = run_smoke_checks(client, "m", spec.smoke, Deadline(2), spec.connect_timeout_s)
    health = result.checks[0]
    assert (health.name, health.status) == ("health", "failed"), health  # not "passed" once the bytes were all in
    assert "no answer within 2.0 s" in health.detail
    assert {c.status for c in result.checks[1:]} == {"not_run"}


def test_capserve_eval_timeout_bounds_a_trickling_endpoint(trickling_endpoint: str, tmp_path: Path) -> None:
    code = main(["eval", "--url", trickling_endpoint, "--model", "m", "--timeout", "3", "--json",
                 "--out-dir", str(tmp_path)])
    assert code == 1  # health did not answer by the deadline: the endpoint's failure, judged


def test_a_run_cut_by_its_deadline_is_the_clients_doing() -> None:
    spec = LoadSpec(min_requests=6, **TINY)  # type: ignore[arg-type]
    with serve(SandboxConfig(ttft=Dist(mean_ms=3000.0))) as url:
        record = run_point(url, "sandbox-model", spec, name="c2", concurrency=2, stop_after_s=0.5)
    kinds = {r.error_kind for r in record.requests}
    assert kinds == {"cancelled"} and len(record.requests) == spec.requests_for(2)
    point = summarize_run(record, spec, EvaluationSpec().gates)
    assert not point.valid and point.metrics.failed == 0 and point.metrics.client_failed == len(record.requests)


def test_the_flow_refuses_what_the_client_cannot_drive_without_running_it(tmp_path: Path) -> None:
    load = LoadSpec(concurrency_levels=(1, 100_000), request_rates=(), **TINY)  # type: ignore[arg-type]
    spec = EvaluationSpec(load=load)
    with serve() as url:
        result = evaluate_endpoint(url, "sandbox-model", spec, profiles=("load",), out_dir=tmp_path)
    assert result.load is not None
    ran, refused = result.load.points
    assert ran.ran and not refused.ran  # (whether c1 was valid depends on how busy this host is)
    assert "more than this client can drive" in refused.invalid_reasons[0]
    assert result.verdict == "invalid"
    assert not (tmp_path / "load-c100000.json").exists()
