"""The per-node staging Job validates against the Kubernetes schema and copies only that node's files."""

from __future__ import annotations

import json

import kubernetes_validate
import pytest

from capserve.core.weights.manifest import StagedFile, WeightsManifest
from capserve.core.weights.staging_job import node_model_path, render_staging_job
from capserve.tasks.weights.node_staging import copy_tool_source

SHA = "d" * 40
TOOL = copy_tool_source()
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
                             node_name="ip-10-0-0-1.ec2.internal", service_account="capserve-weights",
                             tool_source=TOOL)
    kubernetes_validate.validate(job, "1.34", strict=True)
    assert job["metadata"]["name"] == "capserve-weights-demo-n1"
    assert job["metadata"]["labels"]["capserve.io/campaign"] == "demo"
    env = {e["name"]: e["value"] for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert [key for _, _, key, _ in json.loads(env["FILES"])] == [
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
        node_target="nvme", tool_source=TOOL,
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
                          node_target="fsx", tool_source=TOOL)


def test_nvme_jobs_write_under_the_raid0_mount_and_leave_a_node_marker() -> None:
    job = render_staging_job(MANIFEST, node=1, campaign_id="demo", namespace="capserve", bucket="bkt",
                             prefix="w", node_target="nvme", node_name="ip-a", tool_source=TOOL)
    pod = job["spec"]["template"]["spec"]
    assert pod["volumes"] == [{"name": "weights", "hostPath": {"path": "/mnt/k8s-disks/0/capserve/weights",
                                                               "type": "DirectoryOrCreate"}}]
    env = {e["name"]: e["value"] for e in pod["containers"][0]["env"]}
    assert env["TARGET"] == node_model_path("org/model", SHA) == f"/weights/org/model/{SHA}"
    assert (env["NODE_INDEX"], env["NODE_MARKER"]) == ("1", ".capserve-node")



def test_the_job_runs_the_copy_tool_with_its_files_and_tuning() -> None:
    from capserve.core.weights.settings import WeightsSettings

    settings = WeightsSettings(staging_requests=64, staging_part_bytes=8 << 20, staging_parallelism=12,
                               staging_part_attempts=7)
    job = render_staging_job(MANIFEST, node=0, campaign_id="demo", namespace="capserve", bucket="bkt",
                             prefix="w", node_target="nvme", node_name="ip-a", settings=settings, tool_source=TOOL)
    container = job["spec"]["template"]["spec"]["containers"][0]
    # The tool's own text, run by the Python of an image that has boto3 (not the aws CLI's xargs loop).
    assert container["command"] == ["python3", "-c", TOOL]
    assert container["image"] == settings.staging_tool_image == "public.ecr.aws/lambda/python:3.12"
    env = {e["name"]: e["value"] for e in container["env"]}
    assert json.loads(env["FILES"])[:2] == [
        ["1" * 64, 10, "config.json", "config.json"],
        ["2" * 64, 100, "ep4-nodes2/dense-00001-of-00001.safetensors", "dense-00001-of-00001.safetensors"],
    ]
    assert (env["REQUESTS"], env["PART_BYTES"], env["FILES_AT_ONCE"], env["PROCESSES"], env["ATTEMPTS"]) == (
        "64", str(8 << 20), "12", "8", "7")


def test_nvme_paths_outside_the_raid0_mount_are_refused() -> None:
    from pydantic import ValidationError

    from capserve.core.weights.settings import WeightsSettings

    with pytest.raises(ValidationError, match="nvme_path"):
        WeightsSettings(nvme_path="/mnt/nvme/weights")  # the root EBS volume: a checkpoint overflows it
    with pytest.raises(ValidationError, match="compile_cache_path"):
        WeightsSettings(compile_cache_path="/var/cache/vllm")


def test_a_node_without_room_for_its_share_is_refused_before_any_job() -> None:
    from capserve.core.errors import PermanentError
    from capserve.core.weights.node_staging import staging_workloads
    from capserve.core.weights.settings import WeightsSettings

    settings = WeightsSettings(node_storage_margin_bytes=1000)
    common = dict(kube_nodes=("ip-a", "ip-b"), replicas=1, campaign_id="demo", bucket="bkt", prefix="w",
                  settings=settings, tool_source=TOOL)
    # ip-a holds node 0 (10 + 100 + 50 = 160 bytes), ip-b node 1 (165 bytes); each also needs the 1000-byte margin.
    objects, _ = staging_workloads(MANIFEST, node_target="nvme", node_storage={"ip-a": 1160, "ip-b": 1165},
                                   **common)  # type: ignore[arg-type]
    assert len(objects) == 3
    with pytest.raises(PermanentError) as raised:
        staging_workloads(MANIFEST, node_target="nvme", node_storage={"ip-a": 1160, "ip-b": 1164},
                          **common)  # type: ignore[arg-type]
    message = str(raised.value)
    assert "ip-b needs 1,165 bytes" in message and "ephemeral-storage is 1,164 bytes" in message
    assert "ip-a" not in message and "RAID0" in message
    # A node whose size is unknown (no local disk reported) is refused too.
    with pytest.raises(PermanentError, match="ip-a needs 1,160 bytes .* ephemeral-storage is 0 bytes"):
        staging_workloads(MANIFEST, node_target="nvme", node_storage={"ip-b": 10**12}, **common)  # type: ignore[arg-type]
    # On FSx the weights are not on the node: only the cache margin must fit.
    staging_workloads(MANIFEST, node_target="fsx", node_storage={"ip-a": 1000, "ip-b": 1000},
                      **common)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("quantity", "expected"),
    [("28Ti", 28 * 2**40), ("450Gi", 450 * 2**30), ("30000000k", 30 * 10**9), ("1e12", 10**12), ("1.5Ki", 1536),
     ("128974848000m", 128974848), ("12345", 12345), (20, 20)],
)
def test_quantities(quantity: object, expected: int) -> None:
    from capserve.core.cluster.nvme import parse_quantity

    assert parse_quantity(quantity) == expected


def test_node_storage_is_read_from_capacity() -> None:
    from capserve.core.cluster.nvme import ephemeral_storage_bytes, parse_quantity

    assert ephemeral_storage_bytes({"status": {"capacity": {"ephemeral-storage": "28Ti"}}}) == 28 * 2**40
    assert ephemeral_storage_bytes({"status": {"capacity": {}}}) == 0
    assert ephemeral_storage_bytes({"status": {"capacity": {"ephemeral-storage": "lots"}}}) == 0
    with pytest.raises(ValueError, match="lots"):
        parse_quantity("lots")


def test_the_copy_rate_is_the_least_of_its_requests_and_its_hashing() -> None:
    from capserve.core.weights.settings import WeightsSettings
    from capserve.core.weights.staging_job import staging_copy_bytes_per_s

    # 128 requests × 88 MB/s = 11.3 GB/s; 16 files hashed at 0.92 GB/s each = 14.7 GB/s.
    assert staging_copy_bytes_per_s(WeightsSettings(), 0.92e9) == 128 * 88e6
    # Fewer files at once than the array needs: the in-order hashes hold the copy back.
    assert staging_copy_bytes_per_s(WeightsSettings(staging_parallelism=8), 0.92e9) == 8 * 0.92e9
