"""vLLM's compile, JIT and autotune caches: on the node's NVMe, restored from S3 before start, saved after.

Where vLLM keeps them (docs/serving.md §4): everything under ``VLLM_CACHE_ROOT`` (torch.compile and
AOT artifacts, Triton autotune per rank, DeepGEMM JIT, FlashInfer autotune), FlashInfer's JIT under
``FLASHINFER_WORKSPACE_BASE``, the CUDA driver's PTX JIT under ``CUDA_CACHE_PATH``. CUDA graphs are
captured again on every start and are not cached.

Layout on a node: ``<compile_cache_path>/<cache key>/node-<i>/`` for the pod of layout node ``i``
(each node compiles its own ranks), mounted at ``/cache``. In S3:
``s3://<weights bucket>/<prefix>/compile-cache/<cache key>/node-<i>/``, complete only when its
``.capserve-complete`` marker exists (uploaded last, so a half-saved cache is never restored).

- ``prepare_container``: the pod's init container. It first checks that the node's weight folder
  holds this node's experts (``.capserve-node``, written by the staging Job) when nodes hold
  different ones, then restores the cache and prints ``CAPSERVE_COMPILE_CACHE=hit|miss|off`` as
  its last line (``cache_outcome`` reads it back from the pod's log).
- ``render_cache_save_job``: a Job pinned to the node a pod ran on, run once the server is ready;
  it uploads the node's cache unless S3 already has a complete one.

Both run the staging image (aws CLI, sh) with plain ``sh`` scripts whose paths come from env vars.

``compile_config_digest`` is vLLM's rule for which part of a checkpoint its compile cache depends on: the
model's ``config.json`` as transformers serialises it, not the weights (docs/serving.md §4). The weights
stage digests the staged ``config.json`` with it (so the compile-cache key follows the architecture, not the
revision), and the sandbox's vLLM decides a played start's warmth with it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any, Literal

from capserve.core.rollout.names import Color, base_labels, cache_save_job_name
from capserve.core.weights.manifest import s3_base
from capserve.core.weights.settings import WeightsSettings
from capserve.core.weights.staging_job import CONTAINER_DIR, NODE_MARKER

CACHE_MOUNT = "/cache"
CACHE_MARKER = ".capserve-complete"
OUTCOME_PREFIX = "CAPSERVE_COMPILE_CACHE="
CacheOutcome = Literal["hit", "miss", "off"]

_PREPARE = r"""set -eu
if [ -n "${EXPECTED_NODE:-}" ]; then
  found="$(cat "$WEIGHTS_DIR/$NODE_MARKER" 2>/dev/null || echo none)"
  if [ "$found" != "$EXPECTED_NODE" ]; then
    echo "the weights in $WEIGHTS_DIR on this node are layout node $found's; this pod is node $EXPECTED_NODE" >&2
    exit 1
  fi
fi
if [ "$CACHE_ENABLED" != "true" ]; then echo "${OUTCOME_PREFIX}off"; exit 0; fi
mkdir -p "$CACHE_DIR"
if [ -f "$CACHE_DIR/$CACHE_MARKER" ]; then echo "${OUTCOME_PREFIX}hit source=node"; exit 0; fi
if aws s3 ls "$CACHE_URI$CACHE_MARKER" > /dev/null; then
  if aws s3 sync --only-show-errors "$CACHE_URI" "$CACHE_DIR"; then
    echo "${OUTCOME_PREFIX}hit source=s3"; exit 0
  fi
  echo "restoring $CACHE_URI failed: starting cold" >&2
  find "$CACHE_DIR" -mindepth 1 -delete
fi
echo "${OUTCOME_PREFIX}miss"
"""

_SAVE = r"""set -eu
if [ ! -d "$CACHE_DIR" ]; then echo "no compile cache at $CACHE_DIR" >&2; exit 1; fi
if aws s3 ls "$CACHE_URI$CACHE_MARKER" > /dev/null; then echo "compile cache already saved at $CACHE_URI"; exit 0; fi
rm -f "$CACHE_DIR/$CACHE_MARKER"
aws s3 sync --only-show-errors "$CACHE_DIR" "$CACHE_URI"
date -u +%Y-%m-%dT%H:%M:%SZ > "$CACHE_DIR/$CACHE_MARKER"
aws s3 cp --only-show-errors "$CACHE_DIR/$CACHE_MARKER" "$CACHE_URI$CACHE_MARKER"
echo "compile cache saved to $CACHE_URI"
"""


# What transformers leaves out of, or overwrites in, the config it serialises (``PretrainedConfig.to_diff_dict``
# drops ``_name_or_path``; ``_remove_keys_not_serialized`` drops ``_commit_hash``; ``to_dict`` writes its own
# ``transformers_version``), so vLLM's ``ModelConfig.compute_hash`` never sees them (docs/serving.md §4).
_NOT_HASHED_BY_VLLM = frozenset({"_name_or_path", "_commit_hash", "transformers_version"})


def compile_config_digest(config: Mapping[str, Any]) -> str:
    """SHA-256 of a ``config.json`` as vLLM's compile-cache hash sees it: every field (architecture, layer
    count, dtype, quantization, ...) except the ones transformers drops or overwrites, at any depth.

    Two revisions whose ``config.json`` agree get the same digest whatever their weights; a changed layer
    count, dtype or quantization config gets another. Stricter than vLLM where a file spells out a default
    value (vLLM hashes only the differences from the defaults): that costs a cold start, never a wrong hit.
    """
    return hashlib.sha256(json.dumps(_hashed(config), sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _hashed(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _hashed(v) for k, v in value.items() if k not in _NOT_HASHED_BY_VLLM}
    if isinstance(value, list):
        return [_hashed(v) for v in value]
    return value


def cache_uri(bucket: str, prefix: str, key: str) -> str:
    """``s3://<bucket>/<prefix>/compile-cache/<key>/``: beside the weights, in the same bucket."""
    return f"s3://{bucket}/{s3_base(prefix, 'compile-cache', key)}/"


def node_dir(node: int | str) -> str:
    return f"{CACHE_MOUNT}/node-{node}"


def cache_env(node: int | str) -> list[dict[str, str]]:
    """The vLLM container's cache locations, all on the node's NVMe under its own node directory."""
    root = node_dir(node)
    return [
        {"name": "VLLM_CACHE_ROOT", "value": f"{root}/vllm"},
        {"name": "FLASHINFER_WORKSPACE_BASE", "value": f"{root}/flashinfer"},
        {"name": "CUDA_CACHE_PATH", "value": f"{root}/cuda"},
        # The driver's default cap is far below what a large MoE's kernels take; 4 GiB is its maximum.
        {"name": "CUDA_CACHE_MAXSIZE", "value": str(4 * 1024**3)},
    ]


def cache_volume(key: str, settings: WeightsSettings) -> dict[str, Any]:
    return {
        "name": "compile-cache",
        "hostPath": {"path": f"{settings.compile_cache_path}/{key}", "type": "DirectoryOrCreate"},
    }


def prepare_container(
    *,
    image: str,
    model_path: str,
    uri: str,
    enabled: bool,
    node: str,
    check_weights: bool,
) -> dict[str, Any]:
    """The init container: check the node's weights are this node's, then restore the compile cache.

    ``node``: this pod's layout node, ``"0"`` on the leader and ``$(LWS_WORKER_INDEX)`` on workers.
    ``check_weights``: nodes hold different experts, so the folder must be this node's.
    """
    env = [
        {"name": "WEIGHTS_DIR", "value": model_path},
        {"name": "NODE_MARKER", "value": NODE_MARKER},
        {"name": "EXPECTED_NODE", "value": node if check_weights else ""},
        {"name": "CACHE_ENABLED", "value": "true" if enabled else "false"},
        {"name": "CACHE_DIR", "value": node_dir(node)},
        {"name": "CACHE_URI", "value": f"{uri}node-{node}/"},
        {"name": "CACHE_MARKER", "value": CACHE_MARKER},
        {"name": "OUTCOME_PREFIX", "value": OUTCOME_PREFIX},
    ]
    return {
        "name": "prepare-node",
        "image": image,
        "command": ["/bin/sh", "-c", _PREPARE],
        "env": env,
        "volumeMounts": [
            {"name": "weights", "mountPath": CONTAINER_DIR, "readOnly": True},
            {"name": "compile-cache", "mountPath": CACHE_MOUNT},
        ],
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "4Gi"}},
    }


def render_cache_save_job(
    *,
    campaign_id: str,
    namespace: str,
    color: Color,
    key: str,
    uri: str,
    node_index: int,
    kube_node: str,
    settings: WeightsSettings | None = None,
) -> dict[str, Any]:
    """A Job on ``kube_node`` (where the pod of layout node ``node_index`` ran) that saves its cache to S3.

    Apply it once the server is ready (compilation and autotuning happen during startup). A no-op
    when S3 already holds a complete cache for this key and node.
    """
    settings = settings or WeightsSettings()
    labels = {**base_labels(campaign_id), "capserve.io/cache-node": str(node_index)}
    labels["capserve.io/component"] = "compile-cache"
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "nodeSelector": {"kubernetes.io/hostname": kube_node},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "automountServiceAccountToken": False,
        "containers": [
            {
                "name": "save",
                "image": settings.staging_image,
                "command": ["/bin/sh", "-c", _SAVE],
                "env": [
                    {"name": "CACHE_DIR", "value": node_dir(node_index)},
                    {"name": "CACHE_URI", "value": f"{uri}node-{node_index}/"},
                    {"name": "CACHE_MARKER", "value": CACHE_MARKER},
                ],
                "volumeMounts": [{"name": "compile-cache", "mountPath": CACHE_MOUNT}],
                "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "4Gi"}},
            }
        ],
        "volumes": [cache_volume(key, settings)],
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": cache_save_job_name(color, node_index), "namespace": namespace, "labels": labels},
        "spec": {
            "backoffLimit": 2,
            "activeDeadlineSeconds": 3600,
            "ttlSecondsAfterFinished": 24 * 3600,
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }


_OUTCOME = re.compile(rf"^{OUTCOME_PREFIX}(hit|miss|off)\b", re.MULTILINE)


def cache_outcome(init_log: str) -> CacheOutcome | None:
    """``hit``, ``miss`` or ``off`` from the prepare container's log (its last such line); None if absent."""
    found = _OUTCOME.findall(init_log)
    if not found:
        return None
    outcome: CacheOutcome = found[-1]
    return outcome
