"""No loop of the sandbox dies, or errs, in silence: each failure is reported where the CLI reads it."""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from capserve_sandbox import clock as clock_module
from capserve_sandbox.aws_ext import capacity as capacity_ext
from capserve_sandbox.clock import SandboxClock
from capserve_sandbox.environment import Simulation, sandbox
from capserve_sandbox.failures import FAILURES, Failure
from capserve_sandbox.kube import FakeKube
from kubernetes import client as k8s

import capserve.flows.campaign as campaign_module
from capserve.cli import main
from capserve.cli.exit_codes import ExitCode

from .conftest import pod

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kimi-k3-sandbox.yaml"


def _wait_for(found: Any, what: str, timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if (value := found()) is not None:
            return value
        time.sleep(0.05)
    raise AssertionError(f"{what} within {timeout_s:g} s")


def test_a_failing_tick_is_reported_once_with_its_traceback_in_the_log_and_the_tick_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom() -> None:
        raise RuntimeError("the events could not be delivered")

    monkeypatch.setattr(capacity_ext, "deliver_due_events", boom)
    log = tmp_path / "failures.log"
    with sandbox(served_model_name="kimi-k3", simulate=Simulation(tick_seconds=0.02), failure_log=log) as far_ends:

        def failed_twice() -> Failure | None:
            return next((f for f in far_ends.failures() if f.count >= 2), None)

        failure = _wait_for(failed_twice, "the tick failed twice (it goes on after a failure)")
    assert failure.stand_in == "sandbox-clock-tick thread (EventBridge's Capacity Block events)"
    assert failure.error == "RuntimeError: the events could not be delivered"
    assert failure.log == log and "RuntimeError: the events could not be delivered" in log.read_text()
    assert "sandbox-clock-tick" in failure.line() and str(log) in failure.line()


def test_a_new_sandbox_starts_with_no_failure(tmp_path: Path) -> None:
    FAILURES.report("an earlier sandbox's stand-in", RuntimeError("gone"))
    with sandbox(served_model_name="kimi-k3", failure_log=tmp_path / "f.log") as far_ends:
        assert far_ends.failures() == []


def test_a_failing_controller_pass_is_reported(kube: FakeKube, api: k8s.ApiClient, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    FAILURES.reset(tmp_path / "f.log")

    def broken_sync() -> None:
        raise KeyError("spec")

    monkeypatch.setattr(kube.cluster, "sync", broken_sync)
    k8s.CoreV1Api(api).create_namespaced_pod("default", pod("web"))
    failure = _wait_for(lambda: next(iter(FAILURES.failures()), None), "the controller's failure reported")
    assert (failure.stand_in, failure.error) == ("fake Kubernetes controllers", "KeyError: 'spec'")


class _FakeDatetime(datetime):
    wall = datetime(2026, 12, 5, 11, 0, tzinfo=UTC)

    @classmethod
    def now(cls, tz: Any = None) -> Any:
        return cls.wall


class _AnchorMovesWhileWaiting:
    """The clock's lock, taken the first time only after another thread has re-anchored the window a few
    milliseconds later (the first waypoints registered): what the tick thread met on a busy machine."""

    def __init__(self, clock: SandboxClock) -> None:
        self._inner = threading.Lock()
        self._clock = clock
        self._first = True

    def __enter__(self) -> None:
        if self._first:
            self._first = False
            _FakeDatetime.wall += timedelta(milliseconds=5)
            with self._inner:
                plan = self._clock._plan
                assert plan is not None
                self._clock._plan = plan.model_copy(
                    update={"anchor_wall": _FakeDatetime.wall, "anchor_sim": plan.to_sim(_FakeDatetime.wall)}
                )
        self._inner.acquire()

    def __exit__(self, *exc: object) -> None:
        self._inner.release()


def test_now_never_reads_a_wall_time_before_an_anchor_set_meanwhile(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(clock_module, "datetime", _FakeDatetime)
    clock = SandboxClock()
    clock.simulate(fast_rate=5760, near_rate=60, near=timedelta(minutes=3))
    monkeypatch.setattr(clock, "_lock", _AnchorMovesWhileWaiting(clock))
    shows = clock.now()  # no "before this window's anchor"
    plan = clock.schedule()
    assert plan is not None and shows == plan.to_sim(_FakeDatetime.wall)


def _campaign_writing(report: dict[str, Any], *, fail: str | None = None) -> Any:
    """A campaign run in this process that writes ``report`` as its report.json (and makes stand-in ``fail``
    fail meanwhile): what ``capserve up --sandbox --in-process`` then concludes is the CLI's alone."""
    from capserve.core.report import CampaignReport

    def run(spec: Any, *, out_dir: Path, **_: Any) -> CampaignReport:
        if fail is not None:
            FAILURES.report(fail, KeyError("status"))
        (out_dir / "report.json").write_text(json.dumps(report))
        return CampaignReport(campaign="k3-demo")

    return run


STORY_IN_ONE_PROCESS: dict[str, Any] = {
    "stages": [{"name": name, "status": "completed"} for name in ("acquire", "bring_up", "rollout", "evaluate")],
    "lease": {"reservation_id": "cr-f4ab252eca574d82a"},
    "teardown": {"deleted": ["eks-cluster/capserve-k3-demo"], "remaining": [], "finished_at": "2026-12-05T12:00:00Z"},
    "cost": {"paid_gpu_minutes": 11520, "serving_gpu_minutes": 8736},
}
UP = ["up", str(EXAMPLE), "--sandbox", "--in-process", "--teardown-when-done", "--yes"]


@pytest.mark.parametrize(
    ("report", "fail", "line"),
    [
        (STORY_IN_ONE_PROCESS, None, None),
        ({**STORY_IN_ONE_PROCESS, "teardown": None}, None,
         "error: act missing: teardown: the report holds no teardown"),
        (STORY_IN_ONE_PROCESS, "sandbox kubelet",
         "error: the sandbox's sandbox kubelet failed: KeyError: 'status'; traceback in"),
    ],
    ids=["every-act", "no-teardown", "a-stand-in-failed"],
)
def test_up_in_one_process_ends_unproven_when_an_act_is_missing_or_a_stand_in_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str],
    report: dict[str, Any], fail: str | None, line: str | None,
) -> None:
    monkeypatch.setattr(campaign_module, "campaign", _campaign_writing(report, fail=fail))
    out = tmp_path / "out"
    code = main([*UP, "--out", str(out)])
    said = " ".join(capfd.readouterr().err.split())
    if line is None:
        assert code == ExitCode.OK and "error:" not in said, said
    else:
        assert code == ExitCode.UNPROVEN and line in said and said.count("error:") == 1, said


def test_a_request_that_raises_in_moto_is_reported_not_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    import boto3
    from botocore.config import Config
    from botocore.parsers import ResponseParserError
    from capserve_sandbox.aws import moto_sandbox

    def broken(resp: Any) -> Any:
        raise KeyError("offering")

    monkeypatch.setattr(capacity_ext, "_key", broken)  # a bug of the Capacity Block extension
    FAILURES.reset(tmp_path / "f.log")
    with moto_sandbox() as aws:
        ec2 = boto3.client("ec2", endpoint_url=aws.endpoint_url, region_name=aws.region,
                           config=Config(retries={"max_attempts": 1}))
        now = datetime.now(UTC)
        with pytest.raises(ResponseParserError):  # the 500's body is werkzeug's HTML, not EC2's XML
            ec2.describe_capacity_block_offerings(
                InstanceType="p5.48xlarge", InstanceCount=1, CapacityDurationHours=24,
                StartDateRange=now + timedelta(days=1), EndDateRange=now + timedelta(days=5),
            )
    (failure,) = FAILURES.failures()
    assert (failure.stand_in, failure.error) == ("moto (AWS)", "RuntimeError: KeyError: 'offering'")
    assert "Traceback" not in capfd.readouterr().err and "KeyError: 'offering'" in (tmp_path / "f.log").read_text()


def test_an_error_nobody_retrieves_on_the_fake_kubernetes_loop_is_reported(kube: FakeKube, tmp_path: Path) -> None:
    FAILURES.reset(tmp_path / "f.log")

    loop = kube._api.loop
    assert loop is not None
    loop.call_soon_threadsafe(loop.call_exception_handler,
                              {"message": "Task exception was never retrieved", "exception": ValueError("lost")})
    failure = _wait_for(lambda: next(iter(FAILURES.failures()), None), "the loop's error reported")
    assert (failure.stand_in, failure.error) == ("fake Kubernetes event loop", "ValueError: lost")
