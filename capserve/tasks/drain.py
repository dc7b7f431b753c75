"""Stopping the campaign's serving workload from taking traffic (decisions: capserve.core.drain)."""

from __future__ import annotations

from typing import Any

from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError, ResourceNotFoundError
from prefect.cache_policies import NO_CACHE

from capserve.core.drain import SERVICE_KIND, SERVING_KINDS
from capserve.core.teardown.plan import is_workload, workload_selector
from capserve.tasks.kube import convert as kube_convert
from capserve.tasks.resilience import kube_task


def _labelled(dyn: DynamicClient, api_version: str, kind: str, campaign_id: str) -> list[dict[str, Any]]:
    try:
        resource = dyn.resources.get(api_version=api_version, kind=kind)
    except ResourceNotFoundError:
        return []  # the kind is not served (no LeaderWorkerSet CRD): nothing of it can exist
    try:
        listed: Any = resource.get(label_selector=workload_selector(campaign_id))
    except Exception as exc:
        raise kube_convert(exc, f"listing {kind} labelled {workload_selector(campaign_id)}") from exc
    items: list[dict[str, Any]] = listed.to_dict().get("items", [])
    return [item for item in items if is_workload((item.get("metadata") or {}).get("namespace"))]


@kube_task(name="remove-services", cache_policy=NO_CACHE)
def remove_services(dyn: DynamicClient, campaign_id: str) -> list[str]:
    """Delete the campaign's Services: no new connection reaches the pods. 'namespace/name' of each."""
    removed = []
    resource = None
    for item in _labelled(dyn, *SERVICE_KIND, campaign_id):
        meta = item["metadata"]
        resource = resource or dyn.resources.get(api_version=SERVICE_KIND[0], kind=SERVICE_KIND[1])
        try:
            resource.delete(name=meta["name"], namespace=meta["namespace"])
        except NotFoundError:
            continue  # gone already: what draining wants
        except Exception as exc:
            raise kube_convert(exc, f"deleting Service {meta['namespace']}/{meta['name']}") from exc
        removed.append(f"{meta['namespace']}/{meta['name']}")
    return removed


@kube_task(name="scale-serving-to-zero", cache_policy=NO_CACHE)
def scale_serving_to_zero(dyn: DynamicClient, campaign_id: str) -> list[str]:
    """Scale every serving workload of the campaign to 0 replicas. 'Kind namespace/name' of each."""
    scaled = []
    for api_version, kind in SERVING_KINDS:
        for item in _labelled(dyn, api_version, kind, campaign_id):
            meta = item["metadata"]
            resource = dyn.resources.get(api_version=api_version, kind=kind)
            try:
                resource.patch(
                    name=meta["name"], namespace=meta["namespace"], body={"spec": {"replicas": 0}},
                    content_type="application/merge-patch+json",
                )
            except NotFoundError:
                continue
            except Exception as exc:
                raise kube_convert(exc, f"scaling {kind} {meta['namespace']}/{meta['name']} to zero") from exc
            scaled.append(f"{kind} {meta['namespace']}/{meta['name']}")
    return scaled
