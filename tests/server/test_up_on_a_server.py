"""``capserve up --sandbox --prefect-server``: the campaign as a deployment run, followed from the terminal."""

from __future__ import annotations

import json
import os
import re
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from capserve.cli import main
from capserve.cli.exit_codes import ExitCode
from capserve.core.timeline import s3_to_node_s

pytestmark = pytest.mark.server

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kimi-k3-sandbox.yaml"


def prefect_children() -> list[str]:
    """Command lines of this process's descendants that are Prefect servers or workers."""
    by_parent: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            by_parent.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [os.getpid()]
    while todo:
        for child in by_parent.get(todo.pop(), []):
            todo.append(child)
            try:
                cmd = (Path("/proc") / str(child) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "prefect server" in cmd or "prefect worker" in cmd or "prefect.server.api" in cmd:
                found.append(cmd)
    return found


def test_up_plays_the_whole_block_through_a_local_server_and_leaves_no_child_behind(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """What `make demo` does: purchase, the serve run fired at the block's start, drain, teardown, AWS's end."""
    data = yaml.safe_load(EXAMPLE.read_text())
    # The client's lag does not invalidate the run on a machine shared by other test processes: the test's own
    # condition, so that it can expect the one outcome (the evaluation's honesty is tests/eval's).
    data["evaluation"]["load"] = {"concurrency_levels": [1], "request_rates": [], "requests_per_stream": 2,
                                  "min_requests": 2, "max_loop_lag_p99_ms": 10_000.0}
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(data))
    out = tmp_path / "out"
    before = set(prefect_children())  # the test session's own temporary server

    # One revision, the bad one (make demo publishes a good one first; the promotion is tests/flows/test_redeploy.py's):
    # each redeploy is a minute and a half of the 30-minute CI budget.
    code = main(["up", str(spec), "--sandbox", "--yes", "--out", str(out), "--revisions", "bad"])

    report = json.loads((out / "report.json").read_text())
    assert code == 0, report["stages"]
    console = capfd.readouterr()
    assert_the_console_tells_the_blocks_story(console.err, console.out, report, out)
    window = report["window"]
    start, end = (datetime.fromisoformat(window[k]) for k in ("block_start", "block_end"))
    assert (start.hour, start.minute, end - start) == (11, 30, timedelta(hours=24))  # Capacity Block rules hold
    schedule = {entry["stage"]: entry for entry in report["schedule"]}
    assert sorted(schedule) == ["bring_up", "drain", "prepare_cluster", "teardown"]
    for entry in schedule.values():  # each fired by its schedule, at its simulated time to the minute
        assert entry["flow_run_id"] and entry["state"] == "Completed", entry
        fired, due = datetime.fromisoformat(entry["fired_at"]), datetime.fromisoformat(entry["scheduled_at"])
        assert abs(fired - due) <= timedelta(minutes=1), entry
    assert datetime.fromisoformat(schedule["bring_up"]["scheduled_at"]) == start
    # What needs no GPU was built before the block by its own run: the control plane among it.
    prepared = report["prepared"]
    assert datetime.fromisoformat(prepared["started_at"]) < start, prepared
    assert "eks-cluster/capserve-k3-demo" in prepared["created"], prepared
    # The GPU node group too, at size 0 (EKS allows it before the block); the serve run only scaled it at the start.
    assert "eks-nodegroup/capserve-k3-demo-gpu" in prepared["created"], prepared
    scaled_at = datetime.fromisoformat(report["cluster"]["node_join"]["scaled_at"])
    assert start <= scaled_at < datetime.fromisoformat(report["cluster"]["node_join"]["registered_at"])
    # The serve run served from the block (its stages are on the simulated clock, after the start).
    served = {s["name"]: s for s in report["stages"]}
    assert all(line["status"] in ("completed", "skipped") for line in report["stages"]), report["stages"]
    assert served["rollout"]["status"] == "completed"
    markdown = (out / "report.md").read_text()
    assert "Server: the sandbox kubelet's simulated vLLM 0.32.0" in markdown and "stand-in" not in markdown
    assert datetime.fromisoformat(served["rollout"]["started_at"]) > start
    # The stand-in checkpoint stands for K3: its vLLM start took the time model's hour and more on the block's
    # clock, measured from vLLM's own log lines as on a GPU.
    startup = report["rollout"]["startup"]
    assert abs(startup["measured"]["to_listening_s"] / startup["predicted_s"] - 1) < 0.10, startup
    # The rollout was ready after that start on the same clock, not after the second the sandbox took to play it.
    # (vLLM stamps its log lines to the second, so the start it measures may read up to a second longer.)
    assert report["rollout"]["ready_after_s"] >= startup["measured"]["to_listening_s"] - 1, report["rollout"]
    # The S3 → node copy took K3's modelled minutes (the time model's copy onto one p6-b300), not the stand-in's few
    # MB's seconds.
    staged = next(s for s in report["stages"] if s["name"] == "weights_to_nodes")
    took = datetime.fromisoformat(staged["ended_at"]) - datetime.fromisoformat(staged["started_at"])
    assert took.total_seconds() >= s3_to_node_s(report["plan"]["weight_bytes_per_gpu"] * 8, "p6-b300.48xlarge"), staged
    # The GPU nodes joined in the modelled launch-and-join half hour, measured from the nodes' own registration
    # and Ready times (the API server's clock is the block's), not in the seconds the sandbox took to make them.
    # What the sandbox plays is the time to Ready; after it, bring-up's own polls for the device plugin count at the
    # busy rate and grow with the machine's load, so they bound nothing here.
    join = report["cluster"]["node_join"]
    to_ready = (datetime.fromisoformat(join["ready_at"]) - datetime.fromisoformat(join["began_at"])).total_seconds()
    assert join["predicted_s"] <= to_ready < join["predicted_s"] * 1.10, join
    assert join["measured_s"] >= to_ready, join
    assert join["began_at"] < join["registered_at"] <= join["ready_at"] <= join["usable_at"], join
    assert report["teardown"]["deleted"] and report["cost"]["serving_gpu_hours"] > 0
    # Mid-block the sandbox Hub published a revision whose quality fails the gate: the watcher saw it, the
    # automation redeployed it, and it was rolled back to what served before.
    (bad,) = report["redeploys"]
    assert (bad["trigger"], bad["verdict"], bad["outcome"]) == ("revision-published", "fail", "rolled-back"), bad
    # Its recreate took the endpoint down: the block's ledger, rebuilt when the block ended, counts those minutes.
    cost = report["cost"]
    # A warm start: the new revision of the same architecture found the first rollout's compile cache.
    assert 0 < bad["downtime_minutes"] < 60, bad
    assert cost["lost_gpu_minutes"]["redeploys"] == pytest.approx(bad["downtime_minutes"] * 8, abs=8), cost
    assert cost["paid_gpu_minutes"] == cost["serving_gpu_minutes"] + sum(cost["lost_gpu_minutes"].values())
    assert bad["serving"] == bad["from"] != bad["to"]
    drain = datetime.fromisoformat(schedule["drain"]["scheduled_at"])
    assert start < datetime.fromisoformat(bad["started_at"]) < datetime.fromisoformat(bad["ended_at"]) < drain
    assert {"capserve.evaluation.failed", "capserve.rollout.rolled-back"} <= {e["event"] for e in report["events"]}
    assert "## Redeploys" in markdown
    # The final report is the campaign's whole story: the purchase the campaign run made (the offers it weighed, the
    # one it chose, the fee) is still there after the serve run adopted the reservation and the later runs finished
    # the report, and it says which run bought and which adopted.
    purchase = report["purchase"]
    assert (purchase["bought_by"], purchase["adopted_by"]) == ("campaign-k3-demo", "serve-k3-demo"), purchase
    (chosen,) = [offer for offer in report["offers_considered"] if offer["chosen"]]
    assert chosen["offering_id"] == purchase["offering_id"] and chosen["upfront_fee"] == report["lease"]["upfront_fee"]
    assert purchase["upfront_fee"] == chosen["upfront_fee"] > 0 and purchase["approval"].startswith("not needed")
    assert "## Capacity: bought" in markdown and "| adopted by | run `serve-k3-demo` |" in markdown
    # One Cost section: the block's ledger rebuilt from the record at the block's end, not the serve run's projection.
    assert cost["price_source"].startswith("Rebuilt after the serving run from the campaign record"), cost
    assert markdown.count("\n## Cost\n") == 1 and cost["price_source"] in markdown
    assert not any("projected" in note for note in cost["notes"]), cost["notes"]  # the drain ran: nothing ahead
    # What the serve run applied to the cluster, each object a file, in the campaign's report folder.
    assert any(path.suffix == ".yaml" for path in (out / "manifests").iterdir())
    assert (out / "prefect" / "home" / "prefect.db").exists()  # the server's database is under --out
    assert set(prefect_children()) - before == set()


def assert_the_console_tells_the_blocks_story(err: str, out: str, report: dict[str, Any], folder: Path) -> None:
    """What `make demo` prints (off a terminal, as CI reads it): one line per act on the block's clock beside wall
    time, every vLLM phase, the image pull, each teardown phase, then the closing summary."""
    lines = err.splitlines()
    lease = report["lease"]
    # The purchase, whole on one line though far longer than 80 columns: plain output is never wrapped.
    (bought,) = [line for line in lines if f"campaign-k3-demo: bought {lease['reservation_id']} in " in line]
    assert len(bought) > 80 and f"for ${lease['upfront_fee']:,.0f}: 1 × p6-b300.48xlarge, block " in bought, bought
    assert re.search(r"block \d\d-\d\d 11:30 → \d\d-\d\d 11:30 UTC$", bought), bought
    assert re.match(r"^\d\d:\d\d:\d\d  block ", bought), bought  # wall time to the second, the block's clock
    assert not any(re.search(r"\d\d:\d\d:\d\d\.\d", line) for line in lines)  # no microseconds anywhere
    assert not any("(PENDING)" in line and ": Pending" in line for line in lines)  # a state said once
    told = [line.split("  ", 2)[2] for line in lines if re.match(r"^\d\d:\d\d:\d\d  block [-+]\d\d:\d\d  ", line)]
    phases = [line.split("vLLM startup: ", 1)[1].split(",")[0] for line in told if "vLLM startup: " in line]
    for phase in ("loading weights", "compiling (torch.compile)", "capturing CUDA graphs", "listening"):
        assert phase in phases, phases
    assert any(": image pull: " in line and line.endswith(" pulled") for line in told), told
    assert any(": evaluation of " in line for line in told), told
    assert any(line.startswith("drain-k3-demo: drained: ") for line in told), told
    teardown = [line.split(": ", 1)[1] for line in told if re.match(r"^teardown-k3-demo: teardown \d+/\d+ ", line)]
    assert len(teardown) >= 5 and teardown[-1].startswith(f"teardown {len(teardown)}/{len(teardown)} "), teardown
    assert any("deleted eks-cluster/capserve-k3-demo" in line for line in teardown), teardown
    # The closing summary, last on stdout.
    summary = out.splitlines()
    assert f"report: {folder / 'report.md'}" in summary, summary
    assert any(line.startswith("utilisation: ") and "(target 80%" in line for line in summary), summary
    assert any(line.startswith("cost: fee $") and "per million output tokens" in line for line in summary), summary
    assert any(line.startswith("evaluation: ") for line in summary), summary


def test_a_failing_tick_loop_makes_up_stop_with_one_line_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """The sandbox's tick thread delivers AWS's events, plays the end − 30 terminations and publishes the Hub's
    revisions: a campaign played without it proves nothing, so the command says so and stops, not exit 0."""
    from capserve_sandbox.aws_ext import capacity

    def broken() -> None:
        raise RuntimeError("the stand-in's tick broke")

    monkeypatch.setattr(capacity, "deliver_due_events", broken)
    out = tmp_path / "out"
    before = set(prefect_children())

    code = main(["up", str(EXAMPLE), "--sandbox", "--yes", "--out", str(out), "--revisions", "none"])

    said = " ".join(capfd.readouterr().err.split())
    assert code == ExitCode.UNPROVEN, said
    named = "error: the sandbox's sandbox-clock-tick thread (EventBridge's Capacity Block events) failed"
    assert named in said and "RuntimeError: the stand-in's tick broke" in said, said
    assert "RuntimeError: the stand-in's tick broke" in (out / "sandbox-failures.log").read_text()
    assert set(prefect_children()) == before  # the server and worker it started are stopped
