"""Run the bring-up network proof (``capserve.core.cluster.netcheck``): one short pod per GPU node.

Pods are made fresh each run (a run-unique name suffix), watched until each has passed or failed,
their logs read, and deleted whatever happened. Any failure raises ``PermanentError`` naming every
failing node and the path it lacks; nothing heavy has been scheduled yet, and nothing is torn down
here (the caller decides).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence
from typing import Any

import urllib3
from kubernetes import client as k8s
from prefect.cache_policies import NO_CACHE

from capserve.core.cluster import netcheck
from capserve.core.cluster.settings import KubeSettings
from capserve.core.errors import PermanentError
from capserve.tasks.kube import _resource, _watch_until, convert, dynamic_client
from capserve.tasks.resilience import kube_task


def _named(manifest: dict[str, Any], suffix: str) -> dict[str, Any]:
    metadata = {**manifest["metadata"], "name": f"{manifest['metadata']['name'][:54]}-{suffix}"}
    return {**manifest, "metadata": metadata}


@kube_task(name="prove-gpu-network", cache_policy=NO_CACHE)
def prove_gpu_network(
    api: k8s.ApiClient,
    nodes: Sequence[str],
    region: str,
    campaign_id: str,
    settings: KubeSettings,
    *,
    timeout_s: float,
) -> dict[str, list[str]]:
    """Each GPU node's pod resolves and reaches the API server and S3; returns the steps passed by node.

    Raises PermanentError naming each node whose check failed (or gave no answer within ``timeout_s``).
    """
    core = k8s.CoreV1Api(api)
    selector = f"{netcheck.NETCHECK_LABEL}={campaign_id}"
    suffix = secrets.token_hex(3)
    manifests = {node: _named(netcheck.netcheck_pod(node, region, campaign_id), suffix) for node in nodes}
    by_name = {m["metadata"]["name"]: node for node, m in manifests.items()}
    _delete_all(core, selector, settings)  # leftovers of an interrupted run
    try:
        for manifest in manifests.values():
            try:
                core.create_namespaced_pod(
                    netcheck.NAMESPACE,
                    manifest,  # type: ignore[arg-type]  # the client serialises plain dicts as they are
                    _request_timeout=settings.request_timeout_s,
                )
            except (k8s.ApiException, urllib3.exceptions.HTTPError) as exc:
                raise convert(exc, f"creating network check pod {manifest['metadata']['name']}") from exc
        dyn = dynamic_client(api)
        seen = _watch_until(
            dyn,
            _resource(dyn, "v1", "Pod"),
            done=lambda objects: all(
                netcheck.pod_outcome(objects.get(f"{netcheck.NAMESPACE}/{name}") or {})[0] != "pending"
                for name in by_name
            ),
            deadline=time.monotonic() + timeout_s,
            settings=settings,
            what="watch of the network check pods",
            namespace=netcheck.NAMESPACE,
            label_selector=selector,
        )
        passed: dict[str, list[str]] = {}
        problems: list[str] = []
        for name, node in sorted(by_name.items(), key=lambda item: item[1]):
            pod = seen.get(f"{netcheck.NAMESPACE}/{name}") or {}
            outcome, detail = netcheck.pod_outcome(pod)
            finished = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
            log_text = _log(core, name, settings) if finished else ""
            if outcome == "passed":
                passed[node] = netcheck.passed_steps(log_text)
            elif outcome == "failed":
                problems.append(f"{node}: {'; '.join(netcheck.failures(log_text)) or detail}")
            else:
                problems.append(f"{node}: no answer within {timeout_s:g} s ({detail})")
    finally:
        _delete_all(core, selector, settings)
    if problems:
        raise PermanentError(
            f"network proof failed on {len(problems)} of {len(nodes)} GPU node(s): " + " | ".join(problems)
            + ". GPU pods need DNS through CoreDNS (the cluster security group on the GPU interfaces) and a "
            "route to S3 (NAT gateway or S3 gateway endpoint) before the weights can be staged"
        )
    return passed


def _log(core: k8s.CoreV1Api, name: str, settings: KubeSettings) -> str:
    try:
        return str(core.read_namespaced_pod_log(name, netcheck.NAMESPACE, _request_timeout=settings.request_timeout_s))
    except (k8s.ApiException, urllib3.exceptions.HTTPError):
        return ""  # the verdict then falls back to the pod's status


def _delete_all(core: k8s.CoreV1Api, selector: str, settings: KubeSettings) -> None:
    try:
        pods = core.list_namespaced_pod(
            netcheck.NAMESPACE, label_selector=selector, _request_timeout=settings.request_timeout_s
        )
        for pod in pods.items:
            if pod.metadata is None or not pod.metadata.name:
                continue
            try:
                core.delete_namespaced_pod(
                    str(pod.metadata.name), netcheck.NAMESPACE, grace_period_seconds=0,
                    _request_timeout=settings.request_timeout_s,
                )
            except k8s.ApiException as exc:
                if exc.status != 404:
                    raise
    except (k8s.ApiException, urllib3.exceptions.HTTPError) as exc:
        raise convert(exc, "deleting the network check pods") from exc
