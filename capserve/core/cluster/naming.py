"""Deterministic names and tags for everything bring-up creates, derived from the campaign id only.

A retry or a re-run must find what the first run made, so no name carries a random part
(docs/design.md §3: a random name inside create() means every retry buys a second cluster).
The campaign id is a DNS label of at most 40 characters (spec.DNS_LABEL), which keeps every name
below its AWS limit: IAM role names 64, HyperPod cluster names 63, EKS node group names 63.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from capserve.core.tags import CAMPAIGN_TAG

COMPONENT_TAG = "capserve.io/component"
POOL_LABEL = "capserve.io/pool"
GPU_POOL = "gpu"
# Small untainted CPU nodes for CoreDNS and the add-on controllers (docs/serving.md §5.1).
SYSTEM_POOL = "system"


class ClusterNames(BaseModel):
    """Every name bring-up uses for one campaign."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    campaign_id: str = Field(min_length=1, max_length=40, description="The campaign id the names derive from.")

    @property
    def prefix(self) -> str:
        return f"capserve-{self.campaign_id}"

    @property
    def vpc(self) -> str:
        return f"{self.prefix}-vpc"

    def subnet(self, availability_zone: str) -> str:
        """A public subnet (the NAT gateway, the system nodes, the control plane's interfaces)."""
        return f"{self.prefix}-{availability_zone}"

    def private_subnet(self, availability_zone: str) -> str:
        """The private subnet of the GPU nodes (egress through the NAT gateway)."""
        return f"{self.prefix}-private-{availability_zone}"

    @property
    def internet_gateway(self) -> str:
        return f"{self.prefix}-igw"

    @property
    def route_table(self) -> str:
        """The public route table (0.0.0.0/0 to the internet gateway)."""
        return f"{self.prefix}-public"

    @property
    def private_route_table(self) -> str:
        """The GPU subnet's route table (0.0.0.0/0 to the NAT gateway, S3 to the gateway endpoint)."""
        return f"{self.prefix}-private"

    @property
    def nat_gateway(self) -> str:
        return f"{self.prefix}-nat"

    @property
    def nat_address(self) -> str:
        """The NAT gateway's Elastic IP."""
        return f"{self.prefix}-nat-ip"

    @property
    def s3_endpoint(self) -> str:
        return f"{self.prefix}-s3"

    @property
    def security_group(self) -> str:
        return f"{self.prefix}-nodes"

    @property
    def cluster_role(self) -> str:
        return f"{self.prefix}-eks-cluster"

    @property
    def node_role(self) -> str:
        return f"{self.prefix}-eks-node"

    @property
    def hyperpod_role(self) -> str:
        return f"{self.prefix}-hyperpod"

    @property
    def eks_cluster(self) -> str:
        return self.prefix

    @property
    def launch_template(self) -> str:
        return f"{self.prefix}-gpu"

    @property
    def nodegroup(self) -> str:
        return f"{self.prefix}-{GPU_POOL}"

    @property
    def system_nodegroup(self) -> str:
        return f"{self.prefix}-{SYSTEM_POOL}"

    @property
    def hyperpod_cluster(self) -> str:
        return f"{self.prefix}-hp"

    @property
    def hyperpod_instance_group(self) -> str:
        return GPU_POOL


def campaign_tags(campaign_id: str, component: str, name: str) -> dict[str, str]:
    """The tags every resource carries: the campaign (what converge and the reaper look up), what it is, its name."""
    return {CAMPAIGN_TAG: campaign_id, COMPONENT_TAG: component, "Name": name}


def tag_list(tags: dict[str, str]) -> list[dict[str, str]]:
    """EC2/IAM/SageMaker spell tags as [{"Key", "Value"}]; EKS takes the plain mapping."""
    return [{"Key": key, "Value": value} for key, value in sorted(tags.items())]


def partition_for(region: str) -> str:
    """The ARN partition of a region (AWS General Reference, "Amazon Resource Names")."""
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"
