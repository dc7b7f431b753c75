"""The campaign flow end to end on the sandbox: stages recorded, report contract kept, refusals clean."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from capserve.cli import main
from capserve.core.errors import DoesNotFitError
from capserve.core.spec import load_spec
from capserve.flows.campaign import campaign

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kimi-k3-sandbox.yaml"


def test_campaign_plans_k3_on_one_b300_node_and_writes_the_report(tmp_path: Path) -> None:
    result = campaign(load_spec(EXAMPLE), out_dir=tmp_path)

    written = json.loads((tmp_path / "report.json").read_text())
    assert written == json.loads(json.dumps(result))
    assert written["campaign"] == "k3-demo"
    stages = {s["name"]: s for s in written["stages"]}
    assert stages["plan"]["status"] == "completed"
    assert stages["plan"]["ended_at"] >= stages["plan"]["started_at"]
    # Nothing rolled out and no endpoint given: evaluation says why it did not run.
    assert stages["evaluate"]["status"] == "skipped" and "no endpoint" in stages["evaluate"]["detail"]
    assert "evaluation" not in written
    plan = written["plan"]
    assert (plan["nodes"], plan["tensor_parallel"], plan["fits"]) == (1, 8, True)
    markdown = (tmp_path / "report.md").read_text()
    assert "## Plan" in markdown and "TP8" in markdown


def test_a_reservation_too_small_for_the_plan_stops_before_anything_else(tmp_path: Path) -> None:
    data = yaml.safe_load(EXAMPLE.read_text())
    data["capacity"]["instance_type"] = "p5en.48xlarge"  # K3 needs two of these
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(data))

    with pytest.raises(DoesNotFitError, match="set capacity.instance_count to 2"):
        campaign(load_spec(spec_path), out_dir=tmp_path / "out")

    written = json.loads((tmp_path / "out" / "report.json").read_text())
    assert [(s["name"], s["status"]) for s in written["stages"]] == [("plan", "failed")]
    assert "instance_count" in written["stages"][0]["detail"]
    assert "plan" not in written


def test_up_with_a_bad_spec_exits_2_and_names_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = yaml.safe_load(EXAMPLE.read_text())
    data["capacity"]["instance_count"] = 0
    spec_path = tmp_path / "bad.yaml"
    spec_path.write_text(yaml.safe_dump(data))

    assert main(["up", str(spec_path), "--sandbox"]) == 2
    err = capsys.readouterr().err
    assert "capacity.instance_count" in err and "greater than or equal to 1" in err


def test_up_on_the_sandbox_plans_and_evaluates_the_stand_in_endpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = yaml.safe_load(EXAMPLE.read_text())
    # A small load profile: this test is about the wiring, tests/eval about the measurements.
    data["evaluation"] = {
        "load": {"concurrency_levels": [2], "request_rates": [], "requests_per_stream": 2, "min_requests": 4}
    }
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(data))

    assert main(["up", str(spec_path), "--sandbox", "--out", str(tmp_path / "out")]) == 0

    written = json.loads((tmp_path / "out" / "report.json").read_text())
    assert [(s["name"], s["status"]) for s in written["stages"]] == [("plan", "completed"), ("evaluate", "completed")]
    evaluation = written["evaluation"]
    assert evaluation["verdict"] in {"pass", "invalid"}  # invalid only when this machine starves the client
    assert {"name", "value", "threshold", "passed"} <= set(evaluation["gates"][0])
    assert "standing in for the vLLM endpoint" in (tmp_path / "out" / "report.md").read_text()
    out = capsys.readouterr().out
    assert "report:" in out and "TP 8" in out
