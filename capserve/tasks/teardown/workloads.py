"""The campaign's Kubernetes objects: list by label, delete, check gone (the plan's first phase)."""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError, ResourceNotFoundError

from capserve.core.teardown.inventory import ClusterFound, WorkloadFound
from capserve.core.teardown.plan import WORKLOAD_KINDS, is_workload, workload_selector
from capserve.tasks.kube import api_client_for_eks, dynamic_client
from capserve.tasks.kube import convert as kube_convert


def connect(cluster: ClusterFound, region: str) -> DynamicClient:
    """A dynamic client for the cluster (in memory, EKS token; see capserve.tasks.kube)."""
    if cluster.endpoint is None:
        raise ValueError(f"EKS cluster {cluster.name} has no endpoint")
    api: k8s.ApiClient = api_client_for_eks(cluster.endpoint, cluster.ca_data, cluster.name, region)
    return dynamic_client(api)


def list_workloads(dyn: DynamicClient, campaign_id: str) -> list[WorkloadFound]:
    """Every object of WORKLOAD_KINDS labelled with the campaign, in every namespace."""
    found: list[WorkloadFound] = []
    for api_version, kind in WORKLOAD_KINDS:
        try:
            resource = dyn.resources.get(api_version=api_version, kind=kind)
        except ResourceNotFoundError:
            continue  # the kind is not served (e.g. no LeaderWorkerSet CRD): nothing of it can exist
        try:
            listed: Any = resource.get(label_selector=workload_selector(campaign_id))
        except Exception as exc:
            raise kube_convert(exc, f"listing {kind} labelled {workload_selector(campaign_id)}") from exc
        for item in listed.to_dict().get("items", []):
            metadata = item.get("metadata") or {}
            if not is_workload(metadata.get("namespace")):
                continue
            found.append(
                WorkloadFound(
                    api_version=api_version, kind=kind, namespace=metadata.get("namespace"), name=metadata["name"]
                )
            )
    return found


def delete(dyn: DynamicClient, params: dict[str, Any]) -> bool:
    """Delete one object; True when it was already gone (404), every other error raises."""
    resource = dyn.resources.get(api_version=params["api_version"], kind=params["kind"])
    try:
        # Foreground: the object stays until its pods are gone, so "gone" below means really gone
        # (Kubernetes docs, "Garbage collection", foreground cascading deletion).
        resource.delete(name=params["name"], namespace=params["namespace"], propagation_policy="Foreground")
    except NotFoundError:
        return True
    return False


def is_gone(dyn: DynamicClient, params: dict[str, Any]) -> bool:
    resource = dyn.resources.get(api_version=params["api_version"], kind=params["kind"])
    try:
        resource.get(name=params["name"], namespace=params["namespace"])
    except NotFoundError:
        return True
    return False
