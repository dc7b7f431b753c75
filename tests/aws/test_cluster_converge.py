"""Bring-up's AWS tasks against the sandbox's moto (with the EKS/HyperPod extensions).

moto parses every request with botocore's service model, so each call here is also a request
validation. Campaign ids differ per test: moto's backends live for the whole process.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import unquote

import boto3
import pytest

from capserve.core.catalog import get_instance_type
from capserve.core.cluster.naming import ClusterNames
from capserve.core.cluster.settings import BringUpSettings
from capserve.core.errors import PermanentError
from capserve.core.lease import Lease
from capserve.core.tags import CAMPAIGN_TAG
from capserve.sandbox.aws_ext import eks as eks_ext
from capserve.tasks.cluster.eks import (
    converge_cluster,
    converge_launch_template,
    converge_nodegroup,
    converge_system_nodegroup,
)
from capserve.tasks.cluster.hyperpod import converge_hyperpod
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


def make_lease(**changes: object) -> Lease:
    now = datetime.now(UTC)
    base: dict[str, object] = dict(
        provider="ec2-capacity-block",
        region=REGION,
        availability_zone=f"{REGION}b",
        reservation_id="cr-0123456789abcdef0",
        start=now - timedelta(hours=1),
        end=now + timedelta(days=1),
        instance_type="p6-b300.48xlarge",
        instance_count=2,
        upfront_fee=1.0,
    )
    return Lease.model_validate({**base, **changes})


def _name(resource: dict[str, Any]) -> str:
    return next(t["Value"] for t in resource.get("Tags", []) if t["Key"] == "Name")


def creates() -> list[str]:
    return [
        f"{c.service}:{c.action}" for c in eks_ext.calls() if c.action.startswith(("Create", "Attach", "Associate"))
    ]


def control_plane(campaign: str, lease: Lease, kind: str) -> tuple[Any, Any, Any]:
    """Network, roles and the EKS cluster: what both the EKS and the HyperPod paths stand on."""
    network = converge_network.fn(campaign, REGION, lease.availability_zone, "10.64.0.0/16", poll_s=0)
    roles = converge_roles.fn(campaign, kind, REGION)
    cluster = converge_cluster.fn(
        campaign,
        REGION,
        kubernetes_version="1.34",
        role_arn=roles.by_component["eks-cluster-role"],
        subnet_ids=list(network.control_plane_subnet_ids),
        security_group_id=network.security_group_id,
        timeout_s=60,
        poll_s=0,
    )
    return network, roles, cluster


def bring_up_eks(campaign: str, lease: Lease) -> list[str]:
    network, roles, cluster = control_plane(campaign, lease, "eks")
    template = converge_launch_template.fn(
        campaign, lease, network.security_group_id, cluster_security_group_id=cluster.cluster_security_group_id
    )
    made = converge_nodegroup.fn(
        campaign,
        lease,
        cluster_name=cluster.name,
        node_role_arn=roles.by_component["eks-node-role"],
        subnet_id=network.gpu_subnet_id,
        launch_template=template,
        timeout_s=60,
        poll_s=0,
    )
    system = converge_system_nodegroup.fn(
        campaign,
        REGION,
        cluster_name=cluster.name,
        node_role_arn=roles.by_component["eks-node-role"],
        subnet_ids=list(network.control_plane_subnet_ids),
        instance_type="m7i.large",
        node_count=2,
        timeout_s=60,
        poll_s=0,
    )
    assert (system.name, system.instance_type, system.node_count) == (f"capserve-{campaign}-system", "m7i.large", 2)
    assert system.active_at is not None
    return [*network.created, *roles.created, *cluster.created, *template.created, *made, *system.created]


def test_eks_bring_up_converges_and_a_rerun_creates_nothing(events: list[eks_ext.NodePoolActivated]) -> None:
    campaign, lease = "conv-eks", make_lease()
    first = bring_up_eks(campaign, lease)
    assert first == [
        "vpc/capserve-conv-eks-vpc",
        "subnet/capserve-conv-eks-us-east-2b",
        "subnet/capserve-conv-eks-us-east-2a",
        "subnet/capserve-conv-eks-private-us-east-2b",
        "internet-gateway/capserve-conv-eks-igw",
        "route-table/capserve-conv-eks-public",
        "elastic-ip/capserve-conv-eks-nat-ip",
        "nat-gateway/capserve-conv-eks-nat",
        "route-table/capserve-conv-eks-private",
        "vpc-endpoint/capserve-conv-eks-s3",
        "security-group/capserve-conv-eks-nodes",
        "iam-role/capserve-conv-eks-eks-cluster",
        "iam-role/capserve-conv-eks-eks-node",
        "eks-cluster/capserve-conv-eks",
        "launch-template/capserve-conv-eks-gpu",
        "eks-nodegroup/capserve-conv-eks-gpu",
        "eks-nodegroup/capserve-conv-eks-system",
    ]
    # The node groups became ACTIVE through the waiter, and the sandbox announced their nodes:
    # GPU nodes tainted in the reservation's AZ, system nodes untainted.
    assert [(e.pool, e.count, e.instance_type) for e in events] == [
        ("capserve-conv-eks-gpu", 2, "p6-b300.48xlarge"),
        ("capserve-conv-eks-system", 2, "m7i.large"),
    ]
    assert events[0].labels[CAMPAIGN_TAG] == campaign and events[0].zone == f"{REGION}b"
    assert events[0].taints == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
    assert events[1].taints == [] and events[1].labels["capserve.io/pool"] == "system"
    # Managed node groups in public subnets need public addresses on launch; the GPU subnet is private.
    subnets = boto3.client("ec2").describe_subnets(Filters=[{"Name": f"tag:{CAMPAIGN_TAG}", "Values": [campaign]}])
    mapped = {_name(s): s["MapPublicIpOnLaunch"] for s in subnets["Subnets"]}
    assert mapped == {
        "capserve-conv-eks-us-east-2b": True,
        "capserve-conv-eks-us-east-2a": True,
        "capserve-conv-eks-private-us-east-2b": False,
    }

    eks_ext.clear_calls()
    assert bring_up_eks(campaign, lease) == []
    assert creates() == []  # nothing created, attached or associated: asserted on the server's call record
    ec2 = boto3.client("ec2")
    vpcs = ec2.describe_vpcs(Filters=[{"Name": f"tag:{CAMPAIGN_TAG}", "Values": [campaign]}])["Vpcs"]
    assert len(vpcs) == 1
    groups = boto3.client("eks").list_nodegroups(clusterName="capserve-conv-eks")["nodegroups"]
    assert sorted(groups) == ["capserve-conv-eks-gpu", "capserve-conv-eks-system"]


def test_launch_template_content_and_new_version_for_a_new_reservation(sandbox: None) -> None:
    campaign = "conv-lt"
    network = converge_network.fn(campaign, REGION, f"{REGION}b", "10.64.0.0/16", poll_s=0)
    first = converge_launch_template.fn(
        campaign, make_lease(), network.security_group_id, cluster_security_group_id="sg-c"
    )
    data = boto3.client("ec2").describe_launch_template_versions(LaunchTemplateId=first.id, Versions=["$Latest"])[
        "LaunchTemplateVersions"
    ][0]["LaunchTemplateData"]
    assert data["InstanceMarketOptions"]["MarketType"] == "capacity-block"
    cards = data["NetworkInterfaces"]
    assert (cards[0]["NetworkCardIndex"], cards[0]["InterfaceType"]) == (0, "interface")
    assert len(cards) == len(get_instance_type("p6-b300.48xlarge").network_cards)
    # The NVMe RAID0 NodeConfig travels as user data and comes back as sent (so re-runs see no drift).
    assert "strategy: RAID0" in base64.b64decode(data["UserData"]).decode()

    same = converge_launch_template.fn(
        campaign, make_lease(), network.security_group_id, cluster_security_group_id="sg-c"
    )
    assert (same.version, same.created) == (first.version, ())
    moved = converge_launch_template.fn(
        campaign, make_lease(reservation_id="cr-0fedcba9876543210"), network.security_group_id,
        cluster_security_group_id="sg-c",
    )
    assert moved.id == first.id and int(moved.version) == int(first.version) + 1


def test_a_cluster_with_our_name_but_not_our_tag_is_refused(sandbox: None) -> None:
    names = ClusterNames(campaign_id="conv-foreign")
    ec2 = boto3.client("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.9.0.0/20", AvailabilityZone=f"{REGION}a")["Subnet"]["SubnetId"]
    boto3.client("eks").create_cluster(
        name=names.eks_cluster, roleArn="arn:aws:iam::123456789012:role/x", resourcesVpcConfig={"subnetIds": [subnet]}
    )
    with pytest.raises(PermanentError, match="not tagged capserve.io/campaign=conv-foreign"):
        converge_cluster.fn(
            "conv-foreign",
            REGION,
            kubernetes_version="1.34",
            role_arn="arn:aws:iam::123456789012:role/x",
            subnet_ids=[subnet],
            security_group_id="sg-1",
            timeout_s=60,
            poll_s=0,
        )


def test_hyperpod_path_on_a_training_plan(events: list[eks_ext.NodePoolActivated]) -> None:
    campaign = "conv-hp"
    plan = f"arn:aws:sagemaker:{REGION}:123456789012:training-plan/{campaign}"
    lease = make_lease(provider="sagemaker-training-plan", reservation_id=plan, instance_count=1)
    network, roles, cluster = control_plane(campaign, lease, "hyperpod")
    settings = BringUpSettings(poll_seconds=0)

    def run() -> tuple[str, ...]:
        return converge_hyperpod.fn(
            campaign,
            lease,
            settings,
            eks_cluster_arn=cluster.arn,
            execution_role_arn=roles.by_component["hyperpod-execution-role"],
            subnet_id=network.gpu_subnet_id,
            security_group_id=network.security_group_id,
            timeout_s=60,
        )

    assert run() == ("hyperpod-cluster/capserve-conv-hp-hp",)
    described = boto3.client("sagemaker").describe_cluster(ClusterName="capserve-conv-hp-hp")
    assert described["ClusterStatus"] == "InService"
    group = described["InstanceGroups"][0]
    assert group["InstanceType"] == "ml.p6-b300.48xlarge" and group["TrainingPlanArn"] == plan
    assert described["Orchestrator"]["Eks"]["ClusterArn"] == cluster.arn
    assert [(e.cluster_name, e.count) for e in events] == [("capserve-conv-hp", 1)]
    assert events[0].hyperpod and events[0].zone == f"{REGION}b"
    assert events[0].labels[CAMPAIGN_TAG] == campaign

    eks_ext.clear_calls()
    assert run() == ()
    assert creates() == []


def test_node_role_may_write_compile_caches_beside_the_weights_only(sandbox: None) -> None:
    campaign = "conv-iam"
    converge_roles.fn(campaign, "eks", REGION, compile_cache_bucket="capserve-weights",
                      compile_cache_prefix="capserve/weights")
    document = boto3.client("iam").get_role_policy(
        RoleName=f"capserve-{campaign}-eks-node", PolicyName="capserve-compile-cache"
    )["PolicyDocument"]
    statement = (json.loads(unquote(document)) if isinstance(document, str) else document)["Statement"][0]
    assert statement["Action"] == ["s3:PutObject"]
    assert statement["Resource"] == ["arn:aws:s3:::capserve-weights/capserve/weights/compile-cache/*"]
    eks_ext.clear_calls()
    converge_roles.fn(campaign, "eks", REGION, compile_cache_bucket="capserve-weights",
                      compile_cache_prefix="capserve/weights")
    assert [c.action for c in eks_ext.calls("iam") if c.action.startswith(("Create", "Put", "Attach"))] == []
