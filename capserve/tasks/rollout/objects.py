"""The rollout's objects on the cluster: the API-key Secret, the workload, its Services, deletes.

Everything is server-side applied with the one field manager (``capserve.tasks.kube.apply``), so a
re-run converges on what is there. Deletes tolerate only NotFound.
"""

from __future__ import annotations

import base64
import secrets
import time
from collections.abc import Mapping, Sequence
from typing import Any

from kubernetes import client as k8s
from prefect.cache_policies import NO_CACHE
from pydantic import SecretStr

from capserve.core.cluster.settings import KubeSettings
from capserve.core.rollout.names import API_KEY_SECRET, API_KEY_SECRET_KEY, ROLLOUT_LABEL
from capserve.core.rollout.secret import api_key_secret
from capserve.core.rollout.workload import LWS_API_VERSION
from capserve.core.tags import CAMPAIGN_TAG
from capserve.tasks.kube import _resource, _watch_until, apply, convert, dynamic_client
from capserve.tasks.resilience import kube_task
from capserve.tasks.secrets import register_secret
from capserve.tasks.waiting import wait_timeout

REVISION_LABEL = "capserve.io/revision"


@kube_task(name="ensure-endpoint-api-key", cache_policy=NO_CACHE)
def ensure_api_key(api: k8s.ApiClient, namespace: str, campaign_id: str) -> SecretStr:
    """The endpoint's API key: the one in the campaign's Secret, or a new random one created there.

    Kept across runs of the campaign (pods read the key when they start, so a new key would lock
    out a workload that keeps running). The value never leaves memory except to the API server;
    the manifest written to ``manifests/`` shows ``<redacted>``.
    """
    core = k8s.CoreV1Api(api)
    try:
        found = core.read_namespaced_secret(API_KEY_SECRET, namespace)
        encoded = (found.data or {}).get(API_KEY_SECRET_KEY)
    except k8s.ApiException as exc:
        if exc.status != 404:
            raise convert(exc, f"reading Secret {namespace}/{API_KEY_SECRET}") from exc
        encoded = None
    if encoded:
        key = SecretStr(base64.b64decode(encoded).decode("utf-8"))
    else:
        key = SecretStr(secrets.token_hex(32))  # no '-' or '_': any client or parser takes it as it is
        apply(api, api_key_secret(namespace, campaign_id, key))
    register_secret(key.get_secret_value())  # never in a log line or a report
    return key


@kube_task(name="apply-rollout", cache_policy=NO_CACHE)
def apply_objects(api: k8s.ApiClient, manifests: Sequence[Mapping[str, Any]]) -> None:
    """Server-side apply each object, in order."""
    for manifest in manifests:
        apply(api, manifest)


@kube_task(name="serving-workloads", cache_policy=NO_CACHE)
def serving_workloads(api: k8s.ApiClient, namespace: str, campaign_id: str) -> dict[str, str]:
    """The campaign's LeaderWorkerSets on the cluster: name → revision label."""
    dyn = dynamic_client(api)
    resource = _resource(dyn, LWS_API_VERSION, "LeaderWorkerSet")
    try:
        listing = resource.get(namespace=namespace, label_selector=f"{CAMPAIGN_TAG}={campaign_id}").to_dict()
    except Exception as exc:
        raise convert(exc, f"listing LeaderWorkerSets in {namespace}") from exc
    return {
        str(item["metadata"]["name"]): str((item["metadata"].get("labels") or {}).get(REVISION_LABEL, ""))
        for item in listing.get("items") or []
    }


@kube_task(name="delete-workload", cache_policy=NO_CACHE)
def delete_workload(api: k8s.ApiClient, namespace: str, name: str, settings: KubeSettings, timeout_s: float) -> None:
    """Delete the LeaderWorkerSet ``name`` (gone already is fine) and watch until its pods are gone,
    so that the GPUs they held are free for what comes next (recreate)."""
    dyn = dynamic_client(api)
    resource = _resource(dyn, LWS_API_VERSION, "LeaderWorkerSet")
    try:
        resource.delete(name=name, namespace=namespace, body={"propagationPolicy": "Foreground"})
    except Exception as exc:
        if getattr(exc, "status", None) != 404:
            raise convert(exc, f"deleting LeaderWorkerSet {namespace}/{name}") from exc
    pods = _resource(dyn, "v1", "Pod")
    left = _watch_until(
        dyn,
        pods,
        done=lambda seen: not seen,
        deadline=time.monotonic() + timeout_s,
        settings=settings,
        what=f"watch of {name}'s pods",
        namespace=namespace,
        label_selector=f"{ROLLOUT_LABEL}={name}",
    )
    if left:
        raise wait_timeout(f"the pods of {namespace}/{name} to go", timeout_s, ", ".join(sorted(left)))
