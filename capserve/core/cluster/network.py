"""Network requests for bring-up (docs/aws-network.md): a VPC; public subnets (internet gateway route)
for the NAT gateway, the system nodes and the EKS control plane's interfaces; a private subnet in the
reservation's AZ for the GPU nodes, whose route table sends 0.0.0.0/0 to a NAT gateway (with an Elastic
IP) and S3 to a gateway VPC endpoint; and the node security group that EFA needs.

Pure: each function returns the keyword arguments of one EC2 call, or decides the layout;
``capserve.tasks.cluster.network`` looks up what exists by tag and sends only what is missing.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from capserve.core.cluster.naming import ClusterNames, campaign_tags, tag_list
from capserve.core.errors import PermanentError
from capserve.core.markdown import markdown_table

# EKS needs subnets in at least two Availability Zones for the control plane's network interfaces
# (EKS user guide, "View Amazon EKS networking requirements for VPC and subnets", "Subnet requirements
# for clusters"). The GPU nodes use only the reservation's AZ: a Capacity Block lives in exactly one AZ.
EKS_MIN_AZS = 2

# "The subnets can't reside in the following Availability Zones" (same page and section): the table of
# disallowed Availability Zone IDs, by region. Zone IDs, not names: an AZ name maps to a different
# physical zone in each account (AWS RAM user guide, "Availability Zone IDs for your AWS resources").
# The rule is for the cluster's subnets only; nodes may run there (same page, "Subnet requirements for
# nodes", has no such list), so a block in one of these zones still gets its GPU subnet there.
EKS_DISALLOWED_ZONE_IDS: frozenset[str] = frozenset({"use1-az3", "usw1-az2", "cac1-az3"})

# EC2 gives a public IPv4 address only to an instance launched with a single network interface
# (EC2 API reference, InstanceNetworkInterfaceSpecification, AssociatePublicIpAddress), and the GPU
# launch template has one interface per EFA card: the GPU nodes reach out only through a NAT gateway
# (EKS user guide, "Run machine learning training on Amazon EKS with Elastic Fabric Adapter":
# "The private subnet must have outbound internet access provided by an external device, such as a
# NAT gateway").


class Zone(BaseModel):
    """One Availability Zone of the region, as DescribeAvailabilityZones names it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=64, description="ZoneName, e.g. 'us-east-1e' (per account).")
    zone_id: str = Field(min_length=1, max_length=32, description="ZoneId, e.g. 'use1-az3' (one per physical zone).")

    @property
    def eks_control_plane_allowed(self) -> bool:
        return self.zone_id not in EKS_DISALLOWED_ZONE_IDS


class PlannedSubnet(BaseModel):
    """A subnet the layout asks for."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=128, description="Its Name tag (ClusterNames).")
    zone: Zone = Field(description="Where it lives.")
    public: bool = Field(description="True: routes 0.0.0.0/0 to the internet gateway, maps public IPv4 on launch.")
    control_plane: bool = Field(description="True: given to EKS CreateCluster and the system node group.")
    cidr_index: int = Field(ge=0, le=255, description="Which block of the VPC's CIDR it takes (subnet_cidr).")


def _sorted_zones(zones: list[Zone]) -> list[Zone]:
    return sorted(zones, key=lambda z: z.name)


def subnet_layout(names: ClusterNames, reservation_az: str, zones: list[Zone]) -> tuple[PlannedSubnet, ...]:
    """Public subnets first (the reservation's AZ first: the NAT gateway goes there, in the GPU nodes' AZ),
    then the private GPU subnet in the reservation's AZ.

    Control-plane subnets are public subnets in zones EKS allows (``EKS_DISALLOWED_ZONE_IDS``), the
    reservation's AZ first when allowed, then others in name order, ``EKS_MIN_AZS`` of them. When the
    reservation's AZ is disallowed it still gets a public subnet (for the NAT gateway) that is not given to EKS.
    """
    by_name = {z.name: z for z in zones}
    home = by_name.get(reservation_az)
    if home is None:
        raise PermanentError(
            f"the reservation's availability zone {reservation_az} is not among this region's zones "
            f"({', '.join(sorted(by_name)) or 'none'}): check the lease's region"
        )
    others = [z for z in _sorted_zones(zones) if z.name != reservation_az]
    allowed = [z for z in [home, *others] if z.eks_control_plane_allowed]
    if len(allowed) < EKS_MIN_AZS:
        refused = sorted(f"{z.name} ({z.zone_id})" for z in zones if not z.eks_control_plane_allowed)
        raise PermanentError(
            f"EKS needs control-plane subnets in {EKS_MIN_AZS} availability zones it allows; this region offers "
            f"{len(allowed)} ({', '.join(z.name for z in allowed) or 'none'}; EKS refuses "
            f"{', '.join(refused) or 'none'}): choose a block in another region"
        )
    control = allowed[:EKS_MIN_AZS]
    public_zones = [home, *[z for z in control if z.name != home.name]]
    planned = [
        PlannedSubnet(
            name=names.subnet(zone.name), zone=zone, public=True, control_plane=zone in control, cidr_index=index
        )
        for index, zone in enumerate(public_zones)
    ]
    planned.append(
        PlannedSubnet(
            name=names.private_subnet(home.name), zone=home, public=False, control_plane=False,
            cidr_index=PRIVATE_CIDR_INDEX,
        )
    )
    return tuple(planned)


# The VPC is cut into 16 blocks (subnet_cidr); public subnets take the first ones, the GPU subnet the
# ninth (the upper half), so the two kinds never collide whatever the number of public subnets.
PRIVATE_CIDR_INDEX = 8


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


def subnet_request(names: ClusterNames, vpc_id: str, vpc_cidr: str, subnet: PlannedSubnet) -> dict[str, Any]:
    kind = "public" if subnet.public else "private"
    tags = {**campaign_tags(names.campaign_id, "subnet", subnet.name), "capserve.io/subnet": kind}
    return {
        "VpcId": vpc_id,
        "CidrBlock": subnet_cidr(vpc_cidr, subnet.cidr_index),
        "AvailabilityZone": subnet.zone.name,
        "TagSpecifications": _tag_spec("subnet", tags),
    }


def internet_gateway_request(names: ClusterNames) -> dict[str, Any]:
    tags = campaign_tags(names.campaign_id, "internet-gateway", names.internet_gateway)
    return {"TagSpecifications": _tag_spec("internet-gateway", tags)}


def route_table_request(names: ClusterNames, vpc_id: str, name: str | None = None) -> dict[str, Any]:
    """A route table named ``name`` (default: the public one)."""
    tags = campaign_tags(names.campaign_id, "route-table", name or names.route_table)
    return {"VpcId": vpc_id, "TagSpecifications": _tag_spec("route-table", tags)}


def default_route_request(route_table_id: str, internet_gateway_id: str) -> dict[str, Any]:
    return {"RouteTableId": route_table_id, "DestinationCidrBlock": "0.0.0.0/0", "GatewayId": internet_gateway_id}


def nat_route_request(route_table_id: str, nat_gateway_id: str) -> dict[str, Any]:
    """The private route table's way out (CreateRoute / ReplaceRoute take the same arguments)."""
    return {"RouteTableId": route_table_id, "DestinationCidrBlock": "0.0.0.0/0", "NatGatewayId": nat_gateway_id}


def elastic_ip_request(names: ClusterNames) -> dict[str, Any]:
    """The NAT gateway's public address: a public NAT gateway needs an Elastic IP allocation at creation
    (EC2 API reference, CreateNatGateway, AllocationId; VPC user guide, "NAT gateways")."""
    tags = campaign_tags(names.campaign_id, "elastic-ip", names.nat_address)
    return {"Domain": "vpc", "TagSpecifications": _tag_spec("elastic-ip", tags)}


def nat_gateway_request(names: ClusterNames, public_subnet_id: str, allocation_id: str) -> dict[str, Any]:
    """A public NAT gateway in a public subnet (its traffic leaves through the internet gateway)."""
    tags = campaign_tags(names.campaign_id, "nat-gateway", names.nat_gateway)
    return {
        "SubnetId": public_subnet_id,
        "AllocationId": allocation_id,
        "ConnectivityType": "public",
        "TagSpecifications": _tag_spec("natgateway", tags),
    }


def s3_service_name(region: str) -> str:
    """The S3 gateway endpoint's service (VPC PrivateLink guide, "Gateway endpoints for Amazon S3")."""
    return f"com.amazonaws.{region}.s3"


def s3_endpoint_request(names: ClusterNames, vpc_id: str, region: str, route_table_id: str) -> dict[str, Any]:
    """A gateway endpoint on the private route table: the GPU nodes' S3 traffic (the weights) goes to S3
    directly, never through the NAT gateway and its per-GB charge (gateway endpoints cost nothing)."""
    tags = campaign_tags(names.campaign_id, "vpc-endpoint", names.s3_endpoint)
    return {
        "VpcEndpointType": "Gateway",
        "VpcId": vpc_id,
        "ServiceName": s3_service_name(region),
        "RouteTableIds": [route_table_id],
        "TagSpecifications": _tag_spec("vpc-endpoint", tags),
    }


# NAT gateway states (EC2 API reference, NatGateway.State): pending → available; deleting → deleted;
# failed. Only pending and available ones are the campaign's gateway; a deleting or deleted one is gone,
# and a failed one is deleted by AWS (VPC user guide, "NAT gateway basics").
LIVE_NAT_STATES: tuple[str, ...] = ("pending", "available")
# VPC endpoint states that are gone or going (EC2 API reference, VpcEndpoint.State).
GONE_ENDPOINT_STATES: frozenset[str] = frozenset({"deleting", "deleted", "rejected", "failed", "expired"})


def nat_route_target(routes: list[dict[str, Any]]) -> str | None:
    """What 0.0.0.0/0 points at in a route table: a NAT gateway id, another target's id, or None (no route)."""
    for route in routes:
        if route.get("DestinationCidrBlock") == "0.0.0.0/0":
            return str(route.get("NatGatewayId") or route.get("GatewayId") or route.get("NetworkInterfaceId") or "?")
    return None


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


class SubnetInfo(BaseModel):
    """One subnet of the campaign's network, as the report lists it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1, max_length=64, description="subnet-…")
    name: str = Field(min_length=1, max_length=128, description="Its Name tag.")
    availability_zone: str = Field(min_length=1, max_length=64, description="Zone name.")
    zone_id: str = Field(min_length=1, max_length=32, description="Zone ID (what EKS's zone rule is about).")
    cidr: str = Field(min_length=9, max_length=43, description="Its IPv4 CIDR block.")
    public: bool = Field(description="True: internet gateway route and public IPv4 on launch.")
    control_plane: bool = Field(description="True: one of the EKS control plane's (and system nodes') subnets.")


class NetworkIds(BaseModel):
    """What the network step found or made."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    vpc_id: str = Field(min_length=1, max_length=64, description="The campaign's VPC.")
    subnets: tuple[SubnetInfo, ...] = Field(min_length=EKS_MIN_AZS + 1, max_length=16, description="Every subnet.")
    gpu_subnet_id: str = Field(min_length=1, max_length=64, description="Private subnet in the reservation's AZ.")
    public_subnet_ids: tuple[str, ...] = Field(min_length=1, max_length=16, description="Public subnets.")
    control_plane_subnet_ids: tuple[str, ...] = Field(
        min_length=EKS_MIN_AZS, max_length=16, description="Subnets in zones EKS allows: control plane, system nodes."
    )
    security_group_id: str = Field(min_length=1, max_length=64, description="Node security group (EFA self-rule).")
    internet_gateway_id: str = Field(min_length=1, max_length=64, description="The VPC's internet gateway.")
    public_route_table_id: str = Field(min_length=1, max_length=64, description="0.0.0.0/0 → internet gateway.")
    private_route_table_id: str = Field(min_length=1, max_length=64, description="0.0.0.0/0 → NAT gateway.")
    nat_gateway_id: str = Field(min_length=1, max_length=64, description="The GPU subnet's way out.")
    nat_subnet_id: str = Field(min_length=1, max_length=64, description="The public subnet the NAT gateway is in.")
    eip_allocation_id: str = Field(min_length=1, max_length=64, description="The NAT gateway's Elastic IP.")
    nat_public_ip: str | None = Field(None, max_length=64, description="That address (the GPU nodes' source IP).")
    s3_endpoint_id: str = Field(min_length=1, max_length=64, description="S3 gateway endpoint on the private table.")
    created: tuple[str, ...] = Field(default=(), max_length=64, description="'kind/name' of what this run created.")

    @property
    def node_subnet_id(self) -> str:
        """The GPU nodes' subnet (the name callers used before the private subnet existed)."""
        return self.gpu_subnet_id

    @property
    def subnet_ids(self) -> tuple[str, ...]:
        """The EKS control plane's subnets (the name callers used before the private subnet existed)."""
        return self.control_plane_subnet_ids

    def markdown(self, gpu_interface_security_groups: tuple[str, ...] = ()) -> str:
        """The report's network table: each subnet, the NAT gateway, the endpoint, the security groups."""
        rows: list[dict[str, object]] = [
            {
                "subnet": f"{s.name} ({s.id})",
                "kind": "public" if s.public else "private",
                "zone": f"{s.availability_zone} ({s.zone_id})",
                "CIDR": s.cidr,
                "route out": ("internet gateway" if s.public else f"NAT gateway {self.nat_gateway_id}"),
                "uses": _subnet_uses(s, self),
            }
            for s in self.subnets
        ]
        nat_ip = f", address {self.nat_public_ip}" if self.nat_public_ip else ""
        groups = ", ".join(gpu_interface_security_groups) or "not recorded"
        return (
            f"Network: VPC {self.vpc_id}.\n\n{markdown_table(rows)}\n\n"
            f"NAT gateway {self.nat_gateway_id} in {self.nat_subnet_id} (Elastic IP {self.eip_allocation_id}{nat_ip}); "
            f"S3 gateway endpoint {self.s3_endpoint_id} on the private route table {self.private_route_table_id}.\n\n"
            f"Security groups: node group {self.security_group_id}; on the GPU interfaces: {groups}.\n"
        )


def _subnet_uses(subnet: SubnetInfo, network: NetworkIds) -> str:
    uses = []
    if subnet.id == network.gpu_subnet_id:
        uses.append("GPU nodes")
    if subnet.id == network.nat_subnet_id:
        uses.append("NAT gateway")
    if subnet.control_plane:
        uses.append("control plane, system nodes")
    return ", ".join(uses) or "—"
