"""`capserve rehearse examples/kimi-k3-sandbox.yaml --sandbox`: the whole path on on-demand capacity, torn down,
with its report and the record the purchase looks for."""

from __future__ import annotations

import json
from pathlib import Path

from capserve.cli import main


def test_the_sandbox_rehearsal_passes_tears_down_and_writes_report_and_record(tmp_path: Path) -> None:
    out = tmp_path / "rehearsal"
    code = main(["rehearse", "examples/kimi-k3-sandbox.yaml", "--sandbox", "--out", str(out)])
    assert code == 0
    written = json.loads((out / "report.json").read_text())
    record = written["rehearsal"]
    assert record["result"] == "pass"
    assert record["campaign_id"] == "k3-demo" and record["rehearsal_id"] == "k3-demo-rh"
    assert [c["name"] for c in record["checks"]] == [
        "plan", "stage_weights", "stage_image", "bring_up", "weights_to_nodes", "rollout", "evaluate", "teardown",
    ]
    assert all(c["seconds"] is not None for c in record["checks"])
    assert record["cost"]["instance_type"] == "p6-b200.48xlarge"
    assert record["cost"]["source"].startswith("capserve/core/cost/data/prices.yaml")
    assert written["teardown"]["remaining"] == []
    assert "## Rehearsal" in (out / "report.md").read_text()
