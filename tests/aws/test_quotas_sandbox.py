"""Quotas as preflight reads them, and as the sandbox's EC2 enforces them (sandbox/capserve_sandbox/aws_ext/quotas.py):
one rule (capserve.core.quotas.fits), used by preflight before the purchase and by the sandbox when the prepare
run makes the network."""

from __future__ import annotations

from collections.abc import Iterator

import boto3
import pytest
from botocore.exceptions import ClientError
from capserve_sandbox.aws_ext import quotas as quotas_ext

from capserve.core.quotas import quota_problems
from capserve.tasks.preflight import quota_readings

REGION = "us-east-2"


@pytest.fixture(autouse=True)
def clean(sandbox: None) -> Iterator[None]:
    quotas_ext.reset()
    yield
    quotas_ext.reset()


def test_the_sandbox_account_leaves_room_for_a_campaign_and_a_rehearsal() -> None:
    readings = quota_readings.fn(REGION, network=True, on_demand=("p6-b200.48xlarge", 1))
    assert {r.quota.code: (r.limit, r.needed) for r in readings} == {
        "L-F678F1CE": (50, 1), "L-0263D0A3": (50, 1), "L-FE5A380F": (50, 1), "L-417A185B": (384, 192),
    }
    assert quota_problems(readings) == []
    # AWS's defaults stay readable apart from the account's applied values.
    default = boto3.client("service-quotas", region_name=REGION).get_aws_default_service_quota(
        ServiceCode="vpc", QuotaCode="L-F678F1CE")
    assert default["Quota"]["Value"] == 5


def test_usage_is_counted_and_a_full_quota_is_refused_by_preflight_and_by_ec2_alike() -> None:
    ec2 = boto3.client("ec2", region_name=REGION)
    ec2.allocate_address(Domain="vpc")
    quotas_ext.SETTINGS.applied["L-0263D0A3"] = 1  # one Elastic IP, and it is taken
    readings = quota_readings.fn(REGION, network=True, on_demand=None)
    [problem] = quota_problems(readings)
    assert "EC2-VPC Elastic IPs (L-0263D0A3) in us-east-2: 1 used of 1" in problem
    assert "request an increase of L-0263D0A3 in us-east-2 to at least 2" in problem
    with pytest.raises(ClientError, match="AddressLimitExceeded"):
        ec2.allocate_address(Domain="vpc")


def test_ec2_refuses_a_vpc_and_a_nat_gateway_over_their_quotas() -> None:
    ec2 = boto3.client("ec2", region_name=REGION)
    vpcs = len(ec2.describe_vpcs()["Vpcs"])
    quotas_ext.SETTINGS.applied["L-F678F1CE"] = vpcs + 1
    vpc = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    with pytest.raises(ClientError, match="VpcLimitExceeded"):
        ec2.create_vpc(CidrBlock="10.8.0.0/16")
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.9.0.0/20", AvailabilityZone=f"{REGION}a")["Subnet"]
    quotas_ext.SETTINGS.applied["L-FE5A380F"] = 1
    first = ec2.allocate_address(Domain="vpc")["AllocationId"]
    ec2.create_nat_gateway(SubnetId=subnet["SubnetId"], AllocationId=first)
    second = ec2.allocate_address(Domain="vpc")["AllocationId"]
    with pytest.raises(ClientError, match="NatGatewayLimitExceeded"):
        ec2.create_nat_gateway(SubnetId=subnet["SubnetId"], AllocationId=second)
    [nat] = [r for r in quota_readings.fn(REGION, network=True, on_demand=None) if r.quota.code == "L-FE5A380F"]
    assert (nat.used, nat.where.split()[0]) == (1, f"{REGION}a")
