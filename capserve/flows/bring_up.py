"""The bring_up stage: a Kubernetes cluster whose GPU nodes run on the lease's reservation, proven usable.

EKS: network (docs/aws-network.md: GPU nodes in a private subnet behind a NAT gateway, the control plane
and system nodes in public subnets of zones EKS allows) → IAM roles → control plane → access entries → system
node group → capacity-block launch template → CAPACITY_BLOCK node group.
HyperPod: network → IAM roles → EKS control plane (the orchestrator) → access entries → system node group →
HyperPod dependencies on the EKS cluster and the lifecycle script in S3 → HyperPod cluster on the training plan.
Then, for both: a Kubernetes client (in memory, EKS token) → add-ons applied → every GPU node Ready with
its GPUs (and, for a layout across nodes, EFA devices and huge pages) allocatable → add-ons and EKS's
CoreDNS ready (on the system nodes: the GPU nodes are tainted) → the network proof: a short pod on each GPU
node resolves and reaches the API server and the region's S3 (``capserve.core.cluster.netcheck``), so a missing
route or security-group rule fails here, naming the node, instead of in staging.

Every AWS step converges (finds by campaign tag/name, creates only what is missing), so re-running the
flow on a cluster that exists creates nothing. Bring-up refuses to start, and stops, once the lease's
drain point is too near for ``cluster.min_serving_minutes`` of serving (``DeadlineError``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from prefect import flow, get_run_logger
from prefect.utilities.annotations import quote

from capserve.campaign.run_names import stage_run_name
from capserve.core.catalog import get_instance_type
from capserve.core.cluster.efa import EfaNeeds, efa_needs
from capserve.core.cluster.expectations import ClusterExpectations, bring_up_steps, cluster_expectations
from capserve.core.cluster.hyperpod import cluster_security_groups as hyperpod_security_groups
from capserve.core.cluster.hyperpod import dependencies as hyperpod_dependencies
from capserve.core.cluster.naming import ClusterNames
from capserve.core.cluster.network import NetworkIds
from capserve.core.cluster.readiness import Readiness
from capserve.core.cluster.result import ClusterResult, NodeJoin, SystemPool
from capserve.core.cluster.settings import BringUpSettings
from capserve.core.deadline import StepBudget
from capserve.core.lease import Lease
from capserve.core.spec import CampaignSpec
from capserve.core.timeline import node_join_s
from capserve.tasks.cluster.eks import (
    EksCluster,
    converge_access_entries,
    converge_cluster,
    converge_launch_template,
    converge_nodegroup,
    converge_system_nodegroup,
    existing_cluster,
)
from capserve.tasks.cluster.hyperpod import converge_hyperpod, converge_lifecycle_scripts
from capserve.tasks.cluster.iam import RoleArns, converge_roles
from capserve.tasks.cluster.network import converge_network
from capserve.tasks.kube import (
    KubeApi,
    api_client_for_eks,
    apply_addons,
    prove_lws_webhooks,
    wait_addons_ready,
    wait_gpu_nodes_ready,
)
from capserve.tasks.netcheck import prove_gpu_network
from capserve.tasks.settings import settings_for
from capserve.tasks.the_clock import clock


@dataclass
class _AwsSide:
    """What the AWS steps produced: the control plane, the GPU pool's name, the system pool, what was created."""

    cluster: EksCluster
    gpu_pool: str
    system_pool: SystemPool | None = None
    created: list[str] = field(default_factory=list)
    network: NetworkIds | None = None
    gpu_interface_security_groups: tuple[str, ...] = ()
    scaled_at: datetime | None = None  # when the GPU group made before the block was scaled to the lease's count


@flow(name="bring-up", flow_run_name=stage_run_name("bring-up"), validate_parameters=True)
def bring_up(
    spec: CampaignSpec,
    lease: Lease,
    settings: BringUpSettings | None = None,
    nodes_per_replica: int | None = None,
) -> ClusterResult:
    """Bring up (or find) the campaign's cluster on ``lease`` and wait until every GPU node is usable.

    The deadline rule is judged at the campaign's clock's now (``capserve.tasks.the_clock``).
    ``nodes_per_replica`` is the plan's (EFA and huge pages only when it is
    above 1); unknown, it is taken as the lease's instance count, the widest layout the lease could hold.
    """
    settings = settings or settings_for(spec).bring_up
    began = clock().now()
    budget = bring_up_steps(spec, lease, began)
    efa = _efa(lease, nodes_per_replica)
    if spec.cluster.existing_cluster_name:
        aws = _existing(spec.cluster.existing_cluster_name, spec, lease, settings, budget)
    else:
        aws = _converge_aws(spec, lease, settings, budget, efa)
    get_run_logger().info(
        "cluster %s is up; created this run: %s", aws.cluster.name, ", ".join(aws.created) or "nothing"
    )
    readiness = _ready_on_kubernetes(spec, lease, settings, budget, aws, efa)
    joined = NodeJoin.of(readiness, began_at=began, usable_at=clock().now(),
                         predicted_s=node_join_s(deep_health_checks=spec.cluster.kind == "hyperpod" and efa.used),
                         scaled_at=aws.scaled_at)
    cluster = aws.cluster
    return ClusterResult(
        kind=spec.cluster.kind,
        name=cluster.name,
        region=lease.region,
        endpoint=cluster.endpoint,
        ca_data=cluster.ca_data,
        gpu_pool=aws.gpu_pool,
        nodes_ready=readiness.ready_nodes,
        gpus_allocatable=readiness.gpus_allocatable,
        node_names=tuple(node.name for node in readiness.nodes if node.ready),
        node_storage_bytes=readiness.storage_by_node,
        system_pool=aws.system_pool,
        network=aws.network,
        gpu_interface_security_groups=aws.gpu_interface_security_groups,
        created=tuple(aws.created),
        node_join=joined,
    )


def _existing(name: str, spec: CampaignSpec, lease: Lease, settings: BringUpSettings, budget: StepBudget) -> _AwsSide:
    """An existing cluster is only used, never changed: its GPU nodes must already carry the campaign's labels."""
    with budget.step("existing cluster"):
        cluster = existing_cluster(
            name,
            lease.region,
            timeout_s=budget.cap(settings.cluster_active_timeout_s, "existing cluster"),
            poll_s=settings.poll_seconds,
        )
    return _AwsSide(cluster=cluster, gpu_pool=ClusterNames(campaign_id=spec.campaign_id).nodegroup)


@flow(name="prepare-cluster-resources", flow_run_name=stage_run_name("prepare-cluster-resources"),
      validate_parameters=True)
def prepare_cluster(
    spec: CampaignSpec,
    lease: Lease,
    settings: BringUpSettings | None = None,
    nodes_per_replica: int | None = None,
) -> tuple[str, tuple[str, ...]]:
    """Before the block: everything of the cluster that needs no GPU (network, IAM roles, the EKS control plane,
    access entries, the system node group) and, on EKS, the GPU node group at size 0 and the add-ons with their
    webhook proof, so that bring-up at the block's start only scales the group and waits for its nodes.
    Converges like bring-up (what exists is found, not made again). Returns the cluster's name and what this run
    created. ``nodes_per_replica``: the plan's, as for ``bring_up`` (the launch template depends on it)."""
    settings = settings or settings_for(spec).bring_up
    budget = bring_up_steps(spec, lease, clock().now())
    aws, roles = _control_side(spec, lease, settings, budget)
    if spec.cluster.kind == "eks":
        assert aws.network is not None  # noqa: S101 - the control side always builds (or finds) the network
        efa = _efa(lease, nodes_per_replica)
        _eks_pool(spec, lease, settings, budget, aws, _GpuPlace(roles=roles, network=aws.network, efa=efa),
                  before_block=True)
        _addons_ready(spec, lease, settings, budget, aws, efa)
    get_run_logger().info(
        "cluster %s prepared before the block; created this run: %s",
        aws.cluster.name,
        ", ".join(aws.created) or "nothing",
    )
    return aws.cluster.name, tuple(aws.created)


def _efa(lease: Lease, nodes_per_replica: int | None) -> EfaNeeds:
    """EFA devices and huge pages for the plan's layout; unknown, the widest layout the lease could hold."""
    return efa_needs(
        get_instance_type(lease.instance_type),
        nodes_per_replica if nodes_per_replica is not None else lease.instance_count,
    )


def _converge_aws(
    spec: CampaignSpec, lease: Lease, settings: BringUpSettings, budget: StepBudget, efa: EfaNeeds
) -> _AwsSide:
    aws, roles = _control_side(spec, lease, settings, budget)
    assert aws.network is not None  # noqa: S101 - the control side always builds (or finds) the network
    # The GPU nodes go in the private subnet: with one interface per EFA card they get no public address.
    place = _GpuPlace(roles=roles, network=aws.network, efa=efa)
    if spec.cluster.kind == "eks":
        _eks_pool(spec, lease, settings, budget, aws, place)
    else:
        _hyperpod_pool(spec, lease, settings, budget, aws, place)
    return aws


def _control_side(
    spec: CampaignSpec, lease: Lease, settings: BringUpSettings, budget: StepBudget
) -> tuple[_AwsSide, RoleArns]:
    """Network, IAM roles, control plane, access entries and system nodes: what the cluster needs before any GPU."""
    campaign_id, region = spec.campaign_id, lease.region
    with budget.step("network"):
        network = converge_network(
            campaign_id,
            region,
            lease.availability_zone,
            settings.vpc_cidr,
            nat_timeout_s=budget.cap(settings.nat_gateway_available_timeout_s, "network"),
            poll_s=settings.poll_seconds,
        )
    with budget.step("IAM roles"):
        roles = converge_roles(
            campaign_id,
            spec.cluster.kind,
            region,
            compile_cache_bucket=spec.weights.s3_bucket if spec.serving.compile_cache else None,
            compile_cache_prefix=spec.weights.s3_prefix,
            weights_bucket=spec.weights.s3_bucket,
            weights_prefix=spec.weights.s3_prefix,
        )
    with budget.step("EKS control plane"):
        cluster = converge_cluster(
            campaign_id,
            region,
            kubernetes_version=spec.cluster.kubernetes_version,
            role_arn=roles.by_component["eks-cluster-role"],
            subnet_ids=list(network.control_plane_subnet_ids),
            security_group_id=network.security_group_id,
            timeout_s=budget.cap(settings.cluster_active_timeout_s, "EKS control plane"),
            poll_s=settings.poll_seconds,
        )
    # The principals the scheduled runs and the reaper use, when not this one: without an access entry
    # their Kubernetes calls (drain, teardown of the workloads) would be refused.
    with budget.step("cluster access"):
        access_created = converge_access_entries(campaign_id, region, cluster.name, spec.cluster.admin_principals)
    # CoreDNS and the controllers need untainted nodes: the system group must be ACTIVE before add-ons.
    with budget.step("system node group"):
        system_pool = converge_system_nodegroup(
            campaign_id,
            region,
            cluster_name=cluster.name,
            node_role_arn=roles.by_component["eks-node-role"],
            subnet_ids=list(network.control_plane_subnet_ids),
            instance_type=settings.system_instance_type,
            node_count=settings.system_node_count,
            timeout_s=budget.cap(settings.system_nodegroup_active_timeout_s, "system node group"),
            poll_s=settings.poll_seconds,
        )
    aws = _AwsSide(cluster=cluster, gpu_pool="", system_pool=system_pool, network=network)
    aws.created += [*network.created, *roles.created, *cluster.created, *access_created, *system_pool.created]
    return aws, roles


@dataclass(frozen=True)
class _GpuPlace:
    """Where the GPU nodes go and as whom: the private subnet and campaign group (one interface per EFA card
    gets no public address), the roles, and the EFA devices and huge pages the plan's layout needs."""

    roles: RoleArns
    network: NetworkIds
    efa: EfaNeeds


def _eks_pool(
    spec: CampaignSpec,
    lease: Lease,
    settings: BringUpSettings,
    budget: StepBudget,
    aws: _AwsSide,
    place: _GpuPlace,
    *,
    before_block: bool = False,
) -> None:
    """An EKS managed node group on the Capacity Block, through the campaign's launch template: made at size 0
    ``before_block``, scaled to the lease's count (or made at it) at the block."""
    with budget.step("GPU node group"):
        # The cluster security group beside the campaign's: CoreDNS on the system nodes admits only it.
        template = converge_launch_template(
            spec.campaign_id,
            lease,
            place.network.security_group_id,
            cluster_security_group_id=aws.cluster.cluster_security_group_id,
            hugepages_2mi_pages=place.efa.hugepages_2mi_pages,
            uses_efa=place.efa.used,
        )
        aws.created += template.created
        aws.gpu_interface_security_groups = template.security_group_ids
        pool = converge_nodegroup(
            spec.campaign_id,
            lease,
            cluster_name=aws.cluster.name,
            node_role_arn=place.roles.by_component["eks-node-role"],
            subnet_id=place.network.gpu_subnet_id,
            launch_template=template,
            timeout_s=budget.cap(settings.nodegroup_active_timeout_s, "GPU node group"),
            poll_s=settings.poll_seconds,
            before_block=before_block,
        )
        aws.created += pool.created
        aws.scaled_at = pool.scaled_at
        if pool.scaled_at is not None:
            get_run_logger().info("GPU node group made before the block scaled from %d to %d node(s)",
                                  pool.scaled_from or 0, lease.instance_count)
    aws.gpu_pool = ClusterNames(campaign_id=spec.campaign_id).nodegroup


def _hyperpod_pool(
    spec: CampaignSpec, lease: Lease, settings: BringUpSettings, budget: StepBudget, aws: _AwsSide, place: _GpuPlace
) -> None:
    """HyperPod on the training plan. Its prerequisites come first (docs/hyperpod.md): its dependencies on the
    EKS cluster, and the lifecycle script in a sagemaker- bucket. CreateCluster starts provisioning on the plan."""
    with budget.step("HyperPod prerequisites"):
        cluster = aws.cluster
        api = api_client_for_eks(cluster.endpoint, cluster.ca_data, cluster.name, lease.region, settings=settings.kube)
        apply_addons(api, quote(hyperpod_dependencies(lease.region, spec.campaign_id)), settings.kube)
        # HyperPod has no launch template: the lifecycle script allocates a multi-node layout's huge pages.
        lifecycle = converge_lifecycle_scripts(
            spec.campaign_id, lease.region, settings, hugepages_2mi_pages=place.efa.hugepages_2mi_pages
        )
        aws.created += lifecycle.created
    with budget.step("HyperPod cluster"):
        aws.created += converge_hyperpod(
            spec.campaign_id,
            lease,
            settings,
            eks_cluster_arn=aws.cluster.arn,
            execution_role_arn=place.roles.by_component["hyperpod-execution-role"],
            subnet_id=place.network.gpu_subnet_id,
            security_group_id=place.network.security_group_id,
            lifecycle_uri=lifecycle.uri,
            timeout_s=budget.cap(settings.hyperpod_in_service_timeout_s, "HyperPod cluster"),
            spans_nodes=place.efa.used,
        )
    # HyperPod's VpcConfig.SecurityGroupIds: the campaign's group and the EKS cluster group (docs/hyperpod.md §7).
    aws.gpu_interface_security_groups = tuple(
        hyperpod_security_groups(place.network.security_group_id, aws.cluster.cluster_security_group_id)
    )
    aws.gpu_pool = ClusterNames(campaign_id=spec.campaign_id).hyperpod_cluster


def _ready_on_kubernetes(
    spec: CampaignSpec, lease: Lease, settings: BringUpSettings, budget: StepBudget, aws: _AwsSide, efa: EfaNeeds
) -> Readiness:
    """Add-ons applied, every GPU node Ready with its devices, add-ons and CoreDNS ready: each wait capped by
    what is left of the budget. Add-ons the prepare run applied are found unchanged (server-side apply)."""
    api, expect = _kube(spec, lease, settings, aws, efa)
    kube = settings.kube
    with budget.step("add-ons"):
        # quote: Prefect would walk every manifest (CRDs' whole schemas) looking for futures, twice per call.
        apply_addons(api, quote(expect.addons), kube)
    with budget.step("GPU nodes"):
        capped = kube.model_copy(update={"nodes_ready_timeout_s": budget.cap(kube.nodes_ready_timeout_s, "GPU nodes")})
        readiness = wait_gpu_nodes_ready(api, expect.nodes, capped)
    _wait_addons(api, expect, settings, budget)
    # Before anything heavy lands on the GPU nodes: their pods resolve and reach the API server and S3.
    with budget.step("network proof"):
        prove_gpu_network(
            api,
            [node.name for node in readiness.nodes if node.ready],
            lease.region,
            spec.campaign_id,
            kube,
            timeout_s=budget.cap(kube.network_proof_timeout_s, "network proof"),
        )
    return readiness


def _kube(
    spec: CampaignSpec, lease: Lease, settings: BringUpSettings, aws: _AwsSide, efa: EfaNeeds
) -> tuple[KubeApi, ClusterExpectations]:
    """A Kubernetes client for the cluster, and what bring-up expects of it (add-ons, nodes, what to wait for)."""
    cluster = aws.cluster
    api = api_client_for_eks(cluster.endpoint, cluster.ca_data, cluster.name, lease.region, settings=settings.kube)
    expect = cluster_expectations(
        spec.campaign_id,
        lease,
        kind=spec.cluster.kind,
        system_pool=aws.system_pool is not None,
        efa=efa,
        node_target=spec.weights.node_target,
    )
    return api, expect


def _wait_addons(
    api: KubeApi, expect: ClusterExpectations, settings: BringUpSettings, budget: StepBudget
) -> None:
    """The add-ons and CoreDNS ready, and LWS's webhooks answering."""
    kube = settings.kube
    with budget.step("add-ons ready"):
        capped = kube.model_copy(
            update={"addons_ready_timeout_s": budget.cap(kube.addons_ready_timeout_s, "add-ons ready")}
        )
        wait_addons_ready(api, quote(expect.wait_for), capped)
        if expect.lws_probe is not None:
            # Ready pods are not yet a working LWS: its webhooks must answer (a dry run stores nothing).
            prove_lws_webhooks(api, expect.lws_probe, kube)


def _addons_ready(
    spec: CampaignSpec, lease: Lease, settings: BringUpSettings, budget: StepBudget, aws: _AwsSide, efa: EfaNeeds
) -> None:
    """Before the block: the add-ons applied and ready on the system nodes (the GPU ones' DaemonSets have no node
    yet), LWS's webhooks proven, so the block's bring-up finds them done (docs/timeline.md books them before it)."""
    api, expect = _kube(spec, lease, settings, aws, efa)
    with budget.step("add-ons"):
        apply_addons(api, quote(expect.addons), settings.kube)
    _wait_addons(api, expect, settings, budget)
