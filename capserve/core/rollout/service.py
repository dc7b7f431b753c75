"""How the endpoint is reached: a ClusterIP Service on the leader, reached through a port-forward.

LeaderWorkerSet creates only a headless Service for its pods' DNS names, no client Service; ours
selects the leader pod of the serving colour (``capserve.io/rollout`` + ``capserve.io/role: leader``)
on port 8000. Blue/green switches traffic by changing that selector to the new colour.

No load balancer: a ``type: LoadBalancer`` Service becomes an NLB only through the AWS Load Balancer
Controller, which capserve does not install, so the spec refuses ``serving.endpoint_access:
internal-nlb`` (docs/input.md, "Refused options"; docs/serving.md §5.4). Nothing is exposed.
"""

from __future__ import annotations

from typing import Any

from capserve.core.rollout.names import ENDPOINT_SERVICE, ROLE_LABEL, ROLLOUT_LABEL, base_labels
from capserve.core.rollout.settings import RolloutSettings


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
    """The Services that point at ``workload``'s leader: the ClusterIP one (``access`` is 'port-forward')."""
    if access != "port-forward":
        raise ValueError(f"endpoint access {access!r} is not supported: only 'port-forward'")
    settings = settings or RolloutSettings()
    cluster_ip = _service(ENDPOINT_SERVICE, namespace, campaign_id, workload, settings)
    cluster_ip["spec"]["type"] = "ClusterIP"
    return [cluster_ip]
