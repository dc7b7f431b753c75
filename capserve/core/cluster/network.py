"""Network requests for bring-up: a VPC, one subnet in the reservation's AZ (and one more for EKS),
an internet gateway with a public route table, and the node security group that EFA needs.

Pure: each function returns the keyword arguments of one EC2 call; ``capserve.tasks.cluster.network``
looks up what exists by tag and sends only what is missing.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from capserve.core.cluster.naming import ClusterNames, campaign_tags, tag_list
from capserve.core.errors import PermanentError

# EKS needs subnets in at least two Availability Zones for the control plane's network interfaces
# (EKS user guide, "View Amazon EKS networking requirements for VPC and subnets"). The GPU nodes
# use only the reservation's AZ: a Capacity Block lives in exactly one AZ.
EKS_MIN_AZS = 2


def subnet_azs(reservation_az: str, available_azs: list[str]) -> list[str]:
    """The reservation's AZ first, then enough other AZs (stable order) for the EKS control plane."""
    if reservation_az not in available_azs:
        raise PermanentError(
            f"the reservation's availability zone {reservation_az} is not among this region's zones "
            f"({', '.join(sorted(available_azs)) or 'none'}): check the lease's region"
        )
    others = sorted(az for az in available_azs if az != reservation_az)
    if len(others) < EKS_MIN_AZS - 1:
        raise PermanentError(
            f"EKS needs subnets in {EKS_MIN_AZS} availability zones; the region offers only {reservation_az}"
        )
    return [reservation_az, *others[: EKS_MIN_AZS - 1]]


def subnet_cidr(vpc_cidr: str, index: int) -> str:
    """The index-th /20 (for a /16 VPC: 4,096 addresses each, plenty for EFA's many interfaces)."""
    network = ipaddress.ip_network(vpc_cidr)
    new_prefix = min(network.prefixlen + 4, 28)
    return str(list(network.subnets(new_prefix=new_prefix))[index])


def _tag_spec(resource_type: str, tags: dict[str, str]) -> list[dict[str, Any]]:
    return [{"ResourceType": resource_type, "Tags": tag_list(tags)}]


def vpc_request(names: ClusterNames, cidr: str) -> dict[str, Any]:
    return {
        "CidrBlock": cidr,
        "TagSpecifications": _tag_spec("vpc", campaign_tags(names.campaign_id, "vpc", names.vpc)),
    }


def subnet_request(
    names: ClusterNames, vpc_id: str, vpc_cidr: str, availability_zone: str, index: int
) -> dict[str, Any]:
    name = names.subnet(availability_zone)
    return {
        "VpcId": vpc_id,
        "CidrBlock": subnet_cidr(vpc_cidr, index),
        "AvailabilityZone": availability_zone,
        "TagSpecifications": _tag_spec("subnet", campaign_tags(names.campaign_id, "subnet", name)),
    }


def internet_gateway_request(names: ClusterNames) -> dict[str, Any]:
    tags = campaign_tags(names.campaign_id, "internet-gateway", names.internet_gateway)
    return {"TagSpecifications": _tag_spec("internet-gateway", tags)}


def route_table_request(names: ClusterNames, vpc_id: str) -> dict[str, Any]:
    tags = campaign_tags(names.campaign_id, "route-table", names.route_table)
    return {"VpcId": vpc_id, "TagSpecifications": _tag_spec("route-table", tags)}


def default_route_request(route_table_id: str, internet_gateway_id: str) -> dict[str, Any]:
    return {"RouteTableId": route_table_id, "DestinationCidrBlock": "0.0.0.0/0", "GatewayId": internet_gateway_id}


def security_group_request(names: ClusterNames, vpc_id: str) -> dict[str, Any]:
    tags = campaign_tags(names.campaign_id, "security-group", names.security_group)
    return {
        "GroupName": names.security_group,
        "Description": f"capserve GPU nodes of campaign {names.campaign_id} (EFA: all traffic within the group)",
        "VpcId": vpc_id,
        "TagSpecifications": _tag_spec("security-group", tags),
    }


def self_reference_permissions(group_id: str) -> list[dict[str, Any]]:
    """All traffic to and from the group itself: EFA requires both directions
    (EC2 user guide, "Get started with EFA and NCCL", step 1: security group rules)."""
    return [{"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": group_id, "Description": "EFA / node-to-node"}]}]


def has_self_reference(permissions: list[dict[str, Any]], group_id: str) -> bool:
    """True when a rule list (IpPermissions or IpPermissionsEgress) already allows all traffic with the group."""
    return any(
        rule.get("IpProtocol") == "-1"
        and any(pair.get("GroupId") == group_id for pair in rule.get("UserIdGroupPairs", []))
        for rule in permissions
    )


class NetworkIds(BaseModel):
    """What the network step found or made."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    vpc_id: str = Field(min_length=1, max_length=64, description="The campaign's VPC.")
    node_subnet_id: str = Field(min_length=1, max_length=64, description="Subnet in the reservation's AZ (GPU nodes).")
    subnet_ids: tuple[str, ...] = Field(
        min_length=EKS_MIN_AZS, max_length=16, description="Every subnet, node subnet first (EKS control plane)."
    )
    security_group_id: str = Field(min_length=1, max_length=64, description="Node security group (EFA self-rule).")
    created: tuple[str, ...] = Field(default=(), max_length=64, description="'kind/name' of what this run created.")
