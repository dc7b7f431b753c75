"""How the endpoint is reached: a ClusterIP Service on the leader, and optionally an internal NLB.

LeaderWorkerSet creates only a headless Service for its pods' DNS names, no client Service; ours
selects the leader pod of the serving colour (``capserve.io/rollout`` + ``capserve.io/role: leader``)
on port 8000. Blue/green switches traffic by changing that selector to the new colour.

``internal-nlb`` (spec ``serving.endpoint_access``) adds a ``type: LoadBalancer`` Service that the AWS
Load Balancer Controller turns into a Network Load Balancer: ``aws-load-balancer-type: external``
with IP targets (straight to the pod; VPC CNI), scheme ``internal`` written out although it is the
default, and health checks on ``/health`` over HTTP (no API key needed there). It is a separate
Service because the type annotation must never be added to an existing one (docs/serving.md §5.4).
Nothing is internet-facing; ``port-forward`` exposes nothing at all.
"""

from __future__ import annotations

from typing import Any

from capserve.core.rollout.names import (
    ENDPOINT_SERVICE,
    NLB_SERVICE,
    ROLE_LABEL,
    ROLLOUT_LABEL,
    base_labels,
)
from capserve.core.rollout.settings import RolloutSettings

_LB = "service.beta.kubernetes.io/aws-load-balancer-"
NLB_ANNOTATIONS = {
    f"{_LB}type": "external",
    f"{_LB}nlb-target-type": "ip",
    f"{_LB}scheme": "internal",
    f"{_LB}healthcheck-protocol": "http",
    f"{_LB}healthcheck-path": "/health",
    f"{_LB}healthcheck-port": "traffic-port",
}


def leader_selector(workload: str) -> dict[str, str]:
    """The pods a Service sends traffic to: the leader of each group of ``workload``."""
    return {ROLLOUT_LABEL: workload, ROLE_LABEL: "leader"}


def _service(name: str, namespace: str, campaign_id: str, workload: str, settings: RolloutSettings) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": base_labels(campaign_id)},
        "spec": {
            "selector": leader_selector(workload),
            "ports": [{"name": "http", "port": settings.port, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def endpoint_services(
    namespace: str,
    campaign_id: str,
    workload: str,
    *,
    access: str,
    settings: RolloutSettings | None = None,
) -> list[dict[str, Any]]:
    """The Services that point at ``workload``'s leader: always the ClusterIP one, plus the NLB if asked."""
    settings = settings or RolloutSettings()
    cluster_ip = _service(ENDPOINT_SERVICE, namespace, campaign_id, workload, settings)
    cluster_ip["spec"]["type"] = "ClusterIP"
    services = [cluster_ip]
    if access == "internal-nlb":
        nlb = _service(NLB_SERVICE, namespace, campaign_id, workload, settings)
        nlb["metadata"]["annotations"] = dict(NLB_ANNOTATIONS)
        nlb["spec"]["type"] = "LoadBalancer"
        services.append(nlb)
    return services


def switch_to(service: dict[str, Any], workload: str) -> dict[str, Any]:
    """The same Service selecting ``workload``'s leader instead (what blue/green applies to switch)."""
    switched = {**service, "spec": {**service["spec"], "selector": leader_selector(workload)}}
    return switched
