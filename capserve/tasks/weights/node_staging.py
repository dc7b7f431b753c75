"""Per-node staging on the cluster: a Job on each GPU node copies that node's files from S3 and
verifies each sha256 (the copy tool, ``s3_copy_tool.py``), then the stage waits for every Job to succeed."""

from __future__ import annotations

from pathlib import Path

from prefect.cache_policies import NO_CACHE

from capserve.core.cluster.result import ClusterResult
from capserve.core.cluster.settings import KubeSettings
from capserve.core.spec import CampaignSpec
from capserve.core.weights.manifest import WeightsManifest
from capserve.core.weights.node_staging import NodeStagingResult, staging_workloads
from capserve.core.weights.settings import WeightsSettings
from capserve.tasks.kube import api_client_for_eks, apply, apply_job, wait_workloads_ready
from capserve.tasks.resilience import kube_task
from capserve.tasks.weights import s3_copy_tool


def copy_tool_source() -> str:
    """The copy tool's text, which the staging Job's container runs as ``python3 -c``."""
    return Path(s3_copy_tool.__file__).read_text(encoding="utf-8")


@kube_task(name="stage-weights-on-nodes", cache_policy=NO_CACHE)
def stage_on_nodes(
    spec: CampaignSpec,
    cluster: ClusterResult,
    manifest: WeightsManifest,
    settings: WeightsSettings | None = None,
    kube: KubeSettings | None = None,
) -> NodeStagingResult:
    """Apply the namespace and one staging Job per node (server-side, so a re-run converges), then wait."""
    # The node data path is the cluster kind's NVMe mount (nodeadm's RAID0 on EKS, /opt/dlami/nvme on HyperPod).
    settings = (settings or WeightsSettings()).for_cluster(cluster.kind)
    objects, result = staging_workloads(
        manifest,
        kube_nodes=cluster.node_names,
        replicas=spec.serving.replicas,
        campaign_id=spec.campaign_id,
        bucket=spec.weights.s3_bucket,
        prefix=spec.weights.s3_prefix,
        node_target=spec.weights.node_target,
        settings=settings,
        # Refuses a node too small for its share (plus caches) before any Job is applied.
        node_storage=cluster.node_storage_bytes,
        cluster_kind=cluster.kind,
        tool_source=copy_tool_source(),
    )
    kube = kube or KubeSettings()
    api = api_client_for_eks(cluster.endpoint, cluster.ca_data, cluster.name, cluster.region, settings=kube)
    for obj in objects:
        if obj["kind"] == "Job":
            apply_job(api, obj)  # a Job of another revision under the same name is made again
        else:
            apply(api, obj)
    # A Job's activeDeadlineSeconds bounds each copy; the wait may take as long, not longer.
    jobs = [o for o in objects if o["kind"] == "Job"]
    deadline = settings.staging_deadline_seconds
    wait_workloads_ready(api, jobs, kube, timeout_s=deadline, what="staging Jobs")
    return result
