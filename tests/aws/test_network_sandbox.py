"""The campaign's network against the sandbox's moto: converge (private GPU subnet, NAT gateway, S3 endpoint),
EKS's zone rule, and the NAT gateway / Elastic IP lifecycle the teardown relies on (capserve_sandbox.aws_ext.network).

Campaign ids differ per test: moto's backends live for the whole module.
"""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from capserve_sandbox.aws_ext import eks as eks_ext

from capserve.core.errors import PermanentError
from capserve.core.tags import CAMPAIGN_TAG
from capserve.tasks.cluster.eks import converge_cluster
from capserve.tasks.cluster.iam import converge_roles
from capserve.tasks.cluster.network import converge_network

REGION = "us-east-2"
CIDR = "10.64.0.0/16"


def ec2(region: str = REGION) -> Any:
    return boto3.client("ec2", region_name=region)


def ours(campaign: str) -> list[dict[str, Any]]:
    return [{"Name": f"tag:{CAMPAIGN_TAG}", "Values": [campaign]}]


def tagged(campaign: str, kind: str, name: str) -> list[dict[str, Any]]:
    tags = [{"Key": CAMPAIGN_TAG, "Value": campaign}, {"Key": "Name", "Value": name}]
    return [{"ResourceType": kind, "Tags": tags}]


def test_gpu_subnet_routes_out_through_the_nat_gateway_and_s3_through_the_endpoint(sandbox: None) -> None:
    network = converge_network.fn("net-a", REGION, f"{REGION}b", CIDR, nat_timeout_s=900, poll_s=0)
    client = ec2()
    table = client.describe_route_tables(RouteTableIds=[network.private_route_table_id])["RouteTables"][0]
    assert [a["SubnetId"] for a in table["Associations"]] == [network.gpu_subnet_id]
    default = [r for r in table["Routes"] if r.get("DestinationCidrBlock") == "0.0.0.0/0"]
    assert [r.get("NatGatewayId") for r in default] == [network.nat_gateway_id]
    assert any(r.get("GatewayId") == network.s3_endpoint_id for r in table["Routes"])  # the S3 prefix list
    gateway = client.describe_nat_gateways(NatGatewayIds=[network.nat_gateway_id])["NatGateways"][0]
    assert gateway["State"] == "available" and gateway["SubnetId"] == network.nat_subnet_id
    assert gateway["NatGatewayAddresses"][0]["AllocationId"] == network.eip_allocation_id
    nat_subnet = client.describe_subnets(SubnetIds=[network.nat_subnet_id])["Subnets"][0]
    gpu_subnet = client.describe_subnets(SubnetIds=[network.gpu_subnet_id])["Subnets"][0]
    assert nat_subnet["AvailabilityZone"] == gpu_subnet["AvailabilityZone"] == f"{REGION}b"
    assert nat_subnet["MapPublicIpOnLaunch"] and not gpu_subnet["MapPublicIpOnLaunch"]
    assert network.gpu_subnet_id not in network.control_plane_subnet_ids

    eks_ext.clear_calls()
    again = converge_network.fn("net-a", REGION, f"{REGION}b", CIDR, nat_timeout_s=900, poll_s=0)
    assert again.created == () and again.nat_gateway_id == network.nat_gateway_id
    made = [c.action for c in eks_ext.calls("ec2") if c.action.startswith(("Create", "Allocate", "Associate"))]
    assert made == []


def test_a_deleted_nat_gateway_is_replaced_and_the_route_moved_to_the_new_one(sandbox: None) -> None:
    first = converge_network.fn("net-b", REGION, f"{REGION}a", CIDR, nat_timeout_s=900, poll_s=0)
    client = ec2()
    client.delete_nat_gateway(NatGatewayId=first.nat_gateway_id)
    client.get_waiter("nat_gateway_deleted").wait(
        NatGatewayIds=[first.nat_gateway_id], WaiterConfig={"Delay": 0, "MaxAttempts": 3}
    )
    second = converge_network.fn("net-b", REGION, f"{REGION}a", CIDR, nat_timeout_s=900, poll_s=0)
    assert second.created == ("nat-gateway/capserve-net-b-nat",) and second.nat_gateway_id != first.nat_gateway_id
    assert second.eip_allocation_id == first.eip_allocation_id  # the address came free and is reused
    table = client.describe_route_tables(RouteTableIds=[second.private_route_table_id])["RouteTables"][0]
    default = [r for r in table["Routes"] if r.get("DestinationCidrBlock") == "0.0.0.0/0"]
    assert [r.get("NatGatewayId") for r in default] == [second.nat_gateway_id]


def test_eks_refuses_a_control_plane_subnet_in_a_disallowed_zone_id(sandbox: None) -> None:
    client = ec2("us-east-1")
    zones = {z["ZoneName"]: z["ZoneId"] for z in client.describe_availability_zones()["AvailabilityZones"]}
    assert zones["us-east-1e"] == "use1-az3"
    vpc = client.create_vpc(CidrBlock="10.31.0.0/16")["Vpc"]["VpcId"]
    subnets = [
        client.create_subnet(VpcId=vpc, CidrBlock=f"10.31.{i * 16}.0/20", AvailabilityZone=zone)["Subnet"]["SubnetId"]
        for i, zone in enumerate(["us-east-1e", "us-east-1a"])
    ]
    with pytest.raises(ClientError, match="UnsupportedAvailabilityZoneException") as raised:
        boto3.client("eks", region_name="us-east-1").create_cluster(
            name="refused", roleArn="arn:aws:iam::123456789012:role/x", resourcesVpcConfig={"subnetIds": subnets}
        )
    error = raised.value.response
    assert error["Error"]["Message"].startswith(
        "Cannot create cluster 'refused' because us-east-1e, the targeted Availability Zone, does not currently"
    )
    assert "us-east-1e" not in error["validZones"] and "us-east-1a" in error["validZones"]
    assert error["ResponseMetadata"]["HTTPStatusCode"] == 400


def test_a_block_in_use1_az3_gets_its_gpu_subnet_there_and_a_control_plane_eks_accepts(sandbox: None) -> None:
    region = "us-east-1"
    network = converge_network.fn("net-az3", region, "us-east-1e", CIDR, nat_timeout_s=900, poll_s=0)
    zone_ids = {s.id: s.zone_id for s in network.subnets}
    assert zone_ids[network.gpu_subnet_id] == "use1-az3"
    assert "use1-az3" not in {zone_ids[s] for s in network.control_plane_subnet_ids}
    roles = converge_roles.fn("net-az3", "eks", region)
    cluster = converge_cluster.fn(
        "net-az3", region, kubernetes_version="1.34", role_arn=roles.by_component["eks-cluster-role"],
        subnet_ids=list(network.control_plane_subnet_ids), security_group_id=network.security_group_id,
        timeout_s=60, poll_s=0,
    )
    assert cluster.name == "capserve-net-az3"
    # What bring-up did before: every subnet, the block's zone first. EKS refuses it.
    with pytest.raises(PermanentError, match="UnsupportedAvailabilityZoneException"):
        converge_cluster.fn(
            "net-az3-old", region, kubernetes_version="1.34", role_arn=roles.by_component["eks-cluster-role"],
            subnet_ids=[network.gpu_subnet_id, *network.control_plane_subnet_ids],
            security_group_id=network.security_group_id, timeout_s=60, poll_s=0,
        )


def test_nat_gateway_lifecycle_and_what_it_holds_until_deleted(sandbox: None) -> None:
    client = ec2()
    vpc = client.create_vpc(CidrBlock="10.41.0.0/16")["Vpc"]["VpcId"]
    subnet = client.create_subnet(VpcId=vpc, CidrBlock="10.41.0.0/20", AvailabilityZone=f"{REGION}a")["Subnet"]
    address = client.allocate_address(Domain="vpc", TagSpecifications=tagged("net-life", "elastic-ip", "ip"))
    created = client.create_nat_gateway(
        SubnetId=subnet["SubnetId"], AllocationId=address["AllocationId"],
        TagSpecifications=tagged("net-life", "natgateway", "nat"),
    )["NatGateway"]
    nat_id = created["NatGatewayId"]
    assert created["State"] == "pending"
    # Tag filters select (stock moto ignored them and answered every NAT gateway).
    assert client.describe_nat_gateways(Filter=ours("net-someone-else"))["NatGateways"] == []
    states = [client.describe_nat_gateways(Filter=ours("net-life"))["NatGateways"][0]["State"] for _ in range(2)]
    assert states == ["pending", "available"]

    with pytest.raises(ClientError, match="InvalidIPAddress.InUse"):
        client.release_address(AllocationId=address["AllocationId"])
    client.delete_nat_gateway(NatGatewayId=nat_id)
    with pytest.raises(ClientError, match="DependencyViolation"):
        client.delete_subnet(SubnetId=subnet["SubnetId"])
    states = [client.describe_nat_gateways(NatGatewayIds=[nat_id])["NatGateways"][0]["State"] for _ in range(2)]
    assert states == ["deleting", "deleted"]
    # Deleted: the Elastic IP is disassociated (not released), the subnet is free.
    assert "AssociationId" not in client.describe_addresses(AllocationIds=[address["AllocationId"]])["Addresses"][0]
    client.release_address(AllocationId=address["AllocationId"])
    client.delete_subnet(SubnetId=subnet["SubnetId"])
    with pytest.raises(ClientError, match="NatGatewayNotFound"):
        client.delete_nat_gateway(NatGatewayId="nat-0123456789abcdef0")
