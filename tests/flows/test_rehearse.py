"""`capserve rehearse examples/kimi-k3-sandbox.yaml --sandbox`: the whole path on on-demand capacity, torn down,
with its report and the record the purchase looks for."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from capserve.cli import main

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kimi-k3-sandbox.yaml"
HYPERPOD_EXAMPLE = EXAMPLE.with_name("kimi-k3-hyperpod-sandbox.yaml")


def example_for_a_busy_machine(tmp_path: Path, example: Path = EXAMPLE) -> Path:
    """The example with a small load whose client lag allowance suits a test machine shared by other test processes:
    this test proves the path and the record, not the client's timing (tests/eval covers that)."""
    data = yaml.safe_load(example.read_text())
    data["evaluation"]["load"] = {"concurrency_levels": [1], "request_rates": [], "requests_per_stream": 2,
                                  "min_requests": 2, "max_loop_lag_p99_ms": 10_000.0}
    path = tmp_path / example.name
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_sandbox_rehearsal_passes_tears_down_and_writes_report_and_record(tmp_path: Path) -> None:
    out = tmp_path / "rehearsal"
    code = main(["rehearse", str(example_for_a_busy_machine(tmp_path)), "--sandbox", "--out", str(out)])
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


def test_a_hyperpod_campaign_is_rehearsed_through_the_campaigns_path_on_a_hyperpod_cluster_of_on_demand_instances(
    tmp_path: Path,
) -> None:
    out = tmp_path / "rehearsal"
    code = main(["rehearse", str(example_for_a_busy_machine(tmp_path, HYPERPOD_EXAMPLE)), "--sandbox", "--out",
                 str(out)])
    assert code == 0
    written = json.loads((out / "report.json").read_text())
    record = written["rehearsal"]
    assert (record["result"], written["cluster"]["kind"]) == ("pass", "hyperpod")
    # No training plan: SageMaker's on-demand pool, priced at EC2's rate only as a floor (the table has no ml. rate).
    assert (record["cost"]["instance_type"], record["cost"]["price_status"]) == ("p6-b200.48xlarge", "unconfirmed")
    # The HyperPod example serves through the campaign's own path: its rollout, the evaluation's verdict.
    assert (written["rollout"]["name"], written["rollout"]["rolled_back"]) == ("vllm-blue", False)
    assert written["evaluation"]["verdict"] == "pass"
    assert written["teardown"]["remaining"] == []
    # The lifecycle-script bucket bring-up made went with the rehearsal.
    assert [r for r in written["teardown"]["deleted"] if r.startswith("s3-bucket/")] == [
        f"s3-bucket/sagemaker-{record['rehearsal_id']}-123456789012"
    ]
