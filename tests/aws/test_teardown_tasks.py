"""Teardown's tasks against the sandbox's moto (+ EKS/HyperPod extensions): inventory, plan, execute.

moto parses every request with botocore's service model, so each delete/describe here is also a
request validation. Campaign ids differ per test: moto's backends live for the whole module.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import boto3
import pytest
from capserve_sandbox.aws import moto_sandbox
from capserve_sandbox.aws_ext import eks as eks_ext

from capserve.core.errors import PermanentError
from capserve.core.lease import Lease
from capserve.core.progress import PREFIX, unstamped
from capserve.core.tags import CAMPAIGN_TAG
from capserve.core.teardown.plan import Phase, plan_teardown
from capserve.core.teardown.settings import TeardownSettings
from capserve.tasks.cluster.eks import (
    converge_cluster,
    converge_launch_template,
    converge_nodegroup,
    converge_system_nodegroup,
)
from capserve.tasks.cluster.iam import converge_roles
from capserve.tasks.cluster.network import converge_network
from capserve.tasks.teardown.execute import execute_plan
from capserve.tasks.teardown.inventory import inventory_campaign
from capserve.tasks.teardown.sightings import find_campaigns

REGION = "us-east-2"
FAST = TeardownSettings(poll_seconds=0, dependency_retry_timeout_s=0, delete_workloads=False)


@pytest.fixture(scope="module")
def sandbox() -> Iterator[None]:
    with moto_sandbox(REGION):
        eks_ext.reset()
        yield
        eks_ext.reset()


def lease() -> Lease:
    now = datetime.now(UTC)
    return Lease(
        provider="ec2-capacity-block", region=REGION, availability_zone=f"{REGION}b",
        reservation_id="cr-0123456789abcdef0", start=now - timedelta(hours=1), end=now + timedelta(days=1),
        instance_type="p6-b300.48xlarge", instance_count=1, upfront_fee=1.0,
    )


def bring_up_eks(campaign: str) -> None:
    """Bring-up's own converge tasks, as the bring_up flow runs them (without Kubernetes)."""
    network = converge_network.fn(campaign, REGION, f"{REGION}b", "10.64.0.0/16", nat_timeout_s=900, poll_s=0)
    roles = converge_roles.fn(campaign, "eks", REGION)
    cluster = converge_cluster.fn(
        campaign, REGION, kubernetes_version="1.34", role_arn=roles.by_component["eks-cluster-role"],
        subnet_ids=list(network.control_plane_subnet_ids), security_group_id=network.security_group_id,
        timeout_s=60, poll_s=0,
    )
    template = converge_launch_template.fn(
        campaign, lease(), network.security_group_id, cluster_security_group_id=cluster.cluster_security_group_id
    )
    converge_nodegroup.fn(
        campaign, lease(), cluster_name=cluster.name, node_role_arn=roles.by_component["eks-node-role"],
        subnet_id=network.gpu_subnet_id, launch_template=template, timeout_s=60, poll_s=0,
    )
    converge_system_nodegroup.fn(
        campaign, REGION, cluster_name=cluster.name, node_role_arn=roles.by_component["eks-node-role"],
        subnet_ids=list(network.control_plane_subnet_ids), instance_type="m7i.large", node_count=2,
        timeout_s=60, poll_s=0,
    )


def tagged_vpcs(campaign: str) -> list[str]:
    found = boto3.client("ec2").describe_vpcs(Filters=[{"Name": f"tag:{CAMPAIGN_TAG}", "Values": [campaign]}])
    return [v["VpcId"] for v in found["Vpcs"]]


def role_exists(name: str) -> bool:
    try:
        boto3.client("iam").get_role(RoleName=name)
    except boto3.client("iam").exceptions.NoSuchEntityException:
        return False
    return True


def test_eks_campaign_is_deleted_in_order_and_nothing_else_is(sandbox: None) -> None:
    bring_up_eks("td-a")
    bring_up_eks("td-other")
    ec2 = boto3.client("ec2")
    untagged = ec2.create_vpc(CidrBlock="10.99.0.0/16")["Vpc"]["VpcId"]

    inventory = inventory_campaign.fn("td-a", REGION, kind="eks", settings=FAST)
    assert inventory.missing == () and inventory.reservation_ids == ("cr-0123456789abcdef0",)
    plan = plan_teardown(inventory, FAST)
    assert [phase for phase, _ in plan.phases()] == [
        Phase.NODES, Phase.LAUNCH_TEMPLATES, Phase.CLUSTER, Phase.IAM, Phase.GATEWAYS, Phase.NETWORK
    ]
    assert [n.name for n in inventory.nat_gateways] == ["capserve-td-a-nat"]
    assert [a.name for a in inventory.addresses] == ["capserve-td-a-nat-ip"]
    assert [e.name for e in inventory.vpc_endpoints] == ["capserve-td-a-s3"]

    eks_ext.clear_calls()
    outcome = execute_plan.fn(plan, FAST)
    assert outcome.remaining == () and outcome.already_gone == ()
    # Both node groups (GPU and system) go in the nodes phase, before the launch template and the cluster.
    assert sorted(outcome.deleted[:2]) == ["eks-nodegroup/capserve-td-a-gpu", "eks-nodegroup/capserve-td-a-system"]
    assert outcome.deleted[2:4] == (
        f"launch-template/capserve-td-a-gpu ({inventory.launch_templates[0].id})", "eks-cluster/capserve-td-a",
    )
    assert outcome.deleted[-1].startswith("vpc/capserve-td-a-vpc")
    deletes = [c.action for c in eks_ext.calls() if c.action.startswith(("Delete", "Detach", "Disassociate"))]
    # Node group before cluster, cluster before roles, policies before roles, the VPC last.
    assert deletes.index("DeleteNodegroup") < deletes.index("DeleteCluster") < deletes.index("DeleteRole")
    assert deletes.index("DetachRolePolicy") < deletes.index("DeleteRole") and deletes[-1] == "DeleteVpc"
    # The NAT gateway is deleted (and waited for) before its Elastic IP is released and its subnet deleted.
    assert deletes.index("DeleteVpcEndpoints") < deletes.index("DeleteNatGateway") < deletes.index("DeleteSubnet")
    released = [c for c in eks_ext.calls("ec2") if c.action == "ReleaseAddress"]
    assert len(released) == 1 and released[0].at >= max(
        c.at for c in eks_ext.calls("ec2") if c.action == "DescribeNatGateways"
    )
    ours = [{"Name": f"tag:{CAMPAIGN_TAG}", "Values": ["td-a"]}]
    assert ec2.describe_addresses(Filters=ours)["Addresses"] == []
    assert [g["State"] for g in ec2.describe_nat_gateways(Filter=ours)["NatGateways"]] == ["deleted"]
    assert [e["State"] for e in ec2.describe_vpc_endpoints(Filters=ours)["VpcEndpoints"]] == ["deleted"]

    assert tagged_vpcs("td-a") == []
    assert "capserve-td-a" not in boto3.client("eks").list_clusters()["clusters"]
    assert not role_exists("capserve-td-a-eks-node") and not role_exists("capserve-td-a-eks-cluster")
    # Another campaign's resources and untagged ones are untouched.
    assert len(tagged_vpcs("td-other")) == 1 and role_exists("capserve-td-other-eks-node")
    assert "capserve-td-other" in boto3.client("eks").list_clusters()["clusters"]
    assert ec2.describe_vpcs(VpcIds=[untagged])["Vpcs"]

    # A second run finds nothing, sends no delete, and names what the campaign had as already gone.
    eks_ext.clear_calls()
    again = inventory_campaign.fn("td-a", REGION, kind="eks", settings=FAST)
    assert again.is_empty and "eks-cluster/capserve-td-a" in again.missing and "vpc/capserve-td-a-vpc" in again.missing
    assert "eks-nodegroup/capserve-td-a-system" in again.missing
    assert {"nat-gateway/capserve-td-a-nat", "elastic-ip/capserve-td-a-nat-ip"} <= set(again.missing)
    assert execute_plan.fn(plan_teardown(again, FAST), FAST).deleted == ()
    assert [c for c in eks_ext.calls() if c.action.startswith("Delete")] == []


def test_already_gone_between_inventory_and_delete_is_tolerated(sandbox: None) -> None:
    bring_up_eks("td-race")
    inventory = inventory_campaign.fn("td-race", REGION, kind="eks", settings=FAST)
    boto3.client("ec2").delete_launch_template(LaunchTemplateId=inventory.launch_templates[0].id)
    outcome = execute_plan.fn(plan_teardown(inventory, FAST), FAST)
    assert outcome.already_gone == (f"launch-template/capserve-td-race-gpu ({inventory.launch_templates[0].id})",)
    assert tagged_vpcs("td-race") == []


def test_a_delete_failing_otherwise_raises_naming_the_resource(sandbox: None) -> None:
    bring_up_eks("td-dep")
    ec2 = boto3.client("ec2")
    vpc_id = tagged_vpcs("td-dep")[0]
    # Someone else's subnet in our VPC: it carries no campaign tag, so teardown must not delete it,
    # and the VPC delete fails with DependencyViolation (retried, then raised with the VPC's name).
    ec2.create_subnet(VpcId=vpc_id, CidrBlock="10.64.200.0/24", AvailabilityZone=f"{REGION}c")
    inventory = inventory_campaign.fn("td-dep", REGION, kind="eks", settings=FAST)
    with pytest.raises(PermanentError) as raised:
        execute_plan.fn(plan_teardown(inventory, FAST), FAST)
    message = str(raised.value)
    assert "delete_vpc of vpc/capserve-td-dep-vpc" in message and "DependencyViolation" in message
    assert tagged_vpcs("td-dep") == [vpc_id]


def test_a_same_named_cluster_without_our_tag_is_kept(sandbox: None) -> None:
    ec2 = boto3.client("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.9.0.0/20", AvailabilityZone=f"{REGION}a")["Subnet"]["SubnetId"]
    boto3.client("eks").create_cluster(
        name="capserve-td-foreign", roleArn="arn:aws:iam::123456789012:role/x",
        resourcesVpcConfig={"subnetIds": [subnet]}, tags={CAMPAIGN_TAG: "someone-else"},
    )
    inventory = inventory_campaign.fn("td-foreign", REGION, kind="eks", settings=FAST)
    assert inventory.eks_cluster is None and inventory.is_empty
    assert [k.resource for k in inventory.kept] == ["eks-cluster/capserve-td-foreign"]
    assert "someone-else" in inventory.kept[0].why


def test_the_reaper_sees_both_node_groups(sandbox: None) -> None:
    bring_up_eks("td-reap")
    seen = find_campaigns.fn(REGION)["td-reap"]
    assert {"eks-nodegroup/capserve-td-reap-gpu", "eks-nodegroup/capserve-td-reap-system"} <= set(seen)
    assert "eks-cluster/capserve-td-reap" in seen


def test_the_hyperpod_lifecycle_bucket_is_emptied_and_deleted_and_a_foreign_one_kept(sandbox: None) -> None:
    from capserve.core.cluster.settings import BringUpSettings
    from capserve.tasks.cluster.hyperpod import converge_lifecycle_scripts

    made = converge_lifecycle_scripts.fn("td-lcs", REGION, BringUpSettings(poll_seconds=0))
    bucket = made.uri.removeprefix("s3://").split("/")[0]
    inventory = inventory_campaign.fn("td-lcs", REGION, kind="hyperpod", settings=FAST)
    assert inventory.lifecycle_bucket is not None
    assert (inventory.lifecycle_bucket.name, inventory.lifecycle_bucket.keys) == (bucket, ("lifecycle/on_create.sh",))
    outcome = execute_plan.fn(plan_teardown(inventory, FAST), FAST)
    assert f"s3-bucket/{bucket}" in outcome.deleted
    assert bucket not in [b["Name"] for b in boto3.client("s3").list_buckets()["Buckets"]]
    # A bucket with the campaign's lifecycle name but not its tags is somebody else's: kept, never emptied.
    foreign = "sagemaker-td-lcs-foreign-123456789012"
    boto3.client("s3").create_bucket(Bucket=foreign, CreateBucketConfiguration={"LocationConstraint": REGION})
    boto3.client("s3").put_object(Bucket=foreign, Key="lifecycle/on_create.sh", Body=b"#!/bin/sh\n")
    again = inventory_campaign.fn("td-lcs-foreign", REGION, kind="hyperpod", settings=FAST)
    assert again.lifecycle_bucket is None and [k.resource for k in again.kept] == [f"s3-bucket/{foreign}"]


def test_each_phase_of_a_teardown_is_a_line_a_person_sees(sandbox: None, caplog: pytest.LogCaptureFixture) -> None:
    # A teardown is minutes of deletes and waits: `capserve up` shows each phase as it ends, never silence.
    bring_up_eks("td-told")
    plan = plan_teardown(inventory_campaign.fn("td-told", REGION, kind="eks", settings=FAST), FAST)
    with caplog.at_level(logging.INFO):
        execute_plan.fn(plan, FAST)
    told = [unstamped(r.getMessage().removeprefix(PREFIX))[1] for r in caplog.records
            if r.getMessage().startswith(PREFIX)]
    assert [line.split(":")[0] for line in told] == [
        "teardown 1/6 nodes", "teardown 2/6 launch-templates", "teardown 3/6 cluster", "teardown 4/6 iam",
        "teardown 5/6 gateways", "teardown 6/6 network",
    ]
    assert "deleted eks-cluster/capserve-td-told" in told[2]
