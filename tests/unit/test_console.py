"""The console `capserve up` tells a block's story on: one line per act, each on the block's clock beside wall time,
states said once, a status of the runs that are running, lines never wrapped off a terminal, a closing summary on
every path, and --teardown-when-done that never loses a block quietly."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

import capserve.cli._server as server_module
import capserve.flows.campaign as campaign_module
import capserve.tasks.scheduling as scheduling_module
from capserve.cli import main
from capserve.cli.console import block_unused, plain_console, summary_lines
from capserve.cli.progress_view import ProgressView
from capserve.core.act_lines import act_line, teardown_step_line
from capserve.core.capacity.result import AcquireResult
from capserve.core.events import CampaignRefs, capacity_obtained
from capserve.core.lease import Lease
from capserve.core.progress import block_clock, stamped, state_text, unstamped
from capserve.core.report import CampaignReport
from capserve.core.rollout.startup_log import startup_milestones
from capserve.core.schedule import ExistingRun
from capserve.tasks.progress import ProgressLine

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "kimi-k3-sandbox.yaml")
CPU_LOG = (Path(__file__).parent / "fixtures" / "vllm-0.32-cpu-startup.log").read_text()
START = datetime(2026, 12, 6, 11, 30, tzinfo=UTC)


# --------------------------------------------------------------------------- one line per act


def test_the_purchase_reads_as_what_was_bought_where_for_how_much_and_when_the_block_runs() -> None:
    lease = Lease(provider="ec2-capacity-block", region="us-east-2", availability_zone="us-east-2a",
                  reservation_id="cr-0123456789abcdef0", start=START, end=START + timedelta(days=1),
                  instance_type="p6-b300.48xlarge", instance_count=1, upfront_fee=2832.0)
    event = capacity_obtained(CampaignRefs(campaign_id="k3-demo"),
                              AcquireResult(campaign_id="k3-demo", outcome="bought", lease=lease), occurred=START)
    assert act_line(event) == (
        "bought cr-0123456789abcdef0 in us-east-2a for $2,832: 1 × p6-b300.48xlarge, "
        "block 12-06 11:30 → 12-07 11:30 UTC"
    )


def test_a_teardown_phase_names_what_it_deleted_and_what_is_still_there() -> None:
    assert teardown_step_line("cluster", 3, 6, ["eks-cluster/capserve-k3-demo"], 0, 0) == (
        "teardown 3/6 cluster: deleted eks-cluster/capserve-k3-demo"
    )
    assert teardown_step_line("network", 6, 6, [], 2, 1) == (
        "teardown 6/6 network: nothing to delete (2 already gone); 1 STILL THERE"
    )


def vllm(at: datetime, source: str, message: str) -> str:
    return f"INFO {at:%m-%d %H:%M:%S} [{source}] {message}"  # vllm/logger.py's format


def test_every_phase_of_a_vllm_start_is_read_from_its_log_at_its_own_time() -> None:
    # A start the sandbox plays passes a phase in a fraction of a wall second: a look every few seconds sees
    # only the end, so the phases are read from vLLM's own stamped lines, each at the block time it was entered.
    log = "\n".join([
        vllm(START, "core.py:133", "Initializing a V1 LLM engine with config: model='kimi-k3'"),
        vllm(START + timedelta(minutes=16), "default_loader.py:501", "Loading weights took 960.00 seconds"),
        vllm(START + timedelta(minutes=51), "monitor.py:20", "torch.compile took 2100.00 s in total"),
        vllm(START + timedelta(minutes=63), "gpu_model_runner.py:6582", "Graph capturing finished in 720 secs"),
        vllm(START + timedelta(minutes=64), "entry.py:140", "Starting vLLM server on http://0.0.0.0:8000"),
    ])
    assert [p.line() for p in startup_milestones(log, expected_s=75 * 60)] == [
        "vLLM startup: loading weights, 0 of ~75 min expected",
        "vLLM startup: compiling (torch.compile), 16 of ~75 min expected",
        "vLLM startup: capturing CUDA graphs, 51 of ~75 min expected",
        "vLLM startup: warming up the engine (KV cache, profile), 63 of ~75 min expected",
        "vLLM startup: listening, 64 of ~75 min expected",
    ]
    assert [p.detail for p in startup_milestones(CPU_LOG, expected_s=None)] == [
        "loading weights", "compiling (torch.compile)", "starting the API server", "listening",
    ]


# --------------------------------------------------------------------------- the block's clock, states once


def test_a_line_carries_its_block_time_through_the_log() -> None:
    at = START + timedelta(hours=2, minutes=14, seconds=5)
    assert unstamped(stamped("drained: 1 Service(s) removed", at)) == (at, "drained: 1 Service(s) removed")
    assert unstamped("an old line") == (None, "an old line")


def test_the_blocks_clock_reads_from_its_start_and_before_it() -> None:
    assert block_clock(START + timedelta(hours=2, minutes=14), START) == "block +02:14"
    assert block_clock(START - timedelta(minutes=50), START) == "block -00:50"
    assert block_clock(START + timedelta(hours=25), START) == "block +25:00"
    assert block_clock(START, None) == "block 12-06 11:30"  # before the purchase tells the start


def test_a_state_is_said_once() -> None:
    assert state_text("PENDING", "Pending") == "Pending"
    assert state_text("RUNNING", "Running") == "Running"
    assert state_text("PAUSED", "Suspended") == "Suspended (PAUSED)"
    assert state_text("SCHEDULED", "AwaitingRetry") == "AwaitingRetry (SCHEDULED)"


def test_a_state_line_has_wall_time_to_the_second_and_the_block_clock() -> None:
    out = io.StringIO()
    view = ProgressView(Console(file=out, force_terminal=False), block_now=lambda: START + timedelta(minutes=90),
                        block_start=lambda: START)
    view.state("drain-k3-demo", "COMPLETED", "Completed")
    line = out.getvalue()
    assert line.endswith("  block +01:30  drain-k3-demo: Completed\n")
    assert datetime.strptime(line[:8], "%H:%M:%S")  # to the second, no microseconds


def test_a_runs_end_shows_its_last_lines_block_time_not_the_jump_after_it() -> None:
    out = io.StringIO()
    later = START + timedelta(hours=25, minutes=55)  # every run waits: the clock jumped past the block's end
    view = ProgressView(Console(file=out, force_terminal=False), block_now=lambda: later, block_start=lambda: START)
    view.show([ProgressLine(run="teardown-k3-demo", line="teardown done: 24 deleted", at=START,
                            block_at=START + timedelta(hours=23, minutes=28))])
    view.state("teardown-k3-demo", "COMPLETED", "Completed")
    assert out.getvalue().splitlines()[-1].endswith("  block +23:28  teardown-k3-demo: Completed")


def test_a_runs_end_is_told_after_the_lines_it_logged_just_before_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Prefect sends a run's log lines in batches, so its end may be seen before its last lines arrive."""
    now = [0.0]

    class Clock:
        @staticmethod
        def monotonic() -> float:
            return now[0]

        @staticmethod
        def sleep(seconds: float) -> None:
            now[0] += seconds

    def runs(campaign_id: str, *, since: datetime) -> list[ExistingRun]:
        state = ("RUNNING", "Running") if now[0] < 2 else ("COMPLETED", "Completed")
        return [ExistingRun(flow_run_id="r1", name="drain-k3-demo", state_type=state[0], state_name=state[1])]

    class Progress:
        told = False

        def poll(self, **_: Any) -> None:
            if now[0] >= 4 and not self.told:  # the drain's last line lands 2 s after its end was seen
                self.told = True
                view.show([ProgressLine(run="drain-k3-demo", line="drained: 1 Service(s) removed", at=START,
                                        block_at=START + timedelta(hours=23, minutes=26))])

    out = io.StringIO()
    view = ProgressView(Console(file=out, force_terminal=False, width=400), block_now=lambda: START,
                        block_start=lambda: START)
    monkeypatch.setattr(server_module, "time", Clock)
    monkeypatch.setattr(scheduling_module, "read_runs_about", runs)
    server_module._follow_scheduled("k3-demo", START, view, Progress(), lambda: None)  # type: ignore[arg-type]
    told = [line.split("  ", 2)[-1] for line in out.getvalue().splitlines()[1:]]
    assert told == ["drain-k3-demo: Running", "drain-k3-demo: drained: 1 Service(s) removed",
                    "drain-k3-demo: Completed"]


def test_the_status_line_names_only_the_runs_that_are_running() -> None:
    view = ProgressView(Console(file=io.StringIO(), force_terminal=True), block_now=lambda: START)
    view.state("serve-k3-demo", "RUNNING", "Running")
    view.state("drain-k3-demo", "SCHEDULED", "Scheduled")
    assert view._status is not None
    view.state("serve-k3-demo", "COMPLETED", "Completed")  # finished: no longer in the status line
    assert view._status is None
    view.close()


# --------------------------------------------------------------------------- plain output


def test_off_a_terminal_a_long_line_is_never_wrapped(capsys: pytest.CaptureFixture[str]) -> None:
    long = "bought cr-0123456789abcdef0 in us-east-2a for $2,832: " + "a fact that matters, " * 8 + "end"
    plain_console().print(long, highlight=False)
    assert capsys.readouterr().out == long + "\n"  # one line, though longer than 80 columns


# --------------------------------------------------------------------------- the closing summary


def report(*, serving_minutes: int, verdict: str | None = "pass") -> dict[str, Any]:
    paid = 8 * 1440
    made: dict[str, Any] = {
        "campaign": "k3-demo",
        "lease": {"reservation_id": "cr-0123456789abcdef0", "upfront_fee": 2832.0, "start": START.isoformat()},
        "cost": {"upfront_fee": 2832.0, "total_cost": 2911.4, "paid_gpu_minutes": paid,
                 "serving_gpu_minutes": serving_minutes, "paid_gpu_hours": paid / 60,
                 "serving_gpu_hours": serving_minutes / 60, "utilisation": serving_minutes / paid,
                 "utilisation_target": 0.8, "meets_target": serving_minutes / paid >= 0.8,
                 "usd_per_million_output_tokens": 1.23 if serving_minutes else None},
    }
    if verdict:
        made["evaluation"] = {"verdict": verdict, "gates": [{"name": "quality", "passed": verdict == "pass"}]}
    return made


def test_the_summary_says_verdict_utilisation_against_target_fee_per_mtok_and_the_report() -> None:
    lines = summary_lines(report(serving_minutes=8 * 1200), Path("out/demo"))
    assert lines == [
        "evaluation: PASS (1 gates)",
        "utilisation: 83% of the block's paid GPU-hours served (target 80%, met): 160.0 of 192.0 GPU-hours",
        "cost: fee $2,832, total $2,911; per million output tokens $1.23",
        "report: out/demo/report.md",
    ]


def test_a_block_paid_for_and_never_served_is_said_in_the_summary() -> None:
    unused = report(serving_minutes=0, verdict=None)
    assert block_unused(unused)
    assert "UNUSED BLOCK: the block was paid for and served nothing (see the report's Cost section)" in (
        summary_lines(unused, Path("out"))
    )


# --------------------------------------------------------------------------- --teardown-when-done


def test_teardown_when_done_off_a_terminal_without_yes_is_refused_before_anything_runs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ran: list[str] = []
    monkeypatch.setattr(campaign_module, "campaign", lambda spec, **_: ran.append("campaign"))
    code = main(["up", EXAMPLE, "--sandbox", "--in-process", "--teardown-when-done", "--out", str(tmp_path)])
    assert (code, ran) == (2, [])
    err = capsys.readouterr().err
    assert "--teardown-when-done" in err and "add --yes to confirm" in err


def test_teardown_when_done_that_left_the_block_unused_ends_non_zero_and_says_so(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def campaign(spec: Any, *, out_dir: Path, **_: Any) -> CampaignReport:
        (out_dir / "report.json").write_text(json.dumps(report(serving_minutes=0, verdict=None)))
        return CampaignReport(campaign="k3-demo")

    monkeypatch.setattr(campaign_module, "campaign", campaign)
    code = main(["up", EXAMPLE, "--sandbox", "--in-process", "--teardown-when-done", "--yes", "--out", str(tmp_path)])
    assert code == 1
    assert "UNUSED BLOCK" in capsys.readouterr().out


# --------------------------------------------------------------------------- Ctrl-C


def test_ctrl_c_with_the_sandbox_says_the_runs_cannot_go_on_and_cancels_the_pending_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runs = [ExistingRun(flow_run_id=str(n), name=name, state_type=state)
            for n, (name, state) in enumerate([("serve-k3-demo", "COMPLETED"), ("drain-k3-demo", "SCHEDULED"),
                                               ("teardown-k3-demo", "SCHEDULED")])]
    cancelled: list[str] = []
    monkeypatch.setattr(scheduling_module, "read_runs_about", lambda campaign_id, since: runs)
    monkeypatch.setattr(scheduling_module, "cancel_run", lambda run_id, why: cancelled.append(run_id))
    monkeypatch.setattr(scheduling_module, "read_run_state", lambda run_id: "RUNNING")
    said = server_module._interrupted("k3-demo", START, sandbox=True, ours=False, campaign_runs=["c"])
    assert cancelled == ["1", "2", "c"]  # the finished serve run is left as it is
    assert "cannot go on" in said[0] and "go on on the server" not in " ".join(said)
    assert said[1].startswith("cancelled the campaign's 3 unfinished run(s)")


def test_ctrl_c_in_process_with_the_sandbox_says_what_is_left_and_ends_with_the_summary(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def campaign(spec: Any, *, out_dir: Path, **_: Any) -> CampaignReport:
        (out_dir / "report.json").write_text(json.dumps(report(serving_minutes=60, verdict=None)))
        raise KeyboardInterrupt

    monkeypatch.setattr(campaign_module, "campaign", campaign)
    code = main(["up", EXAMPLE, "--sandbox", "--in-process", "--yes", "--out", str(tmp_path)])
    said = capsys.readouterr()
    assert code == 130
    assert "the campaign cannot go on, nothing real was bought or built" in said.err
    assert said.out.splitlines()[-1] == f"report: {tmp_path / 'report.md'}"
