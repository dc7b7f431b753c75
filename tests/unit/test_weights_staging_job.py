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


def test_every_replica_gets_each_layout_node_on_its_own_kubernetes_node() -> None:
    from capserve.core.weights.node_staging import staging_workloads

    kube_nodes = ("ip-d", "ip-b", "ip-a", "ip-c", "ip-e")  # one spare
    objects, result = staging_workloads(
        MANIFEST, kube_nodes=kube_nodes, replicas=2, campaign_id="demo", bucket="bkt", prefix="w",
        node_target="nvme",
    )
    namespace, *jobs = objects
    assert namespace["kind"] == "Namespace" and namespace["metadata"]["labels"] == {"capserve.io/campaign": "demo"}
    for obj in objects:
        kubernetes_validate.validate(obj, "1.34", strict=True)
    pinned = [j["spec"]["template"]["spec"]["nodeSelector"]["kubernetes.io/hostname"] for j in jobs]
    assert pinned == ["ip-a", "ip-b", "ip-c", "ip-d"]  # name order: a re-run maps the same way
    assert [(j.replica, j.node) for j in result.jobs] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert len({j.job for j in result.jobs}) == 4
    assert [j.files for j in result.jobs] == [3, 4, 3, 4]
    assert result.report_section()["namespace"] == "capserve-demo"


def test_too_few_ready_nodes_for_the_layout_is_refused() -> None:
    from capserve.core.errors import PermanentError
    from capserve.core.weights.node_staging import staging_workloads

    with pytest.raises(PermanentError, match=r"2 node\(s\) × 1 replica\(s\) need 2 GPU nodes, but only 1 are ready"):
        staging_workloads(MANIFEST, kube_nodes=("ip-a",), replicas=1, campaign_id="demo", bucket="bkt", prefix="w",
                          node_target="fsx")
