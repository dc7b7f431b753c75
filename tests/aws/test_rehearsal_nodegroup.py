"""A rehearsal's GPU node group in the sandbox's EKS: on demand, no reservation, refused as EKS refuses a mismatch."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import boto3
import pytest
from botocore.exceptions import ClientError
from capserve_sandbox.aws_ext import eks as eks_ext

from capserve.core.lease import ON_DEMAND, ON_DEMAND_RESERVATION, Lease
from capserve.tasks.cluster.eks import converge_cluster, converge_launch_template, converge_nodegroup
from capserve.tasks.cluster.iam import converge_roles
from capserve.tasks.cluster.network import converge_network

REGION = "us-east-2"


@pytest.fixture
def events(sandbox: None) -> Iterator[list[eks_ext.NodePoolActivated]]:
    eks_ext.reset()
    seen: list[eks_ext.NodePoolActivated] = []
    eks_ext.NODE_HOOKS.append(seen.append)
    yield seen
    eks_ext.reset()


def on_demand_lease() -> Lease:
    now = datetime.now(UTC)
    return Lease(
        provider=ON_DEMAND, region=REGION, availability_zone=f"{REGION}a", reservation_id=ON_DEMAND_RESERVATION,
        start=now, end=now + timedelta(hours=2), instance_type="p6-b200.48xlarge", instance_count=1, upfront_fee=0.0,
    )


def test_an_on_demand_node_group_launches_its_nodes_without_a_reservation(
    events: list[eks_ext.NodePoolActivated],
) -> None:
    campaign, lease = "rh-ondemand", on_demand_lease()
    network = converge_network.fn(campaign, REGION, lease.availability_zone, "10.64.0.0/16",
                                  nat_timeout_s=900, poll_s=0)
    roles = converge_roles.fn(campaign, "eks", REGION)
    cluster = converge_cluster.fn(
        campaign, REGION, kubernetes_version="1.34", role_arn=roles.by_component["eks-cluster-role"],
        subnet_ids=list(network.control_plane_subnet_ids), security_group_id=network.security_group_id,
        timeout_s=60, poll_s=0,
    )
    template = converge_launch_template.fn(
        campaign, lease, network.security_group_id, cluster_security_group_id=cluster.cluster_security_group_id
    )
    converge_nodegroup.fn(
        campaign, lease, cluster_name=cluster.name, node_role_arn=roles.by_component["eks-node-role"],
        subnet_id=network.gpu_subnet_id, launch_template=template, timeout_s=60, poll_s=0,
    )
    group = boto3.client("eks", region_name=REGION).describe_nodegroup(
        clusterName=cluster.name, nodegroupName=f"capserve-{campaign}-gpu"
    )["nodegroup"]
    assert (group["status"], group["capacityType"]) == ("ACTIVE", "ON_DEMAND")
    data = boto3.client("ec2", region_name=REGION).describe_launch_template_versions(
        LaunchTemplateId=template.id, Versions=[template.version]
    )["LaunchTemplateVersions"][0]["LaunchTemplateData"]
    assert "InstanceMarketOptions" not in data
    assert "CapacityReservationSpecification" not in data
    assert [(e.pool, e.count, e.instance_type, e.zone) for e in events] == [
        (f"capserve-{campaign}-gpu", 1, "p6-b200.48xlarge", f"{REGION}a")
    ]


def _template(name: str, data: dict[str, object]) -> str:
    ec2 = boto3.client("ec2", region_name=REGION)
    return str(ec2.create_launch_template(LaunchTemplateName=name, LaunchTemplateData=data)
               ["LaunchTemplate"]["LaunchTemplateId"])


def _cluster(name: str) -> None:
    ec2 = boto3.client("ec2", region_name=REGION)
    vpc = ec2.create_vpc(CidrBlock="10.70.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.70.1.0/24", AvailabilityZone=f"{REGION}a")["Subnet"]
    eks = boto3.client("eks", region_name=REGION)
    eks.create_cluster(
        name=name, roleArn="arn:aws:iam::123456789012:role/c", resourcesVpcConfig={"subnetIds": [subnet["SubnetId"]]}
    )
    # The sandbox's clusters turn ACTIVE after a few describes (moto refuses node groups on a CREATING cluster).
    describes = range(eks_ext.BEHAVIOUR.describes_until_active)
    statuses = [eks.describe_cluster(name=name)["cluster"]["status"] for _ in describes]
    assert statuses[-1] == "ACTIVE"


@pytest.mark.parametrize(
    ("capacity_type", "template", "refusal"),
    [
        ("CAPACITY_BLOCK", {"InstanceType": "p6-b200.48xlarge"}, "needs a launch template with InstanceMarket"),
        (
            "ON_DEMAND",
            {
                "InstanceType": "p6-b200.48xlarge",
                "InstanceMarketOptions": {"MarketType": "capacity-block"},
                "CapacityReservationSpecification": {
                    "CapacityReservationTarget": {"CapacityReservationId": "cr-0123456789abcdef0"}
                },
            },
            "does not take",
        ),
    ],
)
def test_eks_refuses_a_capacity_type_its_launch_template_contradicts(
    events: list[eks_ext.NodePoolActivated], capacity_type: str, template: dict[str, object], refusal: str
) -> None:
    cluster = f"rh-mismatch-{capacity_type.lower().replace('_', '-')}"
    _cluster(cluster)
    template_id = _template(f"{cluster}-lt", template)
    eks = boto3.client("eks", region_name=REGION)
    with pytest.raises(ClientError) as caught:
        eks.create_nodegroup(
            clusterName=cluster, nodegroupName="gpu", subnets=["subnet-12345678"],
            nodeRole="arn:aws:iam::123456789012:role/n", capacityType=capacity_type,
            launchTemplate={"id": template_id, "version": "1"},
        )
    assert caught.value.response["Error"]["Code"] == "InvalidParameterException"
    assert refusal in str(caught.value)
    assert eks.list_nodegroups(clusterName=cluster)["nodegroups"] == []
