"""The campaign flow end to end on the sandbox: stages recorded, report contract kept, refusals clean."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from capserve.cli import main
from capserve.core.errors import DoesNotFitError
from capserve.core.spec import load_spec
from capserve.flows.campaign import campaign
from capserve.sandbox.environment import SandboxEndpoints, sandbox

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kimi-k3-sandbox.yaml"


@pytest.fixture(scope="module")
def far_ends() -> Iterator[SandboxEndpoints]:
    with sandbox(served_model_name="kimi-k3") as endpoints:
        yield endpoints


def spec_file(tmp_path: Path, **changes: Any) -> Path:
    data = yaml.safe_load(EXAMPLE.read_text())
    for dotted, value in changes.items():
        *parents, leaf = dotted.split("__")
        node = data
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_campaign_runs_every_stage_and_keeps_the_report_contract(tmp_path: Path, far_ends: SandboxEndpoints) -> None:
    result = campaign(load_spec(EXAMPLE), out_dir=tmp_path, hub_endpoint=far_ends.hub)

    written = json.loads((tmp_path / "report.json").read_text())
    assert written == json.loads(json.dumps(result))
    assert written["campaign"] == "k3-demo"
    stages = {s["name"]: s for s in written["stages"]}
    assert all(s["ended_at"] >= s["started_at"] for s in written["stages"])
    assert stages["plan"]["status"] == "completed"
    plan = written["plan"]
    assert (plan["nodes"], plan["tensor_parallel"], plan["fits"]) == (1, 8, True)

    assert stages["stage_weights"]["status"] == "completed"
    weights = written["weights"]
    assert weights["repo"] == "capserve-sandbox/tiny-k3" and weights["verified"] is True
    assert weights["bytes_per_node"] == [weights["bytes_total"]]  # one node holds everything

    # Nothing rolled out and no endpoint given: evaluation says why it did not run.
    assert stages["evaluate"]["status"] == "skipped" and "no endpoint" in stages["evaluate"]["detail"]
    assert "evaluation" not in written
    markdown = (tmp_path / "report.md").read_text()
    assert "## Plan" in markdown and "TP8" in markdown and "## Weights" in markdown


def test_a_reservation_too_small_for_the_plan_stops_before_anything_else(tmp_path: Path) -> None:
    path = spec_file(tmp_path, capacity__instance_type="p5en.48xlarge")  # K3 needs two of these

    with pytest.raises(DoesNotFitError, match="set capacity.instance_count to 2"):
        campaign(load_spec(path), out_dir=tmp_path / "out")

    written = json.loads((tmp_path / "out" / "report.json").read_text())
    assert [(s["name"], s["status"]) for s in written["stages"]] == [("plan", "failed")]
    assert "instance_count" in written["stages"][0]["detail"]
    assert "plan" not in written


def test_up_with_a_bad_spec_exits_2_and_names_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = spec_file(tmp_path, capacity__instance_count=0)

    assert main(["up", str(path), "--sandbox"]) == 2
    err = capsys.readouterr().err
    assert "capacity.instance_count" in err and "greater than or equal to 1" in err


def test_up_on_the_sandbox_runs_the_demo_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A small load profile: this test is about the wiring, tests/eval about the measurements.
    path = spec_file(
        tmp_path,
        evaluation__load={"concurrency_levels": [2], "request_rates": [], "requests_per_stream": 2, "min_requests": 4},
    )

    assert main(["up", str(path), "--sandbox", "--out", str(tmp_path / "out")]) == 0

    written = json.loads((tmp_path / "out" / "report.json").read_text())
    assert all(s["status"] == "completed" for s in written["stages"])
    evaluation = written["evaluation"]
    assert evaluation["verdict"] in {"pass", "invalid"}  # invalid only when this machine starves the client
    assert {"name", "value", "threshold", "passed"} <= set(evaluation["gates"][0])
    assert "standing in for the vLLM endpoint" in (tmp_path / "out" / "report.md").read_text()
    out = capsys.readouterr().out
    assert "report:" in out and "TP 8" in out
