"""What of a campaign exists, as found by its tag (EC2, SageMaker) or deterministic name checked against
its tag (EKS, IAM): the input of the deletion plan. Pure data, filled in by ``capserve.tasks.teardown``."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from capserve.core.teardown.result import KeptResource

ClusterKind = Literal["eks", "hyperpod"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Named(_Strict):
    """One resource: its AWS id (or name, for resources addressed by name) and its Name tag/name."""

    id: str = Field(min_length=1, max_length=2048, description="AWS id (vpc-…, subnet-…) or the name itself.")
    name: str = Field(min_length=1, max_length=256, description="The Name tag, or the id when it has none.")


class RouteTableFound(Named):
    association_ids: tuple[str, ...] = Field(
        default=(), max_length=256, description="Subnet associations (not the VPC's main one) to remove first."
    )


class InternetGatewayFound(Named):
    attached_vpc_ids: tuple[str, ...] = Field(default=(), max_length=8, description="VPCs it is attached to.")


class NatGatewayFound(Named):
    vpc_id: str | None = Field(None, max_length=64, description="The VPC it is in.")
    state: str = Field(min_length=1, max_length=16, description="pending, available or failed (not yet deleting).")


class AddressFound(Named):
    """An Elastic IP (``id`` is its allocation id)."""

    public_ip: str | None = Field(None, max_length=64, description="The address.")
    association_id: str | None = Field(None, max_length=64, description="Its association (a NAT gateway's, say).")


class SecurityGroupFound(Named):
    ingress: tuple[dict[str, Any], ...] = Field(
        default=(), max_length=256, description="Ingress rules that reference security groups (revoked first)."
    )
    egress: tuple[dict[str, Any], ...] = Field(
        default=(), max_length=256, description="Egress rules that reference security groups (revoked first)."
    )


class VpcFound(Named):
    subnets: tuple[Named, ...] = Field(default=(), max_length=256, description="Campaign-tagged subnets.")
    route_tables: tuple[RouteTableFound, ...] = Field(default=(), max_length=64, description="Tagged route tables.")
    security_groups: tuple[SecurityGroupFound, ...] = Field(
        default=(), max_length=64, description="Tagged security groups."
    )


class RoleFound(_Strict):
    name: str = Field(min_length=1, max_length=64, description="IAM role name.")
    policy_arns: tuple[str, ...] = Field(default=(), max_length=20, description="Attached managed policies.")
    inline_policies: tuple[str, ...] = Field(default=(), max_length=100, description="Inline policy names.")


class ClusterFound(_Strict):
    name: str = Field(min_length=1, max_length=100, description="EKS cluster name.")
    status: str = Field(min_length=1, max_length=32, description="EKS cluster status.")
    endpoint: str | None = Field(None, max_length=2048, description="Kubernetes API URL (None while creating).")
    ca_data: str | None = Field(None, max_length=65536, description="certificateAuthority.data (public).")


class NodegroupFound(_Strict):
    cluster: str = Field(min_length=1, max_length=100, description="The EKS cluster it belongs to.")
    name: str = Field(min_length=1, max_length=63, description="Node group name.")


class HyperPodFound(_Strict):
    name: str = Field(min_length=1, max_length=63, description="HyperPod cluster name.")
    arn: str = Field(min_length=1, max_length=2048, description="HyperPod cluster ARN.")


class WorkloadFound(_Strict):
    """A Kubernetes object labelled with the campaign."""

    api_version: str = Field(min_length=1, max_length=128, description="apiVersion, e.g. 'apps/v1'.")
    kind: str = Field(min_length=1, max_length=64, description="Kind, e.g. 'Service'.")
    namespace: str | None = Field(None, max_length=63, description="Namespace (None for cluster-scoped).")
    name: str = Field(min_length=1, max_length=253, description="metadata.name.")


class Inventory(_Strict):
    """Everything of one campaign in one region (IAM roles are global but named for the campaign)."""

    campaign_id: str = Field(min_length=1, max_length=40, description="The campaign the resources are tagged with.")
    region: str = Field(min_length=1, max_length=32, description="AWS region searched.")
    workload_cluster: ClusterFound | None = Field(
        None, description="The cluster the campaign's workloads run in (ours, or the spec's existing cluster)."
    )
    workloads: tuple[WorkloadFound, ...] = Field(default=(), max_length=10_000, description="Labelled objects.")
    hyperpod: HyperPodFound | None = Field(None, description="The campaign's HyperPod cluster.")
    nodegroups: tuple[NodegroupFound, ...] = Field(default=(), max_length=64, description="Tagged node groups.")
    instances: tuple[Named, ...] = Field(
        default=(), max_length=4096, description="Campaign-tagged instances not yet terminated."
    )
    launch_templates: tuple[Named, ...] = Field(default=(), max_length=64, description="Tagged launch templates.")
    eks_cluster: ClusterFound | None = Field(None, description="The campaign's own EKS cluster.")
    roles: tuple[RoleFound, ...] = Field(default=(), max_length=16, description="The campaign's IAM roles.")
    internet_gateways: tuple[InternetGatewayFound, ...] = Field(
        default=(), max_length=16, description="Tagged internet gateways."
    )
    vpcs: tuple[VpcFound, ...] = Field(default=(), max_length=16, description="Tagged VPCs and what is in them.")
    nat_gateways: tuple[NatGatewayFound, ...] = Field(
        default=(), max_length=16, description="Tagged NAT gateways not yet deleting or deleted (in any VPC)."
    )
    vpc_endpoints: tuple[Named, ...] = Field(
        default=(), max_length=64, description="Tagged VPC endpoints not yet deleted (in any VPC)."
    )
    addresses: tuple[AddressFound, ...] = Field(default=(), max_length=64, description="Tagged Elastic IPs.")
    kept: tuple[KeptResource, ...] = Field(
        default=(), max_length=256, description="Found but left alone (not ours, or shared), with why."
    )
    missing: tuple[str, ...] = Field(
        default=(),
        max_length=256,
        description="Resources the campaign would have by its deterministic names that do not exist: already gone.",
    )
    reservation_ids: tuple[str, ...] = Field(
        default=(), max_length=16, description="Reservations the launch templates / HyperPod target (never deleted)."
    )
    oldest_created: AwareDatetime | None = Field(
        None, description="Creation time of the oldest resource that reports one (the reaper's age rule)."
    )

    @property
    def is_empty(self) -> bool:
        """Nothing left to delete."""
        return not (
            self.workloads
            or self.hyperpod
            or self.nodegroups
            or self.instances
            or self.launch_templates
            or self.eks_cluster
            or self.roles
            or self.internet_gateways
            or self.vpcs
            or self.nat_gateways
            or self.vpc_endpoints
            or self.addresses
        )
