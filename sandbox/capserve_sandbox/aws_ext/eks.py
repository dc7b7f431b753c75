"""moto extension for EKS: clusters and node groups that take time, and a Kubernetes API behind them.

What stock moto 5.2.5 gets wrong for bring-up (docs/sandbox.md §2.3): clusters and
node groups are born ACTIVE, the endpoint is a made-up https URL, no nodes ever appear. Here:

- clusters and node groups start ``CREATING`` and become ``ACTIVE`` after ``BEHAVIOUR.describes_until_active``
  describes, or once ``BEHAVIOUR.seconds_until_active`` have passed on the sandbox clock
  (``capserve_sandbox.clock.CLOCK``), whichever comes first;
- every cluster has its own fake Kubernetes, as every EKS cluster has its own API server
  (``capserve_sandbox.kube.clusters``): ``describe_cluster`` answers with that server's URL (and CA, when it
  has one; ``ENDPOINT_HOOKS``), so the production code connects to it exactly as it would to EKS, and
  ``delete_cluster`` deletes it (``CLUSTER_GONE_HOOKS``);
- when a cluster becomes ACTIVE, every hook in ``CLUSTER_HOOKS`` is called (the cluster's fake Kubernetes
  then creates what EKS runs by itself: CoreDNS, kube-proxy, aws-node);
- every cluster gets a cluster security group, as EKS creates one (``resourcesVpcConfig.clusterSecurityGroupId``:
  a real moto group in the cluster's VPC that admits all traffic from itself; EKS user guide, "View Amazon
  EKS security group requirements for clusters"), deleted with the cluster;
- when a node group (or a HyperPod instance group, see ``hyperpod.py``) becomes ACTIVE, every hook in
  ``NODE_HOOKS`` is called with what should join the cluster: instance type, labels, taints, and the
  node's storage as nodeadm would set it up from the launch template (``nodeadm.py``: NVMe RAID0 or the
  root volume). A template whose network interfaces EC2 would refuse on the type (``interface_refusal``)
  fails the node group (``CREATE_FAILED``, ``AsgInstanceLaunchFailures``); so does user data nodeadm
  cannot read (``NodeCreationFailure``); no node joins, as on EKS. ``attach_fake_kube`` registers the
  hooks that make the node group's own cluster's fake Kubernetes provision those nodes on the VPC as moto has it
  (``reachability.py``: routes, public IPv4, security groups decide what they and their pods reach), and
  remove them when their node group is deleted (``NODE_GONE_HOOKS``: EKS terminates the instances);
- ``CALLS`` records every AWS request the moto server handles (service, action), so tests can assert
  that a converged re-run created nothing.

State lives on moto's objects, so ``/moto-api/reset`` clears it; ``reset()`` restores the behaviour knobs.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from moto.core.responses import BaseResponse
from moto.eks.exceptions import InvalidParameterException
from moto.eks.models import EKSBackend

from capserve.core.cluster.efa import described_network_facts, layout_problems
from capserve.core.cluster.eks_versions import kubernetes_version_problem
from capserve_sandbox.aws_ext import capacity as capacity_ext
from capserve_sandbox.aws_ext.iam_rules import iam_enforcing
from capserve_sandbox.aws_ext.nodeadm import NodeConfigError, node_storage
from capserve_sandbox.aws_ext.reachability import MotoNetwork, PoolAttachment, nodegroup_attachment
from capserve_sandbox.clock import CLOCK
from capserve_sandbox.gates import GATES
from capserve_sandbox.kube.instances import CPU_TYPES, known_instance_type


@dataclass(frozen=True)
class NodePoolActivated:
    """A pool of instances that has just come up and should join a cluster as Kubernetes nodes."""

    cluster_name: str
    pool: str
    count: int
    instance_type: str
    labels: dict[str, str]
    taints: list[dict[str, str]]  # Kubernetes form: {"key", "value", "effect": "NoSchedule"}
    zone: str | None = None
    hyperpod: bool = False  # HyperPod nodes carry health labels (set by the fake Kubernetes server)
    local_storage: str | None = None  # nodeadm localStorage.strategy from the launch template's user data
    root_volume_gib: int = 20
    host_directories: tuple[str, ...] = ()  # directories the node's OS has mounted besides nodeadm's (HyperPod)
    instance_role_arn: str | None = None  # the role the instance's credentials (IMDS) are for; None: unchecked
    hugepages_2mi: int = 0  # 2 MiB huge pages the launch template's user data allocates at boot
    network: PoolAttachment | None = None  # where its instances sit in the VPC (reachability.py)
    reservation_id: str | None = None  # the capacity reservation its launch template targets (None: not known)


@dataclass(frozen=True)
class ModelledDurations:
    """How long EKS takes to make each resource ACTIVE on a simulated block: the time model's figures
    (``capserve.core.timeline.TimeFigures``; docs/timeline.md gives their sources)."""

    control_plane_s: float
    system_nodes_s: float
    gpu_nodes_s: float  # a Capacity Block node group: launch, boot, join and every GPU allocatable


@dataclass
class Behaviour:
    """How the sandbox's EKS (and HyperPod) resources move through their states."""

    describes_until_active: int = 2
    seconds_until_active: float = 600.0
    # On a simulated block: clusters and node groups take these durations on the block's clock, which skips
    # through them (``SandboxClock.skip_to``), instead of turning ACTIVE after a few describes.
    modelled: ModelledDurations | None = None


@dataclass(frozen=True)
class Call:
    service: str
    action: str
    path: str = ""  # the request path (REST APIs such as EKS name the cluster in it)
    at: float = 0.0  # time.time() when it arrived


@dataclass
class _CallLog:
    calls: list[Call] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


BEHAVIOUR = Behaviour()
NODE_HOOKS: list[Callable[[NodePoolActivated], None]] = []
# Called with (cluster name, node group name) once a node group is deleted: its instances are gone.
NODE_GONE_HOOKS: list[Callable[[str, str], None]] = []
CLUSTER_HOOKS: list[Callable[[str], None]] = []
# Called with an EKS cluster's name: the endpoint URL and CA data (or None) of that cluster's own Kubernetes API.
ENDPOINT_HOOKS: list[Callable[[str], tuple[str, str | None]]] = []
# Called with an EKS cluster's name once it is deleted: its Kubernetes API goes with it.
CLUSTER_GONE_HOOKS: list[Callable[[str], None]] = []
# Called with (EKS cluster name, (group, plural, namespace, name)): whether that Kubernetes object exists
# in the cluster (the fake Kubernetes server's store). HyperPod's CreateCluster checks its dependencies so.
KUBE_OBJECT_HOOKS: list[Callable[[str, tuple[str, str, str | None, str]], bool]] = []
_ATTACHED: list[Any] = []  # the ClusterKubes of each attach_fake_kube since the last reset()
_LOG = _CallLog()
_INSTALLED = False
_ACTIVE = "ACTIVE"
_CREATING = "CREATING"
_UPDATING = "UPDATING"

# EKS spells taint effects NO_SCHEDULE; Kubernetes NoSchedule (EKS API reference, Taint).
_EFFECTS = {"NO_SCHEDULE": "NoSchedule", "NO_EXECUTE": "NoExecute", "PREFER_NO_SCHEDULE": "PreferNoSchedule"}


def calls(service: str | None = None, prefix: str = "") -> list[Call]:
    """Recorded requests, optionally only one service's and only actions starting with ``prefix``."""
    with _LOG.lock:
        return [c for c in _LOG.calls if (service is None or c.service == service) and c.action.startswith(prefix)]


def clear_calls() -> None:
    with _LOG.lock:
        _LOG.calls.clear()


def reset() -> None:
    """Default behaviour, no hooks, empty call record (moto's own state: POST /moto-api/reset)."""
    global BEHAVIOUR
    BEHAVIOUR = Behaviour()
    NODE_HOOKS.clear()
    NODE_GONE_HOOKS.clear()
    CLUSTER_HOOKS.clear()
    ENDPOINT_HOOKS.clear()
    CLUSTER_GONE_HOOKS.clear()
    KUBE_OBJECT_HOOKS.clear()
    capacity_ext.TERMINATION_HOOKS.clear()
    _ATTACHED.clear()
    clear_calls()


def cluster_kubes() -> dict[str, Any]:
    """Each live EKS cluster's fake Kubernetes by cluster name (tests; empty when none is attached)."""
    return {name: kube for kubes in _ATTACHED for name, kube in kubes.live().items()}


def activation_due(created: datetime, describes: int, modelled_s: float | None = None) -> bool:
    behaviour = BEHAVIOUR
    waited = (CLOCK.now() - created).total_seconds()
    if modelled_s is not None:
        return waited >= modelled_s
    return describes >= behaviour.describes_until_active or waited >= behaviour.seconds_until_active


def _begin_modelled(resource: Any, token: str, seconds: float | None) -> None:
    """Start a resource's modelled duration when the sandbox plays a block (else it activates on describes)."""
    resource._capserve_modelled_s = seconds if seconds is not None and CLOCK.playing else None
    if resource._capserve_modelled_s is not None:
        # A stop the clock lands on, not one it holds at: the resource turns ACTIVE when a describe reads the clock.
        until = resource._capserve_created + timedelta(seconds=resource._capserve_modelled_s)
        CLOCK.skip_to(token, until, holds=False)


def _cluster_token(name: str) -> str:
    return f"eks-cluster:{name}"


def _nodegroup_token(cluster: str, nodegroup: str) -> str:
    return f"eks-nodegroup:{cluster}/{nodegroup}"


def fire_node_hooks(event: NodePoolActivated) -> None:
    for hook in list(NODE_HOOKS):
        hook(event)


def attach_fake_kube(kube: Any, *, failure: str | None = None) -> Callable[[NodePoolActivated], None]:
    """Give every EKS cluster its own fake Kubernetes (the first one ``kube``, a ``fake_kube()`` server, the next
    ones its siblings: ``capserve_sandbox.kube.clusters``), and make nodes join their own cluster's on activation.

    Capacity, devices and ephemeral storage per node come from the instance type and the launch
    template (``capserve_sandbox.kube.instances``); GPUs and EFA devices are advertised once their
    device plugins run there. ``failure`` is passed through to ``provision_nodes`` ("never-ready",
    "no-gpus", "health-check-failed"); it applies to GPU pools only. Returns the node hook.
    """
    from capserve_sandbox.kube.clusters import ClusterKubes

    networks: dict[str, MotoNetwork] = {}  # cluster name -> its VPC model, as its own nodes sit in it
    reservations: dict[tuple[str, str], str] = {}  # (cluster, pool) -> the capacity reservation it launched into

    def prepare(cluster_name: str, cluster_kube: Any) -> None:
        networks[cluster_name] = cluster_kube.network = MotoNetwork()

    kubes = ClusterKubes(kube, prepare)
    _ATTACHED.append(kubes)

    def provision(event: NodePoolActivated) -> None:
        where: dict[str, Any] = {"zone": event.zone} if event.zone else {}
        gpu_pool = known_instance_type(event.instance_type) and event.instance_type not in CPU_TYPES
        target = kubes.of(event.cluster_name)
        network = networks[event.cluster_name]
        cni_failure = None
        if event.network is not None:
            network.attach(event.pool, event.network)
            cni_failure = network.cni_failure(event.pool)
        if event.reservation_id:
            reservations[(event.cluster_name, event.pool)] = event.reservation_id
        target.provision_nodes(
            event.pool,
            event.count,
            instance_type=event.instance_type,
            labels=event.labels,
            taints=event.taints,
            failure=failure if gpu_pool else None,
            health_labels=event.hyperpod,
            local_storage=event.local_storage,
            root_volume_gib=event.root_volume_gib,
            host_directories=event.host_directories,
            instance_role_arn=event.instance_role_arn,
            hugepages_2mi=event.hugepages_2mi,
            cni_failure=cni_failure,
            **where,
        )

    def endpoint(cluster_name: str) -> tuple[str, str | None]:
        target = kubes.of(cluster_name)
        return target.url, getattr(target, "ca_data", None)

    def bootstrap(cluster_name: str) -> None:
        kubes.of(cluster_name).bootstrap_eks()

    def terminate(reservation: dict[str, Any]) -> list[str]:
        """EC2 terminates the block's instances: the nodes of the pools launched into it, in whatever cluster;
        pools whose reservation is not known (HyperPod's, tests' own) by the block's instance type."""
        launched = [key for key, rid in reservations.items() if rid == reservation.get("CapacityReservationId")]
        gone: list[str] = []
        for cluster_name, pool in launched:
            target = kubes.get(cluster_name)
            gone += target.remove_nodes(pool) if target is not None else []
        if not launched:
            for target in kubes.live().values() or [kube]:
                gone += target.terminate_instances(reservation["InstanceType"])
        return gone

    capacity_ext.TERMINATION_HOOKS.append(terminate)

    def remove(cluster_name: str, nodegroup_name: str) -> None:
        target = kubes.get(cluster_name)
        if target is not None:
            target.remove_nodes(nodegroup_name)  # their pods are then garbage-collected and stopped
        if cluster_name in networks:
            networks[cluster_name].detach(nodegroup_name)
        reservations.pop((cluster_name, nodegroup_name), None)

    def has_object(cluster_name: str, key: tuple[str, str, str | None, str]) -> bool:
        target = kubes.get(cluster_name)
        return target is not None and key in target.store.objects

    def gone(cluster_name: str) -> None:
        kubes.delete(cluster_name)
        networks.pop(cluster_name, None)

    NODE_HOOKS.append(provision)
    NODE_GONE_HOOKS.append(remove)
    CLUSTER_HOOKS.append(bootstrap)
    ENDPOINT_HOOKS.append(endpoint)
    CLUSTER_GONE_HOOKS.append(gone)
    KUBE_OBJECT_HOOKS.append(has_object)
    return provision


# ---------------------------------------------------------------- patches


def _record_calls() -> None:
    original = BaseResponse.call_action

    def call_action(self: BaseResponse) -> Any:
        try:
            action = str(self._get_action())
        except Exception:  # noqa: BLE001 - a request moto cannot route is still worth serving as moto would
            action = "?"
        path = str(getattr(self, "path", "") or "")
        with _LOG.lock:
            _LOG.calls.append(Call(service=str(self.service_name), action=action, path=path, at=time.time()))
        if action.startswith("Delete"):  # held before AWS deletes anything (fault matrix)
            GATES.wait("delete", f"{self.service_name}:{action}:{path}")
        return original(self)

    BaseResponse.call_action = call_action  # type: ignore[method-assign]


def subnet_zone(account_id: str, region: str, subnet_id: str) -> str | None:
    """The AZ of a sandbox subnet (None when moto does not know it)."""
    from moto.ec2.models import ec2_backends

    try:
        return str(ec2_backends[account_id][region].get_subnet(subnet_id).availability_zone)
    except Exception:  # noqa: BLE001 - an unknown subnet only loses the zone label in the sandbox
        return None


def _template_data(backend: EKSBackend, nodegroup: Any) -> dict[str, Any]:
    return _launch_template_data(backend, nodegroup.launch_template)


def _launch_template_data(backend: EKSBackend, launch_template: dict[str, Any] | None) -> dict[str, Any]:
    template = launch_template or {}
    if not template.get("id"):
        return {}
    from moto.ec2.models import ec2_backends

    ec2 = ec2_backends[backend.account_id][backend.region_name]
    found = ec2.describe_launch_templates(template_ids=[template["id"]])[0]
    data: dict[str, Any] = found.get_version(template.get("version") or "$Default").data
    return data


def _nodegroup_instance_type(backend: EKSBackend, nodegroup: Any) -> str:
    """The EC2 type the node group launches: its launch template's, else its instanceTypes[0]."""
    data = _template_data(backend, nodegroup)
    if data.get("InstanceType") and not getattr(nodegroup, "_capserve_explicit_types", False):
        return str(data["InstanceType"])
    return str(nodegroup.instance_types[0])


CLUSTER_SG_DESCRIPTION = (
    "EKS created security group applied to ENI that is attached to EKS Control Plane master nodes, "
    "as well as any managed workloads."
)


def _create_cluster_security_group(backend: EKSBackend, cluster: Any) -> None:
    """The group EKS makes for every cluster: all traffic from itself in, everything out (EKS user guide,
    "View Amazon EKS security group requirements for clusters"). Named and tagged as EKS does."""
    from moto.ec2.models import ec2_backends

    config = cluster.resources_vpc_config
    subnets = config.get("subnetIds") or []
    if not subnets:
        return
    ec2 = ec2_backends[backend.account_id][backend.region_name]
    try:
        vpc_id = ec2.get_subnet(subnets[0]).vpc_id
    except Exception:  # noqa: BLE001 - a subnet moto does not know: no VPC to put the group in
        return
    group = ec2.create_security_group(
        name=f"eks-cluster-sg-{cluster.name}-{int(hashlib.sha256(cluster.arn.encode()).hexdigest(), 16) % 10**10}",
        description=CLUSTER_SG_DESCRIPTION,
        vpc_id=vpc_id,
        tags={"aws:eks:cluster-name": cluster.name, f"kubernetes.io/cluster/{cluster.name}": "owned"},
    )
    self_rule = [{"GroupId": group.id, "UserId": backend.account_id}]
    # Protocol "-1" (all traffic) takes no ports: moto's signature says str, it accepts None.
    ec2.authorize_security_group_ingress(group.id, "-1", None, None, [], source_groups=self_rule)  # type: ignore[arg-type]
    config["clusterSecurityGroupId"] = group.id
    config["vpcId"] = vpc_id


def _delete_cluster_security_group(backend: EKSBackend, cluster: Any) -> None:
    """EKS deletes the cluster security group with the cluster."""
    from moto.ec2.models import ec2_backends

    group_id = (cluster.resources_vpc_config or {}).get("clusterSecurityGroupId")
    if not group_id:
        return
    try:
        ec2_backends[backend.account_id][backend.region_name].delete_security_group(group_id=group_id)
    except Exception:  # noqa: BLE001 - gone already, or still referenced: EKS retries; the sandbox lets it be
        return


def _attachment(backend: EKSBackend, cluster: Any, nodegroup: Any) -> PoolAttachment | None:
    """Where the node group's instances sit (None: its subnet is not one moto knows, so no VPC to model)."""
    if subnet_zone(backend.account_id, backend.region_name, nodegroup.subnets[0]) is None:
        return None
    template = _template_data(backend, nodegroup)
    return nodegroup_attachment(backend.account_id, backend.region_name, cluster, nodegroup.subnets[0], template)


# CreateNodegroup's capacityType (EKS API reference, CreateNodegroup / Nodegroup.capacityType); ON_DEMAND when absent.
CAPACITY_TYPES = ("ON_DEMAND", "SPOT", "CAPACITY_BLOCK")


def capacity_type_problem(capacity_type: str | None, template: dict[str, Any]) -> str | None:
    """Why EKS refuses this capacity type with this launch template's content (None: it accepts it).

    - the type is one of ``CAPACITY_TYPES`` (EKS API reference, CreateNodegroup);
    - ``CAPACITY_BLOCK`` needs a launch template with ``InstanceMarketOptions.MarketType=capacity-block`` and the
      block as ``CapacityReservationSpecification.CapacityReservationTarget`` (EKS user guide, "Create a managed
      node group with Capacity Blocks for ML");
    - any other type takes no market options from the template: Spot is asked for with ``capacityType``, and
      "Request Spot Instances" is prohibited in a managed node group's launch template (EKS user guide,
      "Customize managed nodes with launch templates"). That capacity-block market options are refused the same
      way on an ON_DEMAND group is our inference from that rule (no AWS page says it; the rehearsal's node
      group must not carry them either way).
    """
    wanted = capacity_type or "ON_DEMAND"
    if wanted not in CAPACITY_TYPES:
        return f"capacityType {wanted!r} is not one of {', '.join(CAPACITY_TYPES)}"
    market = (template.get("InstanceMarketOptions") or {}).get("MarketType")
    target = (template.get("CapacityReservationSpecification") or {}).get("CapacityReservationTarget") or {}
    if wanted == "CAPACITY_BLOCK":
        if market != "capacity-block" or not target.get("CapacityReservationId"):
            return (
                "capacityType CAPACITY_BLOCK needs a launch template with InstanceMarketOptions MarketType "
                "capacity-block and a CapacityReservationTarget naming the Capacity Block"
            )
        return None
    if market is not None:
        return (
            f"the launch template sets InstanceMarketOptions (MarketType {market}), which a {wanted} managed node "
            "group does not take: set capacityType instead"
        )
    return None


def _reservation_target(template: dict[str, Any]) -> str | None:
    """The capacity reservation a launch template launches into (EC2 ``CapacityReservationTarget``), if any."""
    target = (template.get("CapacityReservationSpecification") or {}).get("CapacityReservationTarget") or {}
    found = target.get("CapacityReservationId")
    return str(found) if found else None


def _join_failure(nodegroup: Any, message: str, *, code: str = "NodeCreationFailure", status: str = "CREATE_FAILED"
                  ) -> None:
    """The node group's instances never join (or never launch): EKS reports it as the node group's health (EKS API,
    Issue: ``NodeCreationFailure``, ``AsgInstanceLaunchFailures``)."""
    nodegroup.status = status
    nodegroup.health = {"issues": [{"code": code, "message": message, "resourceIds": []}]}


def block_launch_problem(backend: EKSBackend, nodegroup: Any, desired: int) -> str | None:
    """Why a CAPACITY_BLOCK group's Auto Scaling group cannot launch ``desired`` instances into its block now (None:
    it can, or the group asks for none).

    The EKS user guide ("Create a managed node group with Capacity Blocks for ML") lets the group exist before its
    reservation is active at a desired size of 0, and says a non-zero size before then makes the Auto Scaling group's
    launches fail; EC2 launches into a Capacity Block only while it is ``active``, in its Availability Zone, and up to
    its instance count (EC2 user guide, "Launch instances using Capacity Blocks"). A reservation this sandbox did not
    sell (tests name made-up ones) is not judged.
    """
    if nodegroup.capacity_type != "CAPACITY_BLOCK" or desired <= 0:
        return None
    template = _template_data(backend, nodegroup)
    target = (template.get("CapacityReservationSpecification") or {}).get("CapacityReservationTarget") or {}
    block_id = target.get("CapacityReservationId")
    block = capacity_ext.reservation_now(backend.account_id, backend.region_name, block_id) if block_id else None
    if block is None:
        return None
    if block["State"] != "active":
        return f"Capacity Block {block_id} is {block['State']}: instances launch into it only while it is active"
    zone = subnet_zone(backend.account_id, backend.region_name, nodegroup.subnets[0])
    if zone is not None and zone != block["AvailabilityZone"]:
        return f"Capacity Block {block_id} is in {block['AvailabilityZone']}, the node group's subnet in {zone}"
    if desired > int(block["TotalInstanceCount"]):
        return f"Capacity Block {block_id} holds {block['TotalInstanceCount']} instance(s), {desired} were asked for"
    return None


def _desired(nodegroup: Any) -> int:
    return int(nodegroup.scaling_config.get("desiredSize", 0))


def _launch(backend: EKSBackend, cluster_name: str, nodegroup: Any, count: int) -> None:
    """``count`` more of the group's instances boot and join its cluster."""
    storage = node_storage(_template_data(backend, nodegroup), int(nodegroup.disk_size or 20))
    nodegroup_name = nodegroup.nodegroup_name
    fire_node_hooks(
        NodePoolActivated(
            cluster_name=cluster_name,
            pool=nodegroup_name,
            count=count,
            instance_type=_nodegroup_instance_type(backend, nodegroup),
            local_storage=storage.local_storage,
            root_volume_gib=storage.root_volume_gib,
            hugepages_2mi=storage.hugepages_2mi,
            # EKS labels every managed node with its node group (EKS user guide, managed node groups).
            labels={**nodegroup.labels, "eks.amazonaws.com/nodegroup": nodegroup_name},
            taints=[
                {"key": t["key"], "value": t.get("value", ""), "effect": _EFFECTS[t["effect"]]}
                for t in nodegroup.taints
            ],
            zone=subnet_zone(backend.account_id, backend.region_name, nodegroup.subnets[0]),
            network=_attachment(backend, backend.clusters[cluster_name], nodegroup),
            reservation_id=_reservation_target(_template_data(backend, nodegroup)),
            # Under IAM enforcement the instances act as the node role (IMDS), their pods' S3 calls too. Otherwise
            # unchecked: the sandbox's tests make node groups with roles that do not exist, which the aws shim's own
            # check of a role (HyperPod's) would refuse.
            instance_role_arn=nodegroup.node_role if iam_enforcing() else None,
        )
    )


def interface_refusal(instance_type: str, template: dict[str, Any]) -> str | None:
    """Why EC2 refuses to launch the template's interfaces on this type (None: it launches them).

    The rules are capserve's own (``capserve.core.cluster.efa.layout_problems``: the EC2 user guide's
    "Maximize network bandwidth on Amazon EC2 instances with multiple network cards" and DescribeInstanceTypes'
    ``NetworkCards[].InterfaceTypes``, ``EfaInfo.MaximumEfaInterfaces``, ``MaximumNetworkCards``), judged here
    against moto's snapshot of DescribeInstanceTypes. A template without interfaces takes the type's default.
    """
    from moto.ec2.models.instance_types import INSTANCE_TYPES

    interfaces = template.get("NetworkInterfaces")
    if not interfaces or instance_type not in INSTANCE_TYPES:
        return None
    problems = layout_problems(described_network_facts(INSTANCE_TYPES[instance_type]), list(interfaces))
    return "; ".join(problems) or None


def _patch_eks() -> None:
    create_cluster = EKSBackend.create_cluster
    describe_cluster = EKSBackend.describe_cluster
    create_nodegroup = EKSBackend.create_nodegroup
    describe_nodegroup = EKSBackend.describe_nodegroup
    delete_nodegroup = EKSBackend.delete_nodegroup
    delete_cluster = EKSBackend.delete_cluster
    update_nodegroup_config = EKSBackend.update_nodegroup_config

    def _create_cluster(self: EKSBackend, *args: Any, **kwargs: Any) -> Any:
        # EKS creates clusters only on the versions it supports (the rule preflight applies to the spec).
        version = kwargs.get("version", args[3] if len(args) > 3 else None)
        problem = None if version is None else kubernetes_version_problem(str(version))
        if problem is not None:
            raise InvalidParameterException(
                clusterName=kwargs.get("name", args[0] if args else None), nodegroupName=None,
                fargateProfileName=None, addonName=None, message=problem,
            )
        cluster: Any = create_cluster(self, *args, **kwargs)
        cluster.status, cluster._capserve_created, cluster._capserve_describes = _CREATING, CLOCK.now(), 0
        modelled = BEHAVIOUR.modelled
        _begin_modelled(cluster, _cluster_token(cluster.name), modelled.control_plane_s if modelled else None)
        _create_cluster_security_group(self, cluster)
        return cluster

    def _delete_cluster(self: EKSBackend, name: str) -> Any:
        CLOCK.skipped(_cluster_token(name))
        cluster: Any = delete_cluster(self, name)
        _delete_cluster_security_group(self, cluster)
        for hook in list(CLUSTER_GONE_HOOKS):  # its control plane, API endpoint included, goes with it
            hook(name)
        return cluster

    def _describe_cluster(self: EKSBackend, name: str) -> Any:
        cluster: Any = describe_cluster(self, name)
        if cluster.status == _CREATING:
            cluster._capserve_describes += 1
            if activation_due(cluster._capserve_created, cluster._capserve_describes, cluster._capserve_modelled_s):
                cluster.status = _ACTIVE
                CLOCK.skipped(_cluster_token(name))
                for hook in list(CLUSTER_HOOKS):
                    hook(name)
        for endpoint in list(ENDPOINT_HOOKS):  # the cluster's own Kubernetes API
            cluster.endpoint, ca_data = endpoint(name)
            if ca_data is not None:
                cluster.certificate_authority = {"data": ca_data}
        return cluster

    def _create_nodegroup(self: EKSBackend, *args: Any, **kwargs: Any) -> Any:
        cluster = self.clusters.get(kwargs.get("cluster_name", ""))
        if kwargs.get("version") is None and cluster is not None:
            kwargs["version"] = cluster.version  # moto defaults to 1.19; EKS uses the cluster's version
        problem = capacity_type_problem(
            kwargs.get("capacity_type"), _launch_template_data(self, kwargs.get("launch_template"))
        )
        if problem is not None:
            raise InvalidParameterException(
                clusterName=kwargs.get("cluster_name"), nodegroupName=kwargs.get("nodegroup_name"),
                fargateProfileName=None, addonName=None, message=problem,
            )
        nodegroup: Any = create_nodegroup(self, *args, **kwargs)
        nodegroup.status, nodegroup._capserve_created, nodegroup._capserve_describes = _CREATING, CLOCK.now(), 0
        nodegroup._capserve_explicit_types = bool(kwargs.get("instance_types"))
        modelled = BEHAVIOUR.modelled
        if modelled is not None:
            # A block's group made at size 0 (before the block) launches nothing: it is ready in about the time of
            # a small node group; its GPU nodes' launch and join are played when it is scaled.
            launches_gpus = nodegroup.capacity_type == "CAPACITY_BLOCK" and _desired(nodegroup) > 0
            seconds: float | None = modelled.gpu_nodes_s if launches_gpus else modelled.system_nodes_s
        else:
            seconds = None
        _begin_modelled(nodegroup, _nodegroup_token(nodegroup.cluster_name, nodegroup.nodegroup_name), seconds)
        return nodegroup

    def _describe_nodegroup(self: EKSBackend, cluster_name: str, nodegroup_name: str) -> Any:
        nodegroup: Any = describe_nodegroup(self, cluster_name, nodegroup_name)
        if nodegroup.status not in (_CREATING, _UPDATING):
            return nodegroup
        nodegroup._capserve_describes += 1
        due = activation_due(nodegroup._capserve_created, nodegroup._capserve_describes, nodegroup._capserve_modelled_s)
        if not due:
            return nodegroup
        CLOCK.skipped(_nodegroup_token(cluster_name, nodegroup_name))
        if nodegroup.status == _UPDATING:  # a scale-up: the new instances join
            nodegroup.status = _ACTIVE
            _launch(self, cluster_name, nodegroup, _desired(nodegroup) - nodegroup._capserve_scaled_from)
            return nodegroup
        instance_type = _nodegroup_instance_type(self, nodegroup)
        refused = interface_refusal(instance_type, _template_data(self, nodegroup))
        if refused is not None:
            # The group's Auto Scaling group cannot launch one instance: EKS reports the ASG's launch failures on the
            # node group (EKS API reference, Issue code AsgInstanceLaunchFailures).
            _join_failure(nodegroup, f"Could not launch instances: {refused}", code="AsgInstanceLaunchFailures")
            return nodegroup
        try:
            node_storage(_template_data(self, nodegroup), int(nodegroup.disk_size or 20))
        except NodeConfigError as exc:
            _join_failure(nodegroup, f"Instances failed to join the kubernetes cluster (nodeadm: {exc})")
            return nodegroup
        if not known_instance_type(instance_type):
            _join_failure(nodegroup, f"the capserve sandbox has no node shape for {instance_type}")
            return nodegroup
        problem = block_launch_problem(self, nodegroup, _desired(nodegroup))
        if problem is not None:
            _join_failure(nodegroup, problem, code="AsgInstanceLaunchFailures")
            return nodegroup
        nodegroup.status = _ACTIVE
        _launch(self, cluster_name, nodegroup, _desired(nodegroup))
        return nodegroup

    def _update_nodegroup_config(self: EKSBackend, *args: Any, **kwargs: Any) -> Any:
        nodegroup: Any = self.clusters[kwargs["cluster_name"]].nodegroups[kwargs["nodegroup_name"]]
        before = _desired(nodegroup)
        update = update_nodegroup_config(self, *args, **kwargs)
        wanted = _desired(nodegroup)
        if wanted <= before or nodegroup.status != _ACTIVE:
            return update  # scaling in is the drain's and AWS's (instances leave with the block): not modelled
        problem = block_launch_problem(self, nodegroup, wanted)
        if problem is not None:
            # EKS takes the update; the Auto Scaling group's launches fail and the group reports it (EKS API, Issue).
            _join_failure(nodegroup, problem, code="AsgInstanceLaunchFailures", status="DEGRADED")
            return update
        nodegroup.status, nodegroup._capserve_created, nodegroup._capserve_describes = _UPDATING, CLOCK.now(), 0
        nodegroup._capserve_scaled_from = before
        modelled = BEHAVIOUR.modelled
        _begin_modelled(nodegroup, _nodegroup_token(nodegroup.cluster_name, nodegroup.nodegroup_name),
                        modelled.gpu_nodes_s if modelled is not None else None)
        return update

    def _delete_nodegroup(self: EKSBackend, cluster_name: str, nodegroup_name: str) -> Any:
        # EKS terminates the group's instances, so their Nodes leave the cluster (stock moto forgets them).
        CLOCK.skipped(_nodegroup_token(cluster_name, nodegroup_name))
        deleted = delete_nodegroup(self, cluster_name, nodegroup_name)
        for hook in list(NODE_GONE_HOOKS):
            hook(cluster_name, nodegroup_name)
        return deleted

    EKSBackend.create_cluster = _create_cluster  # type: ignore[method-assign]
    EKSBackend.delete_cluster = _delete_cluster  # type: ignore[method-assign]
    EKSBackend.delete_nodegroup = _delete_nodegroup  # type: ignore[method-assign]
    EKSBackend.describe_cluster = _describe_cluster  # type: ignore[method-assign]
    EKSBackend.create_nodegroup = _create_nodegroup  # type: ignore[method-assign]
    EKSBackend.describe_nodegroup = _describe_nodegroup  # type: ignore[method-assign]
    EKSBackend.update_nodegroup_config = _update_nodegroup_config  # type: ignore[method-assign]


def install() -> None:
    """Patch moto once per process (moto_sandbox calls every extension on each start)."""
    global _INSTALLED
    if _INSTALLED:
        return
    # Bring-up attaches AWS-managed policies (AmazonEKSClusterPolicy, ...); moto only knows them when
    # this is set before its IAM backend starts (docs/sandbox.md §2.4).
    os.environ.setdefault("MOTO_IAM_LOAD_MANAGED_POLICIES", "true")
    _record_calls()
    _patch_eks()
    _INSTALLED = True
