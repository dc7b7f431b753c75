"""The per-node staging Job: copy only this node's files from S3 to its weight directory, verifying each.

Rendered here (pure); applied by the cluster stage. One Job per node, pinned to the node by hostname,
named deterministically so a re-apply converges. The container runs the copy tool
(``capserve/tasks/weights/s3_copy_tool.py``, as ``python3 -c``): parallel ranged GETs written at their offsets
into ``<dest>.partial``, hashed in order while written, compared with the manifest's sha256 and renamed into
place, so a killed pod never leaves a file that a later run trusts; files already present with the right
sha256 are skipped. Last, it writes
``.capserve-node`` (the layout node index whose files the folder holds), which the serving pod checks
before it starts.

The staging Job and the vLLM pods mount the same volume (``weights_volume``): the Job fills
``node_model_path`` (one folder per revision), and the vLLM container mounts exactly that folder at the
path its ``--model`` names (``served_model_path``, the same for every revision). On NVMe that is a
hostPath on the node's NVMe mount (``WeightsSettings.nvme_path``, moved to the cluster kind's mount by
``WeightsSettings.for_cluster``: nodeadm's RAID0 array on EKS, /opt/dlami/nvme on HyperPod).
"""

from __future__ import annotations

import json
from typing import Any, Literal

from capserve.core.tags import CAMPAIGN_TAG
from capserve.core.weights.manifest import WeightsManifest, s3_base
from capserve.core.weights.settings import WeightsSettings

CAMPAIGN_LABEL = CAMPAIGN_TAG  # the same key, as a Kubernetes label
COMPONENT_LABEL = "capserve.io/component"
NODE_LABEL = "capserve.io/weights-node"
CONTAINER_DIR = "/weights"
NODE_MARKER = ".capserve-node"

# What one ranged GET carries: AWS measures 85–90 MB/s per request and advises one request per that much of the
# throughput wanted (S3 user guide, "Performance design patterns"; docs/weights.md §7).
S3_REQUEST_BYTES_PER_S = 88e6
# sha256 on one core over bytes in the page cache, measured (docs/weights.md §6's table) [measured].
SHA256_CORE_BYTES_PER_S = 0.92e9


def staging_copy_bytes_per_s(settings: WeightsSettings, hash_bytes_per_s: float = SHA256_CORE_BYTES_PER_S) -> float:
    """The staging copy's own ceiling on one node, before the node's network and disk bound it.

    Its ranged GETs carry ``staging_requests`` × 88 MB/s; each file's sha256 runs on one core, in order, so the
    ``staging_parallelism`` files copied at once hash at that many × ``hash_bytes_per_s``. The time model takes
    the least of this, the instance's network and its NVMe array's writes (docs/weights.md §7, with the rate
    ``make bench`` measures).
    """
    return min(settings.staging_requests * S3_REQUEST_BYTES_PER_S, settings.staging_parallelism * hash_bytes_per_s)


def staging_job_name(campaign_id: str, node: int, replica: int = 0) -> str:
    """One Job per node of each serving replica (every replica holds a full copy of its nodes' files)."""
    replica_part = f"-r{replica}" if replica else ""
    return f"capserve-weights-{campaign_id}{replica_part}-n{node}"


def render_staging_job(
    manifest: WeightsManifest,
    *,
    node: int,
    campaign_id: str,
    namespace: str,
    bucket: str,
    prefix: str,
    node_target: Literal["fsx", "nvme"],
    node_name: str | None = None,
    service_account: str | None = None,
    settings: WeightsSettings | None = None,
    replica: int = 0,
    tool_source: str,
) -> dict[str, Any]:
    """A batch/v1 Job that stages ``manifest``'s files for ``node`` into ``<root>/<repo>/<sha>/``.

    ``tool_source`` is the copy tool the container runs (``capserve/tasks/weights/s3_copy_tool.py``'s text).
    ``node_name`` pins the pod to that Kubernetes node (needed for local NVMe); ``service_account``
    carries the S3 read permission (IRSA / EKS Pod Identity).
    """
    settings = settings or WeightsSettings()
    files = manifest.for_node(node)
    listing = json.dumps([[f.sha256, f.size, f.key, f.dest] for f in files], separators=(",", ":"))
    labels = {CAMPAIGN_LABEL: campaign_id, COMPONENT_LABEL: "weights-staging", NODE_LABEL: str(node)}
    target = node_model_path(manifest.repo, manifest.revision_sha)
    volume = weights_volume(node_target, settings, create=True)
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        # GPU nodes carry the nvidia.com/gpu NoSchedule taint (EKS GPU AMIs / GPU operator); staging needs no GPU
        # but must run on that node.
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [
            {
                "name": "stage",
                "image": settings.staging_tool_image,
                "command": ["python3", "-c", tool_source],
                "env": [
                    {"name": "BUCKET", "value": bucket},
                    {"name": "BASE", "value": s3_base(prefix, manifest.repo, manifest.revision_sha)},
                    {"name": "TARGET", "value": target},
                    {"name": "FILES", "value": listing},
                    {"name": "PART_BYTES", "value": str(settings.staging_part_bytes)},
                    {"name": "REQUESTS", "value": str(settings.staging_requests)},
                    {"name": "FILES_AT_ONCE", "value": str(settings.staging_parallelism)},
                    {"name": "PROCESSES", "value": str(settings.staging_processes)},
                    {"name": "ATTEMPTS", "value": str(settings.staging_part_attempts)},
                    {"name": "NODE_INDEX", "value": str(node)},
                    {"name": "NODE_MARKER", "value": NODE_MARKER},
                ],
                "volumeMounts": [{"name": "weights", "mountPath": CONTAINER_DIR}],
                # Each file copied at once hashes on a core: no CPU limit, so it takes the node's idle cores (a
                # serving pod of the old revision keeps what it requested). Parts fetched but not yet hashed are
                # held in memory: at most 2 × requests × part bytes (4 GiB at the defaults).
                "resources": {"requests": {"cpu": "4", "memory": "6Gi"}, "limits": {"memory": "12Gi"}},
            }
        ],
        "volumes": [volume],
    }
    if node_name is not None:
        pod_spec["nodeSelector"] = {"kubernetes.io/hostname": node_name}
    if service_account is not None:
        pod_spec["serviceAccountName"] = service_account
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": staging_job_name(campaign_id, node, replica), "namespace": namespace, "labels": labels},
        "spec": {
            "backoffLimit": settings.staging_backoff_limit,
            "activeDeadlineSeconds": settings.staging_deadline_seconds,
            "ttlSecondsAfterFinished": 24 * 3600,
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }


def node_weight_path(root: str, repo: str, sha: str) -> str:
    """Where a node's weights end up on the host."""
    return f"{root.rstrip('/')}/{repo}/{sha}"


def node_model_path(repo: str, sha: str) -> str:
    """The revision's weight folder as the staging Job (and the serving pod's init container) sees it.

    One folder per revision, so a new one is staged beside the one serving. vLLM reads it at a path no
    revision changes (``capserve.core.rollout.workload.served_model_path``): it hashes that path into its
    compile cache (docs/serving.md §4).
    """
    return node_weight_path(CONTAINER_DIR, repo, sha)


def weights_volume(
    node_target: Literal["fsx", "nvme"], settings: WeightsSettings, *, create: bool = False
) -> dict[str, Any]:
    """The pod volume holding the weights: the node's NVMe directory, or the FSx claim.

    ``create``: the staging Job makes the directory; a serving pod requires it to exist already
    (``Directory``), so a pod on a node that was never staged fails to start instead of serving an
    empty folder.
    """
    if node_target == "nvme":
        kind = "DirectoryOrCreate" if create else "Directory"
        return {"name": "weights", "hostPath": {"path": settings.nvme_path, "type": kind}}
    return {"name": "weights", "persistentVolumeClaim": {"claimName": settings.fsx_claim, "readOnly": not create}}
