"""The campaign network's pure layout and requests: private GPU subnet, NAT, S3 endpoint, EKS's zone rule."""

from __future__ import annotations

import boto3
import pytest
from botocore.stub import Stubber

from capserve.core.cluster import network
from capserve.core.cluster.naming import ClusterNames
from capserve.core.errors import PermanentError
from capserve.core.tags import CAMPAIGN_TAG

NAMES = ClusterNames(campaign_id="k3-demo")
# moto's and AWS's documented zone table for us-east-1 in one account: us-east-1e is use1-az3.
US_EAST_1 = [
    network.Zone(name="us-east-1a", zone_id="use1-az6"),
    network.Zone(name="us-east-1b", zone_id="use1-az1"),
    network.Zone(name="us-east-1c", zone_id="use1-az2"),
    network.Zone(name="us-east-1e", zone_id="use1-az3"),
]


def _layout(az: str, zones: list[network.Zone]) -> list[tuple[str, str, bool, bool]]:
    return [(s.name, s.zone.name, s.public, s.control_plane) for s in network.subnet_layout(NAMES, az, zones)]


def test_gpu_subnet_is_private_in_the_blocks_zone_and_the_control_plane_gets_two_public_ones() -> None:
    zones = [network.Zone(name=f"us-east-2{x}", zone_id=f"use2-az{i}") for i, x in enumerate("cab", start=1)]
    assert _layout("us-east-2b", zones) == [
        ("capserve-k3-demo-us-east-2b", "us-east-2b", True, True),  # the NAT gateway's, in the GPU nodes' AZ
        ("capserve-k3-demo-us-east-2a", "us-east-2a", True, True),
        ("capserve-k3-demo-private-us-east-2b", "us-east-2b", False, False),
    ]


def test_a_block_in_a_zone_eks_refuses_keeps_its_gpu_subnet_there_but_not_the_control_plane() -> None:
    layout = network.subnet_layout(NAMES, "us-east-1e", US_EAST_1)
    control = [s.zone.zone_id for s in layout if s.control_plane]
    assert control == ["use1-az6", "use1-az1"]  # us-east-1a and us-east-1b, chosen by zone ID
    gpu = [s for s in layout if not s.public]
    assert [(s.zone.name, s.zone.zone_id) for s in gpu] == [("us-east-1e", "use1-az3")]
    # The block's zone still has a public subnet for the NAT gateway, which is not given to EKS.
    assert [(s.zone.name, s.control_plane) for s in layout if s.public] == [
        ("us-east-1e", False), ("us-east-1a", True), ("us-east-1b", True),
    ]
    assert len({s.cidr_index for s in layout}) == len(layout)


def test_the_disallowed_zone_ids_are_the_eks_user_guides() -> None:
    assert network.EKS_DISALLOWED_ZONE_IDS == {"use1-az3", "usw1-az2", "cac1-az3"}
    assert not network.Zone(name="us-west-1c", zone_id="usw1-az2").eks_control_plane_allowed


def test_a_region_without_two_allowed_zones_is_refused_naming_the_refused_ones() -> None:
    zones = [network.Zone(name="us-west-1b", zone_id="usw1-az1"), network.Zone(name="us-west-1c", zone_id="usw1-az2")]
    with pytest.raises(PermanentError, match=r"EKS refuses us-west-1c \(usw1-az2\)"):
        network.subnet_layout(NAMES, "us-west-1b", zones)


def test_an_unknown_zone_is_refused() -> None:
    with pytest.raises(PermanentError, match="us-west-2a is not among this region's zones"):
        network.subnet_layout(NAMES, "us-west-2a", US_EAST_1)


def test_nat_route_target_tells_what_the_default_route_points_at() -> None:
    local = {"DestinationCidrBlock": "10.64.0.0/16", "GatewayId": "local"}
    assert network.nat_route_target([local]) is None
    assert network.nat_route_target([local, {"DestinationCidrBlock": "0.0.0.0/0", "NatGatewayId": "nat-1"}]) == "nat-1"
    assert network.nat_route_target([{"DestinationCidrBlock": "0.0.0.0/0", "GatewayId": "igw-1"}]) == "igw-1"


def _validated(operation: str, request: dict[str, object]) -> None:
    """botocore validates the request against EC2's service model (a wrong member name raises)."""
    client = boto3.client("ec2", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(client) as stub:
        stub.add_response(operation, {})
        getattr(client, operation)(**request)


def test_egress_requests_match_the_service_model_and_carry_the_campaign_tag() -> None:
    address = network.elastic_ip_request(NAMES)
    nat = network.nat_gateway_request(NAMES, "subnet-1", "eipalloc-1")
    endpoint = network.s3_endpoint_request(NAMES, "vpc-1", "us-east-1", "rtb-1")
    route = network.nat_route_request("rtb-1", "nat-1")
    for operation, request in (("allocate_address", address), ("create_nat_gateway", nat),
                               ("create_vpc_endpoint", endpoint), ("create_route", route),
                               ("replace_route", route)):
        _validated(operation, request)
    assert endpoint["ServiceName"] == "com.amazonaws.us-east-1.s3" and endpoint["VpcEndpointType"] == "Gateway"
    assert nat["ConnectivityType"] == "public" and nat["AllocationId"] == "eipalloc-1"
    for request, kind in ((address, "elastic-ip"), (nat, "natgateway"), (endpoint, "vpc-endpoint")):
        spec = request["TagSpecifications"][0]  # type: ignore[index]
        assert spec["ResourceType"] == kind and {"Key": CAMPAIGN_TAG, "Value": "k3-demo"} in spec["Tags"]


def test_the_report_lists_each_subnet_with_kind_zone_id_and_the_nat_and_endpoint() -> None:
    subnets = (
        network.SubnetInfo(id="subnet-a", name="p-a", availability_zone="us-east-1e", zone_id="use1-az3",
                           cidr="10.64.0.0/20", public=True, control_plane=False),
        network.SubnetInfo(id="subnet-b", name="p-b", availability_zone="us-east-1a", zone_id="use1-az6",
                           cidr="10.64.16.0/20", public=True, control_plane=True),
        network.SubnetInfo(id="subnet-c", name="p-c", availability_zone="us-east-1b", zone_id="use1-az1",
                           cidr="10.64.32.0/20", public=True, control_plane=True),
        network.SubnetInfo(id="subnet-g", name="gpu", availability_zone="us-east-1e", zone_id="use1-az3",
                           cidr="10.64.128.0/20", public=False, control_plane=False),
    )
    ids = network.NetworkIds(
        vpc_id="vpc-1", subnets=subnets, gpu_subnet_id="subnet-g", public_subnet_ids=("subnet-a", "subnet-b"),
        control_plane_subnet_ids=("subnet-b", "subnet-c"), security_group_id="sg-n", internet_gateway_id="igw-1",
        public_route_table_id="rtb-p", private_route_table_id="rtb-g", nat_gateway_id="nat-1",
        nat_subnet_id="subnet-a", eip_allocation_id="eipalloc-1", nat_public_ip="3.3.3.3", s3_endpoint_id="vpce-1",
    )
    text = ids.markdown(("sg-n", "sg-cluster"))
    gpu_row = "| gpu (subnet-g) | private | us-east-1e (use1-az3) | 10.64.128.0/20 | NAT gateway nat-1 | GPU nodes |"
    nat_row = "| p-a (subnet-a) | public | us-east-1e (use1-az3) | 10.64.0.0/20 | internet gateway | NAT gateway |"
    assert gpu_row in text and nat_row in text
    assert "NAT gateway nat-1 in subnet-a (Elastic IP eipalloc-1, address 3.3.3.3)" in text
    assert "S3 gateway endpoint vpce-1" in text and "on the GPU interfaces: sg-n, sg-cluster" in text
    assert "on the GPU interfaces: not recorded" in ids.markdown()
    assert (ids.node_subnet_id, ids.subnet_ids) == ("subnet-g", ("subnet-b", "subnet-c"))
