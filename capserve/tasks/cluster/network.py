"""Converge the campaign's network: find each piece by tag, create only what is missing (docs/aws-network.md)."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import BotoCoreError, ClientError, WaiterError
from prefect.cache_policies import NO_CACHE

from capserve.core.cluster import network as build
from capserve.core.cluster.naming import ClusterNames
from capserve.tasks import aws
from capserve.tasks.cluster.common import only_one, tag_filters, wait_on_the_block, waiter_error
from capserve.tasks.resilience import aws_task


@aws_task(name="converge-network", cache_policy=NO_CACHE)
def converge_network(
    campaign_id: str,
    region: str,
    availability_zone: str,
    vpc_cidr: str,
    *,
    nat_timeout_s: float,
    poll_s: float,
) -> build.NetworkIds:
    """VPC; public subnets, internet gateway and public route; the NAT gateway (with its Elastic IP) in the
    reservation AZ's public subnet; the private GPU subnet, its route table (0.0.0.0/0 → NAT) and the S3
    gateway endpoint on it; the node security group. Waits until the NAT gateway is available."""
    names = ClusterNames(campaign_id=campaign_id)
    ec2 = aws.client("ec2", region)
    created: list[str] = []
    try:
        described = ec2.describe_availability_zones(Filters=[{"Name": "state", "Values": ["available"]}])
        zones = [
            build.Zone(name=z["ZoneName"], zone_id=z["ZoneId"])
            for z in described["AvailabilityZones"]
            # Local Zones and Wavelength Zones cannot hold an EKS control plane's subnets (EKS user guide,
            # VPC and subnet requirements); only the region's own Availability Zones are laid out.
            if z.get("ZoneType", "availability-zone") == "availability-zone"
        ]
        layout = build.subnet_layout(names, availability_zone, zones)

        vpc = only_one(ec2.describe_vpcs(Filters=tag_filters(campaign_id, names.vpc))["Vpcs"], names.vpc)
        if vpc is None:
            vpc = ec2.create_vpc(**build.vpc_request(names, vpc_cidr))["Vpc"]
            # Nodes register with EKS by their private DNS names (EKS user guide, VPC requirements).
            ec2.modify_vpc_attribute(VpcId=vpc["VpcId"], EnableDnsSupport={"Value": True})
            ec2.modify_vpc_attribute(VpcId=vpc["VpcId"], EnableDnsHostnames={"Value": True})
            created.append(f"vpc/{names.vpc}")
        vpc_id, cidr = vpc["VpcId"], vpc["CidrBlock"]

        subnets = [_converge_subnet(ec2, names, vpc_id, cidr, planned, created) for planned in layout]
        public = [s for s in subnets if s.public]
        gpu = next(s for s in subnets if not s.public)
        # The NAT gateway sits in the GPU nodes' AZ: their traffic does not cross an AZ boundary (billed per
        # GB each way) and an outage of another AZ does not cut them off (VPC user guide, "NAT gateways").
        nat_subnet = next(s for s in public if s.availability_zone == gpu.availability_zone)

        gateway_id, public_table_id = _converge_public_routing(ec2, names, vpc_id, [s.id for s in public], created)
        allocation_id, public_ip = _converge_address(ec2, names, created)
        nat_id = _converge_nat_gateway(ec2, names, nat_subnet.id, allocation_id, created)
        private_table_id = _converge_private_routing(ec2, names, vpc_id, gpu.id, nat_id, created)
        endpoint_id = _converge_s3_endpoint(ec2, names, vpc_id, region, private_table_id, created)
        security_group_id = _converge_security_group(ec2, names, vpc_id, created)
        _wait_nat_available(ec2, names, nat_id, nat_timeout_s, poll_s)
    except (ClientError, BotoCoreError) as exc:
        raise aws.convert(exc, f"network of campaign {campaign_id} in {region}") from exc
    return build.NetworkIds(
        vpc_id=vpc_id,
        subnets=tuple(subnets),
        gpu_subnet_id=gpu.id,
        public_subnet_ids=tuple(s.id for s in public),
        control_plane_subnet_ids=tuple(s.id for s in subnets if s.control_plane),
        security_group_id=security_group_id,
        internet_gateway_id=gateway_id,
        public_route_table_id=public_table_id,
        private_route_table_id=private_table_id,
        nat_gateway_id=nat_id,
        nat_subnet_id=nat_subnet.id,
        eip_allocation_id=allocation_id,
        nat_public_ip=public_ip,
        s3_endpoint_id=endpoint_id,
        created=tuple(created),
    )


def _converge_subnet(
    ec2: Any, names: ClusterNames, vpc_id: str, cidr: str, planned: build.PlannedSubnet, created: list[str]
) -> build.SubnetInfo:
    filters = [*tag_filters(names.campaign_id, planned.name), {"Name": "vpc-id", "Values": [vpc_id]}]
    subnet = only_one(ec2.describe_subnets(Filters=filters)["Subnets"], planned.name)
    if subnet is None:
        subnet = ec2.create_subnet(**build.subnet_request(names, vpc_id, cidr, planned))["Subnet"]
        created.append(f"subnet/{planned.name}")
    if planned.public and not subnet.get("MapPublicIpOnLaunch"):
        # Managed node groups in a public subnet fail to create unless its instances get a public address
        # (EKS user guide, "View Amazon EKS networking requirements for VPC and subnets"): the system nodes
        # reach ECR and the API this way.
        ec2.modify_subnet_attribute(SubnetId=subnet["SubnetId"], MapPublicIpOnLaunch={"Value": True})
    return build.SubnetInfo(
        id=subnet["SubnetId"],
        name=planned.name,
        availability_zone=planned.zone.name,
        zone_id=planned.zone.zone_id,
        cidr=subnet["CidrBlock"],
        public=planned.public,
        control_plane=planned.control_plane,
    )


def _route_table(ec2: Any, names: ClusterNames, vpc_id: str, name: str, created: list[str]) -> dict[str, Any]:
    filters = [*tag_filters(names.campaign_id, name), {"Name": "vpc-id", "Values": [vpc_id]}]
    table = only_one(ec2.describe_route_tables(Filters=filters)["RouteTables"], name)
    if table is None:
        table = ec2.create_route_table(**build.route_table_request(names, vpc_id, name))["RouteTable"]
        created.append(f"route-table/{name}")
    return dict(table)


def _associate(ec2: Any, table: dict[str, Any], subnet_ids: list[str]) -> None:
    associated = {a.get("SubnetId") for a in table.get("Associations", [])}
    for subnet_id in subnet_ids:
        if subnet_id not in associated:
            # A subnet has one route table: a new association replaces the VPC's main table for it.
            ec2.associate_route_table(RouteTableId=table["RouteTableId"], SubnetId=subnet_id)


def _converge_public_routing(
    ec2: Any, names: ClusterNames, vpc_id: str, subnet_ids: list[str], created: list[str]
) -> tuple[str, str]:
    found = ec2.describe_internet_gateways(Filters=tag_filters(names.campaign_id, names.internet_gateway))
    gateway = only_one(found["InternetGateways"], names.internet_gateway)
    if gateway is None:
        gateway = ec2.create_internet_gateway(**build.internet_gateway_request(names))["InternetGateway"]
        created.append(f"internet-gateway/{names.internet_gateway}")
    gateway_id = str(gateway["InternetGatewayId"])
    if not any(a.get("VpcId") == vpc_id for a in gateway.get("Attachments", [])):
        ec2.attach_internet_gateway(InternetGatewayId=gateway_id, VpcId=vpc_id)

    table = _route_table(ec2, names, vpc_id, names.route_table, created)
    if build.nat_route_target(table.get("Routes", [])) is None:
        ec2.create_route(**build.default_route_request(table["RouteTableId"], gateway_id))
    _associate(ec2, table, subnet_ids)
    return gateway_id, str(table["RouteTableId"])


def _converge_address(ec2: Any, names: ClusterNames, created: list[str]) -> tuple[str, str | None]:
    found = ec2.describe_addresses(Filters=tag_filters(names.campaign_id, names.nat_address))["Addresses"]
    address = only_one(found, names.nat_address)
    if address is None:
        address = ec2.allocate_address(**build.elastic_ip_request(names))
        created.append(f"elastic-ip/{names.nat_address}")
    return str(address["AllocationId"]), address.get("PublicIp")


def _converge_nat_gateway(
    ec2: Any, names: ClusterNames, subnet_id: str, allocation_id: str, created: list[str]
) -> str:
    # DescribeNatGateways spells its filter list "Filter" (EC2 API reference), not "Filters".
    filters = [
        *tag_filters(names.campaign_id, names.nat_gateway),
        {"Name": "state", "Values": list(build.LIVE_NAT_STATES)},
    ]
    gateway = only_one(ec2.describe_nat_gateways(Filter=filters)["NatGateways"], names.nat_gateway)
    if gateway is None:
        gateway = ec2.create_nat_gateway(**build.nat_gateway_request(names, subnet_id, allocation_id))["NatGateway"]
        created.append(f"nat-gateway/{names.nat_gateway}")
    return str(gateway["NatGatewayId"])


def _converge_private_routing(
    ec2: Any, names: ClusterNames, vpc_id: str, subnet_id: str, nat_id: str, created: list[str]
) -> str:
    table = _route_table(ec2, names, vpc_id, names.private_route_table, created)
    table_id = str(table["RouteTableId"])
    target = build.nat_route_target(table.get("Routes", []))
    if target is None:
        ec2.create_route(**build.nat_route_request(table_id, nat_id))
    elif target != nat_id:
        # A route to a NAT gateway that was deleted (a blackhole) or to something else: point it at ours.
        ec2.replace_route(**build.nat_route_request(table_id, nat_id))
    _associate(ec2, table, [subnet_id])
    return table_id


def _converge_s3_endpoint(
    ec2: Any, names: ClusterNames, vpc_id: str, region: str, table_id: str, created: list[str]
) -> str:
    filters = [
        *tag_filters(names.campaign_id, names.s3_endpoint),
        {"Name": "vpc-id", "Values": [vpc_id]},
        {"Name": "service-name", "Values": [build.s3_service_name(region)]},
    ]
    found = [
        e for e in ec2.describe_vpc_endpoints(Filters=filters)["VpcEndpoints"]
        if str(e.get("State", "")).lower() not in build.GONE_ENDPOINT_STATES
    ]
    endpoint = only_one(found, names.s3_endpoint)
    if endpoint is None:
        request = build.s3_endpoint_request(names, vpc_id, region, table_id)
        endpoint = ec2.create_vpc_endpoint(**request)["VpcEndpoint"]
        created.append(f"vpc-endpoint/{names.s3_endpoint}")
    elif table_id not in endpoint.get("RouteTableIds", []):
        ec2.modify_vpc_endpoint(VpcEndpointId=endpoint["VpcEndpointId"], AddRouteTableIds=[table_id])
    return str(endpoint["VpcEndpointId"])


def _wait_nat_available(ec2: Any, names: ClusterNames, nat_id: str, timeout_s: float, poll_s: float) -> None:
    """The GPU nodes' first image pull needs the NAT gateway: a node group created before it is available
    would start nodes with no way out."""
    what = f"NAT gateway {names.nat_gateway} ({nat_id}) to become available"
    try:
        wait_on_the_block(ec2.get_waiter("nat_gateway_available"), timeout_s, poll_s, NatGatewayIds=[nat_id])
    except WaiterError as exc:
        raise waiter_error(exc, what, timeout_s) from exc


def _converge_security_group(ec2: Any, names: ClusterNames, vpc_id: str, created: list[str]) -> str:
    filters = [{"Name": "vpc-id", "Values": [vpc_id]}, {"Name": "group-name", "Values": [names.security_group]}]
    group = only_one(ec2.describe_security_groups(Filters=filters)["SecurityGroups"], names.security_group)
    if group is None:
        group_id = ec2.create_security_group(**build.security_group_request(names, vpc_id))["GroupId"]
        created.append(f"security-group/{names.security_group}")
        group = {"GroupId": group_id, "IpPermissions": [], "IpPermissionsEgress": []}
    group_id = str(group["GroupId"])
    rules = build.self_reference_permissions(group_id)
    if not build.has_self_reference(group.get("IpPermissions", []), group_id):
        ec2.authorize_security_group_ingress(GroupId=group_id, IpPermissions=rules)
    if not build.has_self_reference(group.get("IpPermissionsEgress", []), group_id):
        ec2.authorize_security_group_egress(GroupId=group_id, IpPermissions=rules)
    return group_id
