"""The per-node staging Job validates against the Kubernetes schema and copies only that node's files."""

from __future__ import annotations

import kubernetes_validate
import pytest

from capserve.core.weights.manifest import StagedFile, WeightsManifest
from capserve.core.weights.staging_job import render_staging_job

SHA = "d" * 40
MANIFEST = WeightsManifest(
    repo="org/model", revision_sha=SHA, layout_id="ep4-nodes2", nodes=2,
    files=(
        StagedFile(key="config.json", dest="config.json", size=10, sha256="1" * 64),
        StagedFile(key="ep4-nodes2/dense-00001-of-00001.safetensors", dest="dense-00001-of-00001.safetensors",
                   size=100, sha256="2" * 64),
        StagedFile(key="ep4-nodes2/ep0001-00001-of-00001.safetensors", dest="ep0001-00001-of-00001.safetensors",
                   size=50, sha256="3" * 64, nodes=(0,)),
        StagedFile(key="ep4-nodes2/ep0002-00001-of-00001.safetensors", dest="ep0002-00001-of-00001.safetensors",
                   size=50, sha256="4" * 64, nodes=(1,)),
        StagedFile(key="ep4-nodes2/node-1/model.safetensors.index.json", dest="model.safetensors.index.json",
                   size=5, sha256="5" * 64, nodes=(1,)),
    ),
)


@pytest.mark.parametrize("target", ["nvme", "fsx"])
def test_job_validates_strictly_and_names_only_its_files(target: str) -> None:
    job = render_staging_job(MANIFEST, node=1, campaign_id="demo", namespace="capserve", bucket="bkt",
                             prefix="capserve/weights", node_target=target,  # type: ignore[arg-type]
                             node_name="ip-10-0-0-1.ec2.internal", service_account="capserve-weights")
    kubernetes_validate.validate(job, "1.34", strict=True)
    assert job["metadata"]["name"] == "capserve-weights-demo-n1"
    assert job["metadata"]["labels"]["capserve.io/campaign"] == "demo"
    env = {e["name"]: e["value"] for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    lines = env["FILES"].splitlines()
    assert [line.split()[1] for line in lines] == [
        "config.json", "ep4-nodes2/dense-00001-of-00001.safetensors", "ep4-nodes2/ep0002-00001-of-00001.safetensors",
        "ep4-nodes2/node-1/model.safetensors.index.json",
    ]
    assert env["BASE"] == f"capserve/weights/org/model/{SHA}"
    assert MANIFEST.bytes_for_node(1) == 10 + 100 + 50 + 5
