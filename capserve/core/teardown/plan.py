"""The ordered deletion plan, as data, built from an inventory.

Order (docs/design.md §9, docs/aws-network.md): workloads → node groups / HyperPod cluster → leftover
instances → launch templates → EKS cluster → IAM (detach policies, delete roles) → gateways (VPC
endpoints; NAT gateways, waited for until deleted: only then is the Elastic IP free and the subnet empty)
→ network (Elastic IPs released, security group rules and groups, route table associations and tables,
internet gateway detach and delete, subnets, VPC).
Each phase waits until its deletions are done before the next one starts: an EKS cluster cannot be
deleted while it has node groups (``ResourceInUseException``, EKS API reference DeleteCluster), and a
VPC not while anything is in it (``DependencyViolation``, EC2 API reference DeleteVpc).

Each step names the exact error codes that mean "already gone" (``NOT_FOUND``); the executor treats
those as success and re-raises every other error.
"""

from __future__ import annotations

import enum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from capserve.core.cluster.addons import LWS_NAMESPACE, SYSTEM_NAMESPACE
from capserve.core.tags import CAMPAIGN_TAG
from capserve.core.teardown.inventory import Inventory, SecurityGroupFound
from capserve.core.teardown.settings import TeardownSettings

Service = Literal["ec2", "eks", "iam", "sagemaker", "kubernetes"]

# The codes each delete call may answer with when its target no longer exists. Nothing else is tolerated.
NOT_FOUND: dict[str, tuple[str, ...]] = {
    # EC2 API reference, "Error codes for the Amazon EC2 API" (common client errors, *.NotFound family).
    "ec2.terminate_instances": ("InvalidInstanceID.NotFound",),
    "ec2.delete_launch_template": ("InvalidLaunchTemplateId.NotFound", "InvalidLaunchTemplateName.NotFoundException"),
    "ec2.revoke_security_group_ingress": ("InvalidGroup.NotFound", "InvalidPermission.NotFound"),
    "ec2.revoke_security_group_egress": ("InvalidGroup.NotFound", "InvalidPermission.NotFound"),
    "ec2.delete_security_group": ("InvalidGroup.NotFound",),
    "ec2.disassociate_route_table": ("InvalidAssociationID.NotFound",),
    "ec2.delete_route_table": ("InvalidRouteTableID.NotFound",),
    # Detaching a gateway that is no longer attached answers Gateway.NotAttached (same error-code list).
    "ec2.detach_internet_gateway": ("InvalidInternetGatewayID.NotFound", "Gateway.NotAttached"),
    "ec2.delete_internet_gateway": ("InvalidInternetGatewayID.NotFound",),
    "ec2.delete_subnet": ("InvalidSubnetID.NotFound",),
    # DeleteNatGateway / DescribeNatGateways answer NatGatewayNotFound for an unknown id (the code botocore's
    # nat_gateway_deleted waiter accepts as "deleted").
    "ec2.delete_nat_gateway": ("NatGatewayNotFound",),
    # DeleteVpcEndpoints reports unknown ids in its Unsuccessful list, not as an error; a malformed id errors.
    "ec2.delete_vpc_endpoints": ("InvalidVpcEndpointId.NotFound",),
    "ec2.release_address": ("InvalidAllocationID.NotFound",),
    "ec2.delete_vpc": ("InvalidVpcID.NotFound",),
    # EKS API reference, DeleteNodegroup / DeleteCluster, "Errors": ResourceNotFoundException (HTTP 404).
    "eks.delete_nodegroup": ("ResourceNotFoundException",),
    "eks.delete_cluster": ("ResourceNotFoundException",),
    # IAM API reference, DetachRolePolicy / DeleteRolePolicy / DeleteRole, "Errors": NoSuchEntity (HTTP 404).
    "iam.detach_role_policy": ("NoSuchEntity",),
    "iam.delete_role_policy": ("NoSuchEntity",),
    "iam.delete_role": ("NoSuchEntity",),
    # SageMaker API reference, DeleteCluster / DescribeCluster, "Errors": ResourceNotFound.
    "sagemaker.delete_cluster": ("ResourceNotFound",),
    # Kubernetes API conventions: DELETE of a missing object answers 404 NotFound.
    "kubernetes.delete": ("404",),
}

# EKS and the VPC CNI release network interfaces (and their security group references) minutes after
# a cluster or node group is gone; until then the network deletes answer DependencyViolation (EKS user
# guide, "Delete a cluster"; AWS re:Post "Why can't I delete my VPC"). Those calls are retried, up to
# ``TeardownSettings.dependency_retry_timeout_s``, and then raised naming the resource.
DEPENDENCY_CODES: tuple[str, ...] = ("DependencyViolation",)

# Kubernetes objects a serving stage creates, deleted in this order: Services first (a LoadBalancer
# Service's ELB is deleted by the cloud controller only while the cluster still runs), the workloads,
# then volume claims (dynamically provisioned EBS/FSx volumes follow their claims), and last the
# endpoint's API-key Secret (in a cluster the campaign does not own, it must not outlive the campaign).
WORKLOAD_KINDS: tuple[tuple[str, str], ...] = (
    ("v1", "Service"),
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"),
    ("apps/v1", "Deployment"),
    ("apps/v1", "StatefulSet"),
    ("batch/v1", "Job"),
    ("v1", "PersistentVolumeClaim"),
    ("v1", "Secret"),
)


# Bring-up's add-ons (device plugins, FSx CSI driver, LWS controller) carry the campaign label too but are
# not workloads: they go with our cluster, and in a spec's existing cluster they may serve others.
ADDON_NAMESPACES: frozenset[str] = frozenset({SYSTEM_NAMESPACE, LWS_NAMESPACE})


def is_workload(namespace: str | None) -> bool:
    """A labelled object teardown deletes: anything outside the add-on namespaces."""
    return namespace not in ADDON_NAMESPACES


def workload_selector(campaign_id: str) -> str:
    """The label selector of everything the campaign runs in Kubernetes."""
    return f"{CAMPAIGN_TAG}={campaign_id}"


class Phase(enum.StrEnum):
    WORKLOADS = "workloads"
    NODES = "nodes"
    INSTANCES = "instances"
    LAUNCH_TEMPLATES = "launch-templates"
    CLUSTER = "cluster"
    IAM = "iam"
    GATEWAYS = "gateways"
    NETWORK = "network"


class Wait(BaseModel):
    """How to know a deletion finished: a boto3 waiter, or polling a read until it answers NotFound."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["waiter", "absent"] = Field(description="'waiter': boto3 waiter; 'absent': poll until NotFound.")
    service: Service = Field(description="Which API the waiter / read goes to.")
    name: str = Field(min_length=1, max_length=64, description="Waiter name, or the read operation to poll.")
    params: dict[str, Any] = Field(description="Arguments of the waiter / read.")
    gone_codes: tuple[str, ...] = Field(default=(), max_length=8, description="'absent': codes that mean gone.")
    timeout_s: float = Field(gt=0, le=6 * 3600, description="Longest wait.")


class Step(BaseModel):
    """One call of the plan."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    phase: Phase = Field(description="The phase the step belongs to.")
    resource: str = Field(min_length=1, max_length=512, description="'kind/name' reported for this step.")
    service: Service = Field(description="Which API the call goes to.")
    operation: str = Field(min_length=1, max_length=64, description="boto3 method name ('delete' for Kubernetes).")
    params: dict[str, Any] = Field(description="Keyword arguments of the call.")
    not_found: tuple[str, ...] = Field(min_length=1, max_length=8, description="Codes meaning 'already gone'.")
    retry_codes: tuple[str, ...] = Field(default=(), max_length=8, description="Codes retried until a deadline.")
    report: bool = Field(True, description="False for preparatory calls (detach, revoke) not listed in the result.")
    wait: Wait | None = Field(None, description="Wait for the deletion to finish before the next phase.")


class TeardownPlan(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    campaign_id: str = Field(min_length=1, max_length=40, description="The campaign.")
    region: str = Field(min_length=1, max_length=32, description="AWS region.")
    steps: tuple[Step, ...] = Field(default=(), max_length=50_000, description="In execution order.")

    def phases(self) -> list[tuple[Phase, list[Step]]]:
        """Steps grouped by phase, in plan order."""
        grouped: list[tuple[Phase, list[Step]]] = []
        for step in self.steps:
            if not grouped or grouped[-1][0] is not step.phase:
                grouped.append((step.phase, []))
            grouped[-1][1].append(step)
        return grouped

    def resources(self) -> list[str]:
        """What the plan deletes (what a dry run reports)."""
        return [step.resource for step in self.steps if step.report]


def _step(phase: Phase, resource: str, service: Service, operation: str, **params: Any) -> Step:
    return Step(
        phase=phase,
        resource=resource,
        service=service,
        operation=operation,
        params=params,
        not_found=NOT_FOUND[f"{service}.{operation}"],
    )


def label(kind: str, name: str, resource_id: str | None = None) -> str:
    """How a resource is named in results: 'kind/name', with its id when that differs."""
    return f"{kind}/{name}" + (f" ({resource_id})" if resource_id and resource_id != name else "")


def plan_teardown(inventory: Inventory, settings: TeardownSettings) -> TeardownPlan:
    """Every call, in order, that deletes what ``inventory`` holds."""
    steps: list[Step] = []
    steps += _workloads(inventory, settings)
    steps += _nodes(inventory, settings)
    if inventory.instances:
        ids = [i.id for i in inventory.instances]
        step = _step(Phase.INSTANCES, label("instances", inventory.campaign_id, ", ".join(ids)), "ec2",
                     "terminate_instances", InstanceIds=ids)
        wait = Wait(kind="waiter", service="ec2", name="instance_terminated", params={"InstanceIds": ids},
                    timeout_s=settings.instances_gone_timeout_s)
        steps.append(step.model_copy(update={"wait": wait}))
    for template in inventory.launch_templates:
        steps.append(_step(Phase.LAUNCH_TEMPLATES, label("launch-template", template.name, template.id), "ec2",
                           "delete_launch_template", LaunchTemplateId=template.id))
    if inventory.eks_cluster is not None:
        name = inventory.eks_cluster.name
        wait = Wait(kind="waiter", service="eks", name="cluster_deleted", params={"name": name},
                    timeout_s=settings.cluster_gone_timeout_s)
        steps.append(_step(Phase.CLUSTER, label("eks-cluster", name), "eks", "delete_cluster", name=name)
                     .model_copy(update={"wait": wait}))
    steps += _iam(inventory)
    steps += _gateways(inventory, settings)
    steps += _network(inventory)
    return TeardownPlan(campaign_id=inventory.campaign_id, region=inventory.region, steps=tuple(steps))


def _workloads(inventory: Inventory, settings: TeardownSettings) -> list[Step]:
    steps = []
    for obj in inventory.workloads:
        where = f"{obj.namespace}/" if obj.namespace else ""
        params = {"api_version": obj.api_version, "kind": obj.kind, "namespace": obj.namespace, "name": obj.name}
        wait = Wait(kind="absent", service="kubernetes", name="get", params=params, gone_codes=("404",),
                    timeout_s=settings.workloads_gone_timeout_s)
        steps.append(_step(Phase.WORKLOADS, f"k8s-{obj.kind.lower()}/{where}{obj.name}", "kubernetes", "delete",
                           **params).model_copy(update={"wait": wait}))
    return steps


def _nodes(inventory: Inventory, settings: TeardownSettings) -> list[Step]:
    steps = []
    timeout = settings.nodegroups_gone_timeout_s
    if inventory.hyperpod is not None:
        name = inventory.hyperpod.name
        # SageMaker has no waiter for HyperPod clusters (botocore sagemaker waiters): poll DescribeCluster.
        wait = Wait(kind="absent", service="sagemaker", name="describe_cluster", params={"ClusterName": name},
                    gone_codes=NOT_FOUND["sagemaker.delete_cluster"], timeout_s=timeout)
        steps.append(_step(Phase.NODES, label("hyperpod-cluster", name), "sagemaker", "delete_cluster",
                           ClusterName=name).model_copy(update={"wait": wait}))
    for group in inventory.nodegroups:
        params = {"clusterName": group.cluster, "nodegroupName": group.name}
        wait = Wait(kind="waiter", service="eks", name="nodegroup_deleted", params=params, timeout_s=timeout)
        steps.append(_step(Phase.NODES, label("eks-nodegroup", group.name), "eks", "delete_nodegroup", **params)
                     .model_copy(update={"wait": wait}))
    return steps


def _iam(inventory: Inventory) -> list[Step]:
    steps = []
    for role in inventory.roles:
        # DeleteRole refuses a role with attached or inline policies (IAM API reference, DeleteRole: DeleteConflict).
        for arn in role.policy_arns:
            steps.append(_step(Phase.IAM, label("iam-role-policy", f"{role.name}:{arn}"), "iam",
                               "detach_role_policy", RoleName=role.name, PolicyArn=arn)
                         .model_copy(update={"report": False}))
        for policy in role.inline_policies:
            steps.append(_step(Phase.IAM, label("iam-inline-policy", f"{role.name}:{policy}"), "iam",
                               "delete_role_policy", RoleName=role.name, PolicyName=policy)
                         .model_copy(update={"report": False}))
        steps.append(_step(Phase.IAM, label("iam-role", role.name), "iam", "delete_role", RoleName=role.name))
    return steps


def _gateways(inventory: Inventory, settings: TeardownSettings) -> list[Step]:
    """VPC endpoints, then NAT gateways, each waited for until deleted: a NAT gateway keeps its Elastic IP
    associated and its network interface in its subnet until then (EC2 API reference, DeleteNatGateway:
    "Deleting a public NAT gateway disassociates its Elastic IP address, but does not release the address
    from your account"; the address is released in the network phase)."""
    steps = []
    for endpoint in inventory.vpc_endpoints:
        steps.append(_step(Phase.GATEWAYS, label("vpc-endpoint", endpoint.name, endpoint.id), "ec2",
                           "delete_vpc_endpoints", VpcEndpointIds=[endpoint.id]))
    for gateway in inventory.nat_gateways:
        wait = Wait(kind="waiter", service="ec2", name="nat_gateway_deleted", params={"NatGatewayIds": [gateway.id]},
                    timeout_s=settings.nat_gateways_gone_timeout_s)
        steps.append(_step(Phase.GATEWAYS, label("nat-gateway", gateway.name, gateway.id), "ec2",
                           "delete_nat_gateway", NatGatewayId=gateway.id).model_copy(update={"wait": wait}))
    return steps


# An Elastic IP still associated in a nondefault VPC (its NAT gateway not quite gone) answers
# InvalidIPAddress.InUse (EC2 API reference, ReleaseAddress): retried like a dependency.
ADDRESS_IN_USE_CODES: tuple[str, ...] = ("InvalidIPAddress.InUse",)


def _network(inventory: Inventory) -> list[Step]:
    steps: list[Step] = []
    retry = {"retry_codes": DEPENDENCY_CODES}
    # Released first: "The VPC must not contain any running instances with Elastic IP addresses or public
    # IPv4 addresses" for its internet gateway to detach (EC2 API reference, DetachInternetGateway).
    for address in inventory.addresses:
        steps.append(_step(Phase.NETWORK, label("elastic-ip", address.name, address.id), "ec2", "release_address",
                           AllocationId=address.id).model_copy(update={"retry_codes": ADDRESS_IN_USE_CODES}))
    for vpc in inventory.vpcs:
        for group in vpc.security_groups:
            steps += _revokes(group)
        for group in vpc.security_groups:
            steps.append(_step(Phase.NETWORK, label("security-group", group.name, group.id), "ec2",
                               "delete_security_group", GroupId=group.id).model_copy(update=retry))
        for table in vpc.route_tables:
            for association in table.association_ids:
                steps.append(_step(Phase.NETWORK, label("route-table-association", association), "ec2",
                                   "disassociate_route_table", AssociationId=association)
                             .model_copy(update={"report": False}))
            steps.append(_step(Phase.NETWORK, label("route-table", table.name, table.id), "ec2",
                               "delete_route_table", RouteTableId=table.id))
    for gateway in inventory.internet_gateways:
        for vpc_id in gateway.attached_vpc_ids:
            steps.append(_step(Phase.NETWORK, label("internet-gateway-attachment", gateway.id), "ec2",
                               "detach_internet_gateway", InternetGatewayId=gateway.id, VpcId=vpc_id)
                         .model_copy(update={"report": False, **retry}))
        steps.append(_step(Phase.NETWORK, label("internet-gateway", gateway.name, gateway.id), "ec2",
                           "delete_internet_gateway", InternetGatewayId=gateway.id).model_copy(update=retry))
    for vpc in inventory.vpcs:
        for subnet in vpc.subnets:
            steps.append(_step(Phase.NETWORK, label("subnet", subnet.name, subnet.id), "ec2", "delete_subnet",
                               SubnetId=subnet.id).model_copy(update=retry))
        steps.append(_step(Phase.NETWORK, label("vpc", vpc.name, vpc.id), "ec2", "delete_vpc", VpcId=vpc.id)
                     .model_copy(update=retry))
    return steps


def _revokes(group: SecurityGroupFound) -> list[Step]:
    """Rules that reference security groups block deleting the referenced group: revoke them first."""
    steps = []
    for operation, rules in (("revoke_security_group_ingress", group.ingress),
                             ("revoke_security_group_egress", group.egress)):
        if rules:
            steps.append(_step(Phase.NETWORK, label("security-group-rules", group.name, group.id), "ec2", operation,
                               GroupId=group.id, IpPermissions=[dict(r) for r in rules])
                         .model_copy(update={"report": False}))
    return steps


def group_references(permissions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The parts of IpPermissions that reference security groups, in the shape the revoke calls take."""
    rules: list[dict[str, Any]] = []
    for rule in permissions:
        pairs = [{"GroupId": p["GroupId"]} for p in rule.get("UserIdGroupPairs", []) if p.get("GroupId")]
        if not pairs:
            continue
        kept: dict[str, Any] = {k: rule[k] for k in ("IpProtocol", "FromPort", "ToPort") if k in rule}
        kept["UserIdGroupPairs"] = pairs
        rules.append(kept)
    return rules
