"""The bring_up stage: a Kubernetes cluster whose GPU nodes run on the lease's reservation, proven usable.

EKS: network → IAM roles → control plane → system node group → capacity-block launch template →
CAPACITY_BLOCK node group.
HyperPod: network → IAM roles → EKS control plane (the orchestrator) → system node group → HyperPod
cluster on the training plan.
Then, for both: a Kubernetes client (in memory, EKS token) → add-ons applied → every GPU node Ready with
its GPUs (and EFA devices) allocatable → add-ons and EKS's CoreDNS ready (on the system nodes: the GPU
nodes are tainted).

Every AWS step converges (finds by campaign tag/name, creates only what is missing), so re-running the
flow on a cluster that exists creates nothing. Bring-up refuses to start, and stops, once the lease's
drain point is too near for ``cluster.min_serving_minutes`` of serving (``DeadlineError``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

from prefect import flow, get_run_logger

from capserve.core.catalog import get_instance_type
from capserve.core.cluster.addons import bootstrap_workloads, campaign_addon_options, render_addons
from capserve.core.cluster.deadline import bring_up_budget
from capserve.core.cluster.eks import gpu_pool_selector
from capserve.core.cluster.naming import ClusterNames
from capserve.core.cluster.readiness import NodeExpectation
from capserve.core.cluster.result import ClusterResult, SystemPool
from capserve.core.cluster.settings import BringUpSettings
from capserve.core.errors import CapserveError, DeadlineError
from capserve.core.lease import Lease
from capserve.core.spec import CampaignSpec
from capserve.tasks.cluster.eks import (
    converge_cluster,
    converge_launch_template,
    converge_nodegroup,
    converge_system_nodegroup,
    existing_cluster,
)
from capserve.tasks.cluster.hyperpod import converge_hyperpod
from capserve.tasks.cluster.iam import converge_roles
from capserve.tasks.cluster.network import converge_network
from capserve.tasks.kube import api_client_for_eks, apply_addons, wait_addons_ready, wait_gpu_nodes_ready


class _Deadline:
    """The bring-up budget on a monotonic clock: caps every wait, turns a late failure into DeadlineError."""

    def __init__(self, budget: timedelta, campaign_id: str) -> None:
        self._end = time.monotonic() + budget.total_seconds()
        self._campaign_id = campaign_id

    def remaining(self) -> float:
        return self._end - time.monotonic()

    def cap(self, timeout_s: float, step: str) -> float:
        left = self.remaining()
        if left <= 0:
            raise DeadlineError(self._message(step))
        return min(timeout_s, left)

    @contextmanager
    def step(self, step: str) -> Iterator[None]:
        self.cap(1.0, step)
        try:
            yield
        except CapserveError as exc:
            if self.remaining() <= 0 and not isinstance(exc, DeadlineError):
                raise DeadlineError(f"{self._message(step)} ({exc})") from exc
            raise

    def _message(self, step: str) -> str:
        return (
            f"bring-up of campaign {self._campaign_id} stopped at {step}: too little of the reservation would be "
            "left for cluster.min_serving_minutes of serving"
        )


@flow(name="bring-up", validate_parameters=True)
def bring_up(
    spec: CampaignSpec,
    lease: Lease,
    settings: BringUpSettings | None = None,
    now: datetime | None = None,
) -> ClusterResult:
    """Bring up (or find) the campaign's cluster on ``lease`` and wait until every GPU node is usable.

    ``now`` is the wall-clock instant the deadline rule is judged at (default: the current time; the
    sandbox passes its clock's).
    """
    logger = get_run_logger()
    settings = settings or BringUpSettings()
    campaign_id, region, kind = spec.campaign_id, lease.region, spec.cluster.kind
    deadline = _Deadline(bring_up_budget(spec, lease, now or datetime.now(UTC)), campaign_id)
    names = ClusterNames(campaign_id=campaign_id)
    instance = get_instance_type(lease.instance_type)
    created: list[str] = []
    poll = settings.poll_seconds
    system_pool: SystemPool | None = None

    if spec.cluster.existing_cluster_name:
        # An existing cluster is only used, never changed: its GPU nodes must already carry the campaign's labels.
        with deadline.step("existing cluster"):
            cluster = existing_cluster(
                spec.cluster.existing_cluster_name,
                region,
                timeout_s=deadline.cap(settings.cluster_active_timeout_s, "existing cluster"),
                poll_s=poll,
            )
        gpu_pool = names.nodegroup
    else:
        with deadline.step("network"):
            network = converge_network(campaign_id, region, lease.availability_zone, settings.vpc_cidr)
        with deadline.step("IAM roles"):
            cache_bucket = spec.weights.s3_bucket if spec.serving.compile_cache else None
            roles = converge_roles(
                campaign_id,
                kind,
                region,
                compile_cache_bucket=cache_bucket,
                compile_cache_prefix=spec.weights.s3_prefix,
            )
        with deadline.step("EKS control plane"):
            cluster = converge_cluster(
                campaign_id,
                region,
                kubernetes_version=spec.cluster.kubernetes_version,
                role_arn=roles.by_component["eks-cluster-role"],
                subnet_ids=list(network.subnet_ids),
                security_group_id=network.security_group_id,
                timeout_s=deadline.cap(settings.cluster_active_timeout_s, "EKS control plane"),
                poll_s=poll,
            )
        created += [*network.created, *roles.created, *cluster.created]
        # CoreDNS and the controllers need untainted nodes: the system group must be ACTIVE before add-ons.
        with deadline.step("system node group"):
            system_pool = converge_system_nodegroup(
                campaign_id,
                region,
                cluster_name=cluster.name,
                node_role_arn=roles.by_component["eks-node-role"],
                subnet_ids=list(network.subnet_ids),
                instance_type=settings.system_instance_type,
                node_count=settings.system_node_count,
                timeout_s=deadline.cap(settings.system_nodegroup_active_timeout_s, "system node group"),
                poll_s=poll,
            )
        created += system_pool.created
        if kind == "eks":
            with deadline.step("GPU node group"):
                template = converge_launch_template(campaign_id, lease, network.security_group_id)
                created += template.created
                created += converge_nodegroup(
                    campaign_id,
                    lease,
                    cluster_name=cluster.name,
                    node_role_arn=roles.by_component["eks-node-role"],
                    subnet_id=network.node_subnet_id,
                    launch_template=template,
                    timeout_s=deadline.cap(settings.nodegroup_active_timeout_s, "GPU node group"),
                    poll_s=poll,
                )
            gpu_pool = names.nodegroup
        else:
            with deadline.step("HyperPod cluster"):
                created += converge_hyperpod(
                    campaign_id,
                    lease,
                    settings,
                    eks_cluster_arn=cluster.arn,
                    execution_role_arn=roles.by_component["hyperpod-execution-role"],
                    subnet_id=network.node_subnet_id,
                    security_group_id=network.security_group_id,
                    timeout_s=deadline.cap(settings.hyperpod_in_service_timeout_s, "HyperPod cluster"),
                )
            gpu_pool = names.hyperpod_cluster
    logger.info("cluster %s is up; created this run: %s", cluster.name, ", ".join(created) or "nothing")

    api = api_client_for_eks(cluster.endpoint, cluster.ca_data, cluster.name, region, settings=settings.kube)
    manifests = render_addons(
        campaign_addon_options(campaign_id, efa=bool(instance.efa_card_indices), system_pool=system_pool is not None)
    )
    expectation = NodeExpectation(
        count=lease.instance_count,
        gpus_per_node=instance.gpus_per_node,
        efa_per_node=len(instance.efa_card_indices),
        node_labels=gpu_pool_selector(campaign_id),
        require_health_label=kind == "hyperpod",
    )
    with deadline.step("add-ons"):
        apply_addons(api, manifests, settings.kube)
    with deadline.step("GPU nodes"):
        kube = settings.kube.model_copy(
            update={"nodes_ready_timeout_s": deadline.cap(settings.kube.nodes_ready_timeout_s, "GPU nodes")}
        )
        readiness = wait_gpu_nodes_ready(api, expectation, kube)
    with deadline.step("add-ons ready"):
        kube = settings.kube.model_copy(
            update={"addons_ready_timeout_s": deadline.cap(settings.kube.addons_ready_timeout_s, "add-ons ready")}
        )
        wait_addons_ready(api, [*manifests, *bootstrap_workloads()], kube)

    return ClusterResult(
        kind=kind,
        name=cluster.name,
        region=region,
        endpoint=cluster.endpoint,
        ca_data=cluster.ca_data,
        gpu_pool=gpu_pool,
        nodes_ready=readiness.ready_nodes,
        gpus_allocatable=readiness.gpus_allocatable,
        node_names=tuple(node.name for node in readiness.nodes if node.ready),
        node_storage_bytes=readiness.storage_by_node,
        system_pool=system_pool,
        created=tuple(created),
    )
