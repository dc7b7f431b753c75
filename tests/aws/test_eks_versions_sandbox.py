"""The sandbox's EKS creates clusters only on the versions EKS supports: the table the spec is checked against."""

from __future__ import annotations

import boto3
import pytest
from botocore.exceptions import ClientError

REGION = "us-east-2"


def _create(name: str, version: str) -> None:
    ec2 = boto3.client("ec2", region_name=REGION)
    vpc = ec2.create_vpc(CidrBlock="10.8.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.8.0.0/20", AvailabilityZone=f"{REGION}a")["Subnet"]["SubnetId"]
    boto3.client("eks", region_name=REGION).create_cluster(
        name=name, version=version, roleArn="arn:aws:iam::123456789012:role/x",
        resourcesVpcConfig={"subnetIds": [subnet]},
    )


def test_create_cluster_on_a_version_eks_lacks_is_refused(sandbox: None) -> None:
    with pytest.raises(ClientError) as caught:
        _create("versions-old", "1.39")
    assert caught.value.response["Error"]["Code"] == "InvalidParameterException"
    assert "EKS has no Kubernetes version '1.39'" in caught.value.response["Error"]["Message"]
    assert "versions-old" not in boto3.client("eks", region_name=REGION).list_clusters()["clusters"]


def test_create_cluster_on_a_supported_version_is_made(sandbox: None) -> None:
    _create("versions-ok", "1.34")
    assert "versions-ok" in boto3.client("eks", region_name=REGION).list_clusters()["clusters"]
