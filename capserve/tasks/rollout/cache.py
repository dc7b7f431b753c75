"""Compile caches in S3: is this configuration's cache complete there (a warm start), and saving it
after the server is ready (one Job per node, ``render_cache_save_job``), and what the pod found."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from botocore.exceptions import ClientError
from kubernetes import client as k8s
from prefect.cache_policies import NO_CACHE

from capserve.core.cluster.settings import KubeSettings
from capserve.core.rollout.cache import CACHE_MARKER, CacheOutcome, cache_outcome, render_cache_save_job
from capserve.core.rollout.workload import RenderedRollout
from capserve.core.weights.settings import WeightsSettings
from capserve.tasks import aws
from capserve.tasks.kube import apply_job, wait_workloads_ready
from capserve.tasks.resilience import kube_task, s3_task

PREPARE_CONTAINER = "prepare-node"


def _split(uri: str) -> tuple[str, str]:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return bucket, key


@s3_task(name="compile-cache-complete", cache_policy=NO_CACHE)
def cache_complete(uri: str, nodes: int, region: str) -> bool:
    """True when S3 holds a complete cache (its marker) for every layout node under ``uri``."""
    s3 = aws.client("s3", region)
    bucket, prefix = _split(uri)
    for node in range(nodes):
        try:
            s3.head_object(Bucket=bucket, Key=f"{prefix}node-{node}/{CACHE_MARKER}")
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            raise aws.convert(exc, f"looking for the compile cache at {uri}") from exc
    return True


@kube_task(name="compile-cache-outcome", cache_policy=NO_CACHE)
def pod_cache_outcome(api: k8s.ApiClient, namespace: str, pod: str) -> CacheOutcome | None:
    """What the pod's prepare container found: hit, miss or off (None when its log cannot be read)."""
    try:
        log: str = k8s.CoreV1Api(api).read_namespaced_pod_log(pod, namespace, container=PREPARE_CONTAINER)
    except k8s.ApiException:
        return None
    return cache_outcome(log)


def _layout_node(pod: dict[str, Any]) -> int:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return int(labels.get("leaderworkerset.sigs.k8s.io/worker-index", "0"))


@kube_task(name="save-compile-caches", cache_policy=NO_CACHE)
def save_caches(
    api: k8s.ApiClient,
    rendered: RenderedRollout,
    campaign_id: str,
    pods: Sequence[dict[str, Any]],
    weights: WeightsSettings,
    kube: KubeSettings,
    timeout_s: float,
) -> int:
    """One Job per layout node, on the node its pod of group 0 ran, uploading that node's cache; waits for them
    (at most ``timeout_s``).

    Returns the number of Jobs. Each Job is a no-op when S3 already has the node's complete cache. Raises when a
    Job fails or the wait runs out; the rollout flow calls it after the switch and reports that as a warning.
    """
    first_group = [
        p
        for p in pods
        if ((p.get("metadata") or {}).get("labels") or {}).get("leaderworkerset.sigs.k8s.io/group-index", "0") == "0"
    ]
    jobs = []
    for pod in sorted(first_group, key=_layout_node):
        node_name = (pod.get("spec") or {}).get("nodeName")
        if not node_name:
            continue
        job = render_cache_save_job(
            campaign_id=campaign_id,
            namespace=rendered.namespace,
            color=rendered.color,
            key=rendered.cache_key,
            uri=rendered.cache_uri,
            node_index=_layout_node(pod),
            kube_node=str(node_name),
            settings=weights,
        )
        apply_job(api, job)  # this colour's Job of an earlier configuration is made again
        jobs.append(job)
    if jobs:
        wait_workloads_ready(api, jobs, kube, timeout_s=timeout_s, what="compile-cache save Jobs")
    return len(jobs)
