"""The per-node staging Job: copy only this node's files from S3 to its weight directory, verifying each.

Rendered here (pure); applied by the cluster stage. One Job per node, pinned to the node by hostname,
named deterministically so a re-apply converges. The container copies each file to ``<dest>.partial``,
checks its sha256 against the manifest and renames it into place, so a killed pod never leaves a file
that a later run trusts; files already present with the right sha256 are skipped. Last, it writes
``.capserve-node`` (the layout node index whose files the folder holds), which the serving pod checks
before it starts.

The staging Job and the vLLM pods mount the same volume (``weights_volume``): the Job fills
``node_model_path`` (one folder per revision), and the vLLM container mounts exactly that folder at the
path its ``--model`` names (``served_model_path``, the same for every revision). On NVMe that is a
hostPath on the node's NVMe mount (``WeightsSettings.nvme_path``, moved to the cluster kind's mount by
``WeightsSettings.for_cluster``: nodeadm's RAID0 array on EKS, /opt/dlami/nvme on HyperPod).
"""

from __future__ import annotations

from typing import Any, Literal

from capserve.core.tags import CAMPAIGN_TAG
from capserve.core.weights.manifest import WeightsManifest, s3_base
from capserve.core.weights.settings import WeightsSettings

CAMPAIGN_LABEL = CAMPAIGN_TAG  # the same key, as a Kubernetes label
COMPONENT_LABEL = "capserve.io/component"
NODE_LABEL = "capserve.io/weights-node"
CONTAINER_DIR = "/weights"
NODE_MARKER = ".capserve-node"

# Reads "sha256 key dest" lines from $FILES; each line is copied by one `sh -c` under xargs -P.
# `aws s3 cp` retries transient S3 errors itself (AWS CLI retry modes, "standard" by default).
_COPY_ONE = r"""set -eu
sha="$1"; key="$2"; dest="$3"
mkdir -p "$(dirname "$dest")"
if [ -f "$dest" ] && printf '%s  %s\n' "$sha" "$dest" | sha256sum -c --status; then exit 0; fi
rm -f "$dest.partial"
aws s3 cp --only-show-errors "s3://$BUCKET/$BASE/$key" "$dest.partial"
if ! printf '%s  %s\n' "$sha" "$dest.partial" | sha256sum -c --status; then
  echo "sha256 mismatch for $dest (s3://$BUCKET/$BASE/$key)" >&2; rm -f "$dest.partial"; exit 1
fi
mv "$dest.partial" "$dest"
"""

_SCRIPT = r"""set -eu
mkdir -p "$TARGET" && cd "$TARGET"
rm -f "$TARGET/$NODE_MARKER"
printf '%s\n' "$FILES" | xargs -P "$PARALLEL" -L 1 sh -c "$COPY_ONE" copy
printf '%s\n' "$NODE_INDEX" > "$TARGET/$NODE_MARKER"
echo "staged $(printf '%s\n' "$FILES" | wc -l) files into $TARGET (node $NODE_INDEX)"
"""


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
) -> dict[str, Any]:
    """A batch/v1 Job that stages ``manifest``'s files for ``node`` into ``<root>/<repo>/<sha>/``.

    ``node_name`` pins the pod to that Kubernetes node (needed for local NVMe); ``service_account``
    carries the S3 read permission (IRSA / EKS Pod Identity).
    """
    settings = settings or WeightsSettings()
    files = manifest.for_node(node)
    lines = "\n".join(f"{f.sha256} {f.key} {f.dest}" for f in files)
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
                "image": settings.staging_image,
                "command": ["/bin/sh", "-c", _SCRIPT],
                "env": [
                    {"name": "BUCKET", "value": bucket},
                    {"name": "BASE", "value": s3_base(prefix, manifest.repo, manifest.revision_sha)},
                    {"name": "TARGET", "value": target},
                    {"name": "PARALLEL", "value": str(settings.staging_parallelism)},
                    {"name": "FILES", "value": lines},
                    {"name": "COPY_ONE", "value": _COPY_ONE},
                    {"name": "NODE_INDEX", "value": str(node)},
                    {"name": "NODE_MARKER", "value": NODE_MARKER},
                ],
                "volumeMounts": [{"name": "weights", "mountPath": CONTAINER_DIR}],
                "resources": {"requests": {"cpu": "2", "memory": "2Gi"}, "limits": {"memory": "8Gi"}},
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
