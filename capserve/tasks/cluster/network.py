"""Converge the campaign's network: find each piece by tag, create only what is missing."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from prefect.cache_policies import NO_CACHE

from capserve.core.cluster import network as build
from capserve.core.cluster.naming import ClusterNames
from capserve.tasks import aws
from capserve.tasks.cluster.common import only_one, tag_filters
from capserve.tasks.resilience import aws_task


@aws_task(name="converge-network", cache_policy=NO_CACHE)
def converge_network(campaign_id: str, region: str, availability_zone: str, vpc_cidr: str) -> build.NetworkIds:
    """VPC, subnets (the reservation's AZ first), internet gateway and route, node security group."""
    names = ClusterNames(campaign_id=campaign_id)
    ec2 = aws.client("ec2", region)
    created: list[str] = []
    try:
        zones = ec2.describe_availability_zones(Filters=[{"Name": "state", "Values": ["available"]}])
        azs = build.subnet_azs(availability_zone, [z["ZoneName"] for z in zones["AvailabilityZones"]])

        vpc = only_one(ec2.describe_vpcs(Filters=tag_filters(campaign_id, names.vpc))["Vpcs"], names.vpc)
        if vpc is None:
            vpc = ec2.create_vpc(**build.vpc_request(names, vpc_cidr))["Vpc"]
            # Nodes register with EKS by their private DNS names (EKS user guide, VPC requirements).
            ec2.modify_vpc_attribute(VpcId=vpc["VpcId"], EnableDnsSupport={"Value": True})
            ec2.modify_vpc_attribute(VpcId=vpc["VpcId"], EnableDnsHostnames={"Value": True})
            created.append(f"vpc/{names.vpc}")
        vpc_id, cidr = vpc["VpcId"], vpc["CidrBlock"]

        subnet_ids = []
        for index, zone in enumerate(azs):
            name = names.subnet(zone)
            found = ec2.describe_subnets(
                Filters=[*tag_filters(campaign_id, name), {"Name": "vpc-id", "Values": [vpc_id]}]
            )
            subnet = only_one(found["Subnets"], name)
            if subnet is None:
                subnet = ec2.create_subnet(**build.subnet_request(names, vpc_id, cidr, zone, index))["Subnet"]
                created.append(f"subnet/{name}")
            if not subnet.get("MapPublicIpOnLaunch"):
                # Managed node groups in a public subnet fail to create unless its instances get a
                # public address (EKS user guide, "View Amazon EKS networking requirements for VPC
                # and subnets"; docs/serving.md §5.1): the system nodes reach ECR and the API this way.
                ec2.modify_subnet_attribute(SubnetId=subnet["SubnetId"], MapPublicIpOnLaunch={"Value": True})
            subnet_ids.append(subnet["SubnetId"])

        _converge_routing(ec2, names, vpc_id, subnet_ids, created)
        security_group_id = _converge_security_group(ec2, names, vpc_id, created)
    except (ClientError, BotoCoreError) as exc:
        raise aws.convert(exc, f"network of campaign {campaign_id} in {region}") from exc
    return build.NetworkIds(
        vpc_id=vpc_id,
        node_subnet_id=subnet_ids[0],
        subnet_ids=tuple(subnet_ids),
        security_group_id=security_group_id,
        created=tuple(created),
    )


def _converge_routing(ec2: Any, names: ClusterNames, vpc_id: str, subnet_ids: list[str], created: list[str]) -> None:
    campaign_id = names.campaign_id
    found = ec2.describe_internet_gateways(Filters=tag_filters(campaign_id, names.internet_gateway))
    gateway = only_one(found["InternetGateways"], names.internet_gateway)
    if gateway is None:
        gateway = ec2.create_internet_gateway(**build.internet_gateway_request(names))["InternetGateway"]
        created.append(f"internet-gateway/{names.internet_gateway}")
    gateway_id = gateway["InternetGatewayId"]
    if not any(a.get("VpcId") == vpc_id for a in gateway.get("Attachments", [])):
        ec2.attach_internet_gateway(InternetGatewayId=gateway_id, VpcId=vpc_id)

    filters = [*tag_filters(campaign_id, names.route_table), {"Name": "vpc-id", "Values": [vpc_id]}]
    table = only_one(ec2.describe_route_tables(Filters=filters)["RouteTables"], names.route_table)
    if table is None:
        table = ec2.create_route_table(**build.route_table_request(names, vpc_id))["RouteTable"]
        created.append(f"route-table/{names.route_table}")
    table_id = table["RouteTableId"]
    if not any(r.get("DestinationCidrBlock") == "0.0.0.0/0" for r in table.get("Routes", [])):
        ec2.create_route(**build.default_route_request(table_id, gateway_id))
    associated = {a.get("SubnetId") for a in table.get("Associations", [])}
    for subnet_id in subnet_ids:
        if subnet_id not in associated:
            ec2.associate_route_table(RouteTableId=table_id, SubnetId=subnet_id)


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
