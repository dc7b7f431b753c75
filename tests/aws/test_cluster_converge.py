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
from capserve_sandbox.aws_ext import capacity as capacity_ext
from capserve_sandbox.aws_ext import eks as eks_ext
from capserve_sandbox.clock import CLOCK

from capserve.core.catalog import get_instance_type
from capserve.core.cluster.hyperpod import cluster_security_groups, on_create_script
from capserve.core.cluster.naming import ClusterNames
from capserve.core.cluster.settings import BringUpSettings
from capserve.core.errors import PermanentError
from capserve.core.lease import Lease
from capserve.core.tags import CAMPAIGN_TAG
from capserve.tasks.cluster.eks import (
    converge_access_entries,
    converge_cluster,
    converge_launch_template,
    converge_nodegroup,
    converge_system_nodegroup,
)
from capserve.tasks.cluster.hyperpod import converge_hyperpod, converge_lifecycle_scripts
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
    network = converge_network.fn(campaign, REGION, lease.availability_zone, "10.64.0.0/16",
                                  nat_timeout_s=900, poll_s=0)
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
    return [*network.created, *roles.created, *cluster.created, *template.created, *made.created, *system.created]


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


def _bought_block(count: int) -> tuple[dict[str, Any], Lease]:
    ec2 = boto3.client("ec2", region_name=REGION)
    now = datetime.now(UTC)
    offering = ec2.describe_capacity_block_offerings(
        InstanceType="p6-b300.48xlarge", InstanceCount=count, CapacityDurationHours=24,
        StartDateRange=now, EndDateRange=now + timedelta(days=14),
    )["CapacityBlockOfferings"][0]
    block = ec2.purchase_capacity_block(
        CapacityBlockOfferingId=offering["CapacityBlockOfferingId"], InstancePlatform="Linux/UNIX",
    )["CapacityReservation"]
    lease = make_lease(reservation_id=block["CapacityReservationId"], availability_zone=block["AvailabilityZone"],
                       start=offering["StartDate"], end=offering["EndDate"], instance_count=count)
    return offering, lease


def _gpu_group_before_block(campaign: str, lease: Lease) -> tuple[dict[str, Any], str]:
    """The prepare run's part: control plane, template, and the block's node group at size 0."""
    network, roles, cluster = control_plane(campaign, lease, "eks")
    template = converge_launch_template.fn(
        campaign, lease, network.security_group_id, cluster_security_group_id=cluster.cluster_security_group_id
    )
    where = dict(cluster_name=cluster.name, node_role_arn=roles.by_component["eks-node-role"],
                 subnet_id=network.gpu_subnet_id, launch_template=template, timeout_s=60, poll_s=0)
    group_name = ClusterNames(campaign_id=campaign).nodegroup
    early = converge_nodegroup.fn(campaign, lease, before_block=True, **where)
    assert early.created == (f"eks-nodegroup/{group_name}",) and early.scaled_from is None
    group = boto3.client("eks", region_name=REGION).describe_nodegroup(
        clusterName=cluster.name, nodegroupName=group_name
    )["nodegroup"]
    assert group["scalingConfig"] == {"minSize": 0, "maxSize": lease.instance_count, "desiredSize": 0}
    return where, group_name


def test_the_block_group_is_made_at_zero_before_the_block_and_scaled_once_the_block_is_active(
    events: list[eks_ext.NodePoolActivated],
) -> None:
    """EKS lets a Capacity Block group exist before its block at size 0, and launches into the block fail until it
    is active (the sandbox's EKS reads the block it sold): at the start, bring-up only scales the group."""
    capacity_ext.reset()
    CLOCK.reset()
    try:
        offering, lease = _bought_block(2)
        early_where, early_group = _gpu_group_before_block("conv-early", lease)
        on_time_where, on_time_group = _gpu_group_before_block("conv-ontime", lease)
        assert [e.count for e in events if e.pool in (early_group, on_time_group)] == [0, 0]  # nothing launched

        # Scaled while the block is still scheduled: EKS takes the update, the launches fail, the group degrades.
        with pytest.raises(PermanentError, match=r"DEGRADED .*AsgInstanceLaunchFailures: .* is scheduled"):
            converge_nodegroup.fn("conv-early", lease, **early_where)

        CLOCK.advance(offering["StartDate"] - CLOCK.now())  # the block starts
        scaled = converge_nodegroup.fn("conv-ontime", lease, **on_time_where)
        assert (scaled.created, scaled.scaled_from) == ((), 0) and scaled.scaled_at is not None
        assert [(e.pool, e.count) for e in events if e.pool == on_time_group] == [(on_time_group, 0),
                                                                                  (on_time_group, 2)]
        again = converge_nodegroup.fn("conv-ontime", lease, **on_time_where)
        assert (again.created, again.scaled_from) == ((), None)  # at size: nothing to do
    finally:
        capacity_ext.reset()
        CLOCK.reset()


def test_launch_template_content_and_new_version_for_a_new_reservation(sandbox: None) -> None:
    campaign = "conv-lt"
    network = converge_network.fn(campaign, REGION, f"{REGION}b", "10.64.0.0/16",
                                  nat_timeout_s=900, poll_s=0)
    first = converge_launch_template.fn(
        campaign, make_lease(), network.security_group_id, cluster_security_group_id="sg-c", uses_efa=True
    )
    data = boto3.client("ec2").describe_launch_template_versions(LaunchTemplateId=first.id, Versions=["$Latest"])[
        "LaunchTemplateVersions"
    ][0]["LaunchTemplateData"]
    assert data["InstanceMarketOptions"]["MarketType"] == "capacity-block"
    # Laid out from what DescribeInstanceTypes says of p6-b300 (card 0 ENA-only, 16 EFA cards).
    cards = [(c["NetworkCardIndex"], c["DeviceIndex"], c["InterfaceType"]) for c in data["NetworkInterfaces"]]
    assert cards == [(0, 0, "interface"), *((card, 0, "efa-only") for card in range(1, 17))]
    assert len(cards) == len(get_instance_type("p6-b300.48xlarge").network_cards)
    # The NVMe RAID0 NodeConfig travels as user data and comes back as sent (so re-runs see no drift).
    assert "strategy: RAID0" in base64.b64decode(data["UserData"]).decode()

    same = converge_launch_template.fn(
        campaign, make_lease(), network.security_group_id, cluster_security_group_id="sg-c", uses_efa=True
    )
    assert (same.version, same.created) == (first.version, ())
    moved = converge_launch_template.fn(
        campaign, make_lease(reservation_id="cr-0fedcba9876543210"), network.security_group_id,
        cluster_security_group_id="sg-c", uses_efa=True,
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
    lifecycle = converge_lifecycle_scripts.fn(campaign, REGION, settings)

    def run() -> tuple[str, ...]:
        return converge_hyperpod.fn(
            campaign,
            lease,
            settings,
            eks_cluster_arn=cluster.arn,
            execution_role_arn=roles.by_component["hyperpod-execution-role"],
            subnet_id=network.gpu_subnet_id,
            security_group_id=network.security_group_id,
            lifecycle_uri=lifecycle.uri,
            timeout_s=60,
        )

    assert run() == ("hyperpod-cluster/capserve-conv-hp-hp",)
    described = boto3.client("sagemaker").describe_cluster(ClusterName="capserve-conv-hp-hp")
    assert described["ClusterStatus"] == "InService"
    eks_group = boto3.client("eks").describe_cluster(name=cluster.name)["cluster"]["resourcesVpcConfig"].get(
        "clusterSecurityGroupId"
    )
    assert described["VpcConfig"]["SecurityGroupIds"] == cluster_security_groups(network.security_group_id, eks_group)
    assert described["InstanceGroups"][0]["LifeCycleConfig"]["SourceS3Uri"] == lifecycle.uri
    group = described["InstanceGroups"][0]
    assert group["InstanceType"] == "ml.p6-b300.48xlarge" and group["TrainingPlanArn"] == plan
    assert described["Orchestrator"]["Eks"]["ClusterArn"] == cluster.arn
    assert [(e.cluster_name, e.count) for e in events] == [("capserve-conv-hp", 1)]
    assert events[0].hyperpod and events[0].zone == f"{REGION}b"
    assert events[0].labels[CAMPAIGN_TAG] == campaign

    eks_ext.clear_calls()
    assert run() == ()
    assert creates() == []


def test_node_role_reads_the_weights_and_writes_compile_caches_beside_them_only(sandbox: None) -> None:
    campaign = "conv-iam"
    where = {"compile_cache_bucket": "capserve-weights", "compile_cache_prefix": "capserve/weights",
             "weights_bucket": "capserve-weights", "weights_prefix": "capserve/weights"}
    converge_roles.fn(campaign, "eks", REGION, **where)
    iam_client, role = boto3.client("iam"), f"capserve-{campaign}-eks-node"

    def inline(name: str) -> list[dict[str, object]]:
        document = iam_client.get_role_policy(RoleName=role, PolicyName=name)["PolicyDocument"]
        return list((json.loads(unquote(document)) if isinstance(document, str) else document)["Statement"])

    [write] = inline("capserve-compile-cache")
    assert write["Action"] == ["s3:PutObject"]
    assert write["Resource"] == ["arn:aws:s3:::capserve-weights/capserve/weights/compile-cache/*"]
    read = {str(statement["Action"]): statement["Resource"] for statement in inline("capserve-weights-read")}
    assert read == {"['s3:GetObject']": ["arn:aws:s3:::capserve-weights/capserve/weights/*"],
                    "['s3:ListBucket']": ["arn:aws:s3:::capserve-weights"]}
    # Its only S3 access: no AWS-managed policy that reads every bucket of the account.
    attached = {p["PolicyName"] for p in iam_client.list_attached_role_policies(RoleName=role)["AttachedPolicies"]}
    assert not any("S3" in name for name in attached), attached
    eks_ext.clear_calls()
    converge_roles.fn(campaign, "eks", REGION, **where)
    assert [c.action for c in eks_ext.calls("iam") if c.action.startswith(("Create", "Put", "Attach"))] == []


def test_the_lifecycle_script_goes_to_the_campaigns_sagemaker_bucket_once(sandbox: None) -> None:
    campaign = "conv-lcs"
    settings = BringUpSettings(poll_seconds=0)
    made = converge_lifecycle_scripts.fn(campaign, REGION, settings)
    bucket = f"sagemaker-{campaign}-123456789012"
    assert (made.uri, made.created) == (f"s3://{bucket}/lifecycle/", (f"s3-bucket/{bucket}",))
    s3 = boto3.client("s3")
    assert s3.get_object(Bucket=bucket, Key="lifecycle/on_create.sh")["Body"].read() == on_create_script()
    tags = {t["Key"]: t["Value"] for t in s3.get_bucket_tagging(Bucket=bucket)["TagSet"]}
    assert tags[CAMPAIGN_TAG] == campaign and tags["capserve.io/component"] == "hyperpod-lifecycle-scripts"
    assert s3.get_bucket_location(Bucket=bucket)["LocationConstraint"] == REGION
    assert converge_lifecycle_scripts.fn(campaign, REGION, settings).created == ()


def test_a_lifecycle_bucket_of_the_campaigns_name_but_not_its_tags_is_refused(sandbox: None) -> None:
    campaign = "conv-lcs-other"
    boto3.client("s3").create_bucket(
        Bucket=f"sagemaker-{campaign}-123456789012", CreateBucketConfiguration={"LocationConstraint": REGION}
    )
    with pytest.raises(PermanentError, match="not tagged as campaign conv-lcs-other's HyperPod lifecycle bucket"):
        converge_lifecycle_scripts.fn(campaign, REGION, BringUpSettings(poll_seconds=0))


def test_a_user_lifecycle_folder_without_the_script_is_refused_before_create_cluster(sandbox: None) -> None:
    boto3.client("s3").create_bucket(
        Bucket="sagemaker-users-own", CreateBucketConfiguration={"LocationConstraint": REGION}
    )
    settings = BringUpSettings(poll_seconds=0, hyperpod_lifecycle_s3_uri="s3://sagemaker-users-own/scripts/")
    with pytest.raises(PermanentError, match="s3://sagemaker-users-own/scripts/on_create.sh does not exist"):
        converge_lifecycle_scripts.fn("conv-lcs-user", REGION, settings)


def test_hyperpod_fails_the_cluster_without_its_lifecycle_script(events: list[eks_ext.NodePoolActivated]) -> None:
    campaign = "conv-hp-nolcs"
    plan = f"arn:aws:sagemaker:{REGION}:123456789012:training-plan/{campaign}"
    lease = make_lease(provider="sagemaker-training-plan", reservation_id=plan, instance_count=1)
    network, roles, cluster = control_plane(campaign, lease, "hyperpod")
    boto3.client("s3").create_bucket(
        Bucket="sagemaker-empty-scripts", CreateBucketConfiguration={"LocationConstraint": REGION}
    )
    with pytest.raises(PermanentError, match="Lifecycle scripts did not run successfully"):
        converge_hyperpod.fn(
            campaign,
            lease,
            BringUpSettings(poll_seconds=0),
            eks_cluster_arn=cluster.arn,
            execution_role_arn=roles.by_component["hyperpod-execution-role"],
            subnet_id=network.node_subnet_id,
            security_group_id=network.security_group_id,
            lifecycle_uri="s3://sagemaker-empty-scripts/lifecycle/",
            timeout_s=60,
        )
    assert events == []  # no node joined


def test_hyperpod_execution_role_carries_its_eks_weights_and_cache_policies(sandbox: None) -> None:
    campaign = "conv-hp-iam"
    converge_roles.fn(campaign, "hyperpod", REGION, compile_cache_bucket="capserve-weights",
                      compile_cache_prefix="capserve/weights", weights_bucket="capserve-weights",
                      weights_prefix="capserve/weights")
    iam_client = boto3.client("iam")
    role = f"capserve-{campaign}-hyperpod"
    names = iam_client.list_role_policies(RoleName=role)["PolicyNames"]
    assert sorted(names) == ["capserve-compile-cache", "capserve-hyperpod-eks", "capserve-weights-read"]
    document = iam_client.get_role_policy(RoleName=role, PolicyName="capserve-weights-read")["PolicyDocument"]
    if isinstance(document, str):
        document = json.loads(unquote(document))
    assert {"Effect": "Allow", "Action": ["s3:GetObject"],
            "Resource": ["arn:aws:s3:::capserve-weights/capserve/weights/*"]} in document["Statement"]


def test_preflight_tells_whether_the_lifecycle_script_can_be_put_or_found(sandbox: None) -> None:
    from capserve.tasks.cluster.hyperpod import lifecycle_problem

    settings = BringUpSettings(poll_seconds=0)
    assert lifecycle_problem.fn("conv-pre-free", REGION, settings) is None  # the name is free: bring-up makes it
    converge_lifecycle_scripts.fn("conv-pre-ours", REGION, settings)
    assert lifecycle_problem.fn("conv-pre-ours", REGION, settings) is None  # already the campaign's
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="sagemaker-conv-pre-taken-123456789012",
                     CreateBucketConfiguration={"LocationConstraint": REGION})
    taken = lifecycle_problem.fn("conv-pre-taken", REGION, settings)
    assert taken is not None and "not tagged as campaign conv-pre-taken's HyperPod lifecycle bucket" in taken
    s3.create_bucket(Bucket="sagemaker-pre-user", CreateBucketConfiguration={"LocationConstraint": REGION})
    user = settings.model_copy(update={"hyperpod_lifecycle_s3_uri": "s3://sagemaker-pre-user/lcs/"})
    missing = lifecycle_problem.fn("conv-pre-user", REGION, user)
    assert missing is not None and "s3://sagemaker-pre-user/lcs/on_create.sh cannot be read (404)" in missing


def test_node_role_carries_ssm_so_a_node_that_never_joins_can_be_inspected(sandbox: None) -> None:
    campaign = "conv-ssm"
    ssm = "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"
    converge_roles.fn(campaign, "eks", REGION)
    iam = boto3.client("iam")
    role = f"capserve-{campaign}-eks-node"
    attached = [p["PolicyArn"] for p in iam.list_attached_role_policies(RoleName=role)["AttachedPolicies"]]
    assert ssm in attached
    # A role made before the policy was added gets it on the next bring-up.
    iam.detach_role_policy(RoleName=role, PolicyArn=ssm)
    converge_roles.fn(campaign, "eks", REGION)
    assert ssm in [p["PolicyArn"] for p in iam.list_attached_role_policies(RoleName=role)["AttachedPolicies"]]


# ------------------------------------------------------------------ access entries

ADMIN_POLICY = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"
WORKER = "arn:aws:iam::123456789012:role/ops/prefect-worker"  # the scheduled runs' and the reaper's role
CREATOR = "arn:aws:iam::123456789012:user/moto"  # what moto's STS says this test runs as


def test_the_scheduled_runs_principal_gets_a_cluster_admin_entry_once(events: list[Any]) -> None:
    campaign = "conv-access"
    _, _, cluster = control_plane(campaign, make_lease(), "eks")
    created = converge_access_entries.fn(campaign, REGION, cluster.name, [WORKER, CREATOR])
    assert created == (f"eks-access-entry/{WORKER}",)  # the creator already is admin: EKS made its entry
    eks = boto3.client("eks")
    assert set(eks.list_access_entries(clusterName=cluster.name)["accessEntries"]) == {WORKER, CREATOR}
    entry = eks.describe_access_entry(clusterName=cluster.name, principalArn=WORKER)["accessEntry"]
    assert entry["type"] == "STANDARD" and entry["tags"][CAMPAIGN_TAG] == campaign
    [policy] = eks.list_associated_access_policies(clusterName=cluster.name, principalArn=WORKER)[
        "associatedAccessPolicies"
    ]
    assert (policy["policyArn"], policy["accessScope"]["type"]) == (ADMIN_POLICY, "cluster")
    eks_ext.clear_calls()
    assert converge_access_entries.fn(campaign, REGION, cluster.name, [WORKER, CREATOR]) == ()
    assert creates() == []


def test_the_sandboxs_eks_refuses_entries_as_eks_does(events: list[Any]) -> None:
    eks, ec2 = boto3.client("eks"), boto3.client("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.9.0.0/24", AvailabilityZone="us-east-2a")["Subnet"]
    eks.create_cluster(name="config-map-only", roleArn="arn:aws:iam::123456789012:role/c",
                       resourcesVpcConfig={"subnetIds": [subnet["SubnetId"]]})  # the API default: CONFIG_MAP
    with pytest.raises(eks.exceptions.InvalidRequestException, match="authentication mode must be"):
        eks.create_access_entry(clusterName="config-map-only", principalArn=WORKER)
    _, _, cluster = control_plane("conv-access-refusals", make_lease(), "eks")
    with pytest.raises(eks.exceptions.ResourceInUseException, match="already in use"):
        eks.create_access_entry(clusterName=cluster.name, principalArn=CREATOR)
    linked = "arn:aws:iam::123456789012:role/aws-service-role/eks.amazonaws.com/AWSServiceRoleForAmazonEKS"
    with pytest.raises(eks.exceptions.InvalidParameterException, match="service-linked"):
        eks.create_access_entry(clusterName=cluster.name, principalArn=linked)
    with pytest.raises(eks.exceptions.ResourceNotFoundException, match="access entry"):
        eks.associate_access_policy(clusterName=cluster.name, principalArn=WORKER, policyArn=ADMIN_POLICY,
                                    accessScope={"type": "cluster"})
