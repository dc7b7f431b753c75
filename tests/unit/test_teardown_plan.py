"""Teardown's pure parts: the plan's order, its requests against botocore's service model, the reaper
rule, the result's report section."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import boto3
import pytest
from botocore.validate import ParamValidator

from capserve.core.teardown.inventory import (
    AddressFound,
    BucketFound,
    ClusterFound,
    HyperPodFound,
    InternetGatewayFound,
    Inventory,
    Named,
    NatGatewayFound,
    NodegroupFound,
    RoleFound,
    RouteTableFound,
    SecurityGroupFound,
    VpcFound,
    WorkloadFound,
)
from capserve.core.teardown.plan import NOT_FOUND, Phase, group_references, is_workload, plan_teardown
from capserve.core.teardown.reaper import CampaignSighting, decide
from capserve.core.teardown.result import TeardownResult
from capserve.core.teardown.settings import ReaperSettings, TeardownSettings

SG_RULE = {"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": "sg-1", "UserId": "123456789012", "Description": "x"}]}


def full_inventory() -> Inventory:
    return Inventory(
        campaign_id="c1",
        region="us-east-2",
        workload_cluster=ClusterFound(name="capserve-c1", status="ACTIVE", endpoint="https://k"),
        workloads=(WorkloadFound(api_version="v1", kind="Service", namespace="serve", name="vllm"),),
        hyperpod=HyperPodFound(name="capserve-c1-hp", arn="arn:aws:sagemaker:us-east-2:1:cluster/x"),
        nodegroups=(NodegroupFound(cluster="capserve-c1", name="capserve-c1-gpu"),),
        instances=(Named(id="i-0123456789abcdef0", name="capserve-c1-gpu"),),
        launch_templates=(Named(id="lt-0123", name="capserve-c1-gpu"),),
        eks_cluster=ClusterFound(name="capserve-c1", status="ACTIVE"),
        lifecycle_bucket=BucketFound(name="sagemaker-c1-123456789012", keys=("lifecycle/on_create.sh",)),
        ecr_repositories=(Named(id="capserve/c1/vllm/vllm-openai", name="capserve/c1/vllm/vllm-openai"),),
        roles=(RoleFound(name="capserve-c1-eks-node", policy_arns=("arn:aws:iam::aws:policy/P",),
                         inline_policies=("inline",)),),
        internet_gateways=(InternetGatewayFound(id="igw-1", name="capserve-c1-igw", attached_vpc_ids=("vpc-1",)),),
        vpcs=(VpcFound(
            id="vpc-1", name="capserve-c1-vpc",
            subnets=(Named(id="subnet-1", name="capserve-c1-us-east-2a"),),
            route_tables=(RouteTableFound(id="rtb-1", name="capserve-c1-public", association_ids=("rtbassoc-1",)),),
            security_groups=(SecurityGroupFound(id="sg-1", name="capserve-c1-nodes",
                                                ingress=tuple(group_references([SG_RULE])),
                                                egress=tuple(group_references([SG_RULE]))),),
        ),),
        nat_gateways=(NatGatewayFound(id="nat-1", name="capserve-c1-nat", vpc_id="vpc-1", state="available"),),
        vpc_endpoints=(Named(id="vpce-1", name="capserve-c1-s3"),),
        addresses=(AddressFound(id="eipalloc-1", name="capserve-c1-nat-ip", association_id="eipassoc-1"),),
    )


def test_plan_order_follows_the_dependencies() -> None:
    plan = plan_teardown(full_inventory(), TeardownSettings())
    assert [phase for phase, _ in plan.phases()] == list(Phase)
    ops = [step.operation for step in plan.steps]
    assert ops == [
        "delete", "delete_cluster", "delete_nodegroup", "delete_objects", "delete_bucket", "terminate_instances",
        "delete_launch_template",
        "delete_cluster", "delete_repository", "detach_role_policy", "delete_role_policy", "delete_role",
        "delete_vpc_endpoints", "delete_nat_gateway", "release_address",
        "revoke_security_group_ingress", "revoke_security_group_egress", "delete_security_group",
        "disassociate_route_table", "delete_route_table", "detach_internet_gateway", "delete_internet_gateway",
        "delete_subnet", "delete_vpc",
    ]
    # Preparatory calls are not reported as deleted resources; every call names its NotFound codes.
    assert "iam-role/capserve-c1-eks-node" in plan.resources()
    # The lifecycle bucket is emptied (not reported) and then deleted once the HyperPod cluster is gone.
    assert "s3-bucket/sagemaker-c1-123456789012" in plan.resources()
    assert "ecr-repository/capserve/c1/vllm/vllm-openai" in plan.resources()
    assert not any(r.startswith(("iam-role-policy", "security-group-rules")) for r in plan.resources())
    assert all(step.not_found == NOT_FOUND[f"{step.service}.{step.operation}"] for step in plan.steps)
    # The NAT gateway is waited for until deleted (its phase ends) before its Elastic IP is released.
    nat = next(step for step in plan.steps if step.operation == "delete_nat_gateway")
    release = next(step for step in plan.steps if step.operation == "release_address")
    assert nat.wait is not None and nat.wait.name == "nat_gateway_deleted" and nat.phase is Phase.GATEWAYS
    assert release.phase is Phase.NETWORK and release.retry_codes == ("InvalidIPAddress.InUse",)


def test_every_plan_request_and_wait_matches_botocore_service_model() -> None:
    plan = plan_teardown(full_inventory(), TeardownSettings())
    validator = ParamValidator()
    for step in plan.steps:
        if step.service == "kubernetes":
            continue
        client = boto3.client(step.service, region_name="us-east-2")
        model = client.meta.service_model.operation_model(client.meta.method_to_api_mapping[step.operation])
        report = validator.validate(step.params, model.input_shape)
        assert not report.has_errors(), f"{step.operation}: {report.generate_report()}"
        if step.wait is not None:
            reader = boto3.client(step.wait.service, region_name="us-east-2")
            if step.wait.kind == "waiter":
                operation = reader.get_waiter(step.wait.name).config.operation
            else:
                operation = reader.meta.method_to_api_mapping[step.wait.name]
            shape = reader.meta.service_model.operation_model(operation).input_shape
            assert not validator.validate(step.wait.params, shape).has_errors(), step.wait


def test_group_references_keep_only_group_pairs_and_addons_are_not_workloads() -> None:
    cidr_only = {"IpProtocol": "tcp", "FromPort": 443, "ToPort": 443, "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}
    assert group_references([cidr_only, SG_RULE]) == [{"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": "sg-1"}]}]
    assert not is_workload("kube-system") and not is_workload("lws-system") and is_workload("default")


NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("lease_end", "created", "reap", "phrase"),
    [
        (NOW + timedelta(hours=2), None, False, "lease running"),
        (NOW + timedelta(minutes=20), None, True, "lease over"),  # inside AWS's 30-minute termination lead
        (NOW - timedelta(hours=1), None, True, "lease over"),
        (None, NOW - timedelta(hours=2), False, "within the 24 h grace"),
        (None, NOW - timedelta(hours=30), True, "past the grace"),
        (None, None, False, "no resource reports its age"),
    ],
)
def test_reaper_rule(lease_end: datetime | None, created: datetime | None, reap: bool, phrase: str) -> None:
    sighting = CampaignSighting(campaign_id="c1", region="us-east-2", resources=("vpc/x",), lease_end=lease_end,
                                lease_source="ec2-capacity-block cr-1" if lease_end else None,
                                oldest_created=created)
    decided, why = decide(sighting, NOW, ReaperSettings())
    assert decided is reap and phrase in why


def test_report_section_shape_and_reason_is_checked() -> None:
    result = TeardownResult(campaign_id="c1", region="us-east-2", reason="drain-deadline", dry_run=False,
                            deleted=("vpc/x",), finished_at=NOW)
    assert result.report_section() == {
        "deleted": ["vpc/x"], "already_gone": [], "kept": [], "reason": "drain-deadline", "dry_run": False,
        "finished_at": NOW.isoformat(), "remaining": [],
    }
    with pytest.raises(ValueError, match="reason"):
        TeardownResult.model_validate({**result.model_dump(), "reason": "because"})
