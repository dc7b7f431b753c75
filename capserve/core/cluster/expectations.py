"""What bring-up applies to a new cluster and what it waits for there, assembled from the lease (pure).

The add-ons (device plugins on the GPU pool, controllers on the system pool), EKS's own workloads that
must come up (CoreDNS), and what "the GPU nodes are ready" means for this lease.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from capserve.core.catalog import get_instance_type
from capserve.core.cluster.addons import (
    Manifest,
    addons_to_wait_for,
    bootstrap_workloads,
    campaign_addon_options,
    lws_probe,
    render_addons,
)
from capserve.core.cluster.deadline import bring_up_budget
from capserve.core.cluster.efa import EfaNeeds
from capserve.core.cluster.eks import gpu_pool_selector
from capserve.core.cluster.readiness import NodeExpectation
from capserve.core.deadline import Deadline, StepBudget
from capserve.core.lease import Lease
from capserve.core.spec import CampaignSpec


@dataclass(frozen=True)
class ClusterExpectations:
    addons: list[Manifest]
    wait_for: list[Manifest]
    nodes: NodeExpectation
    # A LeaderWorkerSet to dry-run create once the add-ons are ready: it passes only through LWS's webhooks.
    lws_probe: Manifest | None = None


def cluster_expectations(
    campaign_id: str, lease: Lease, *, kind: str, system_pool: bool, efa: EfaNeeds, node_target: str = "nvme"
) -> ClusterExpectations:
    """The add-ons to apply, the workloads to wait for, and the GPU nodes the lease must show.

    ``efa`` is what the layout needs (``capserve.core.cluster.efa.efa_needs``): EFA devices and huge
    pages are required only when it spans nodes. The FSx CSI driver is rendered only for ``node_target: fsx``
    (weights on nodes' NVMe need no driver, and every add-on is an image pull and a readiness wait on paid nodes).
    """
    instance = get_instance_type(lease.instance_type)
    # No EFA device plugin either when nothing uses EFA: it would be one more thing to wait for on the block.
    options = campaign_addon_options(
        campaign_id, efa=efa.used, system_pool=system_pool, region=lease.region, fsx=node_target == "fsx"
    )
    addons = render_addons(options)
    nodes = NodeExpectation(
        count=lease.instance_count,
        gpus_per_node=instance.gpus_per_node,
        efa_per_node=efa.devices,
        hugepages_2mi_mib=efa.hugepages_mib,
        node_labels=gpu_pool_selector(campaign_id),
        require_health_label=kind == "hyperpod",
    )
    return ClusterExpectations(
        addons=addons,
        wait_for=[*addons_to_wait_for(options, addons), *bootstrap_workloads()],
        nodes=nodes,
        lws_probe=lws_probe() if options.lws else None,
    )


def bring_up_steps(spec: CampaignSpec, lease: Lease, now: datetime) -> StepBudget:
    """Bring-up's budget (until drain − ``cluster.min_serving_minutes``), shared by its steps."""
    campaign_id = spec.campaign_id

    def expired(step: str) -> str:
        return (
            f"bring-up of campaign {campaign_id} stopped at {step}: too little of the reservation would be left for "
            "cluster.min_serving_minutes of serving"
        )

    return StepBudget(Deadline(bring_up_budget(spec, lease, now).total_seconds()), expired)
