"""The sandbox's SimulatePrincipalPolicy refuses what IAM refuses and decides by IAM's evaluation logic
(IAM API reference, SimulatePrincipalPolicy; IAM user guide, "Policy evaluation logic")."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

ACCOUNT = "123456789012"


def _iam() -> Any:
    return boto3.client("iam", region_name="us-east-1")


def _decisions(arn: str, actions: list[str], resource: str = "*", **context: str) -> dict[str, str]:
    entries = [{"ContextKeyName": k, "ContextKeyValues": [v], "ContextKeyType": "string"} for k, v in context.items()]
    answer = _iam().simulate_principal_policy(
        PolicySourceArn=arn, ActionNames=actions, ResourceArns=[resource], ContextEntries=entries
    )
    return {r["EvalActionName"]: r["EvalDecision"] for r in answer["EvaluationResults"]}


def test_a_principal_iam_does_not_hold_is_refused(sandbox: None) -> None:
    with pytest.raises(ClientError) as caught:
        _iam().simulate_principal_policy(PolicySourceArn=f"arn:aws:iam::{ACCOUNT}:user/nobody", ActionNames=["s3:*"])
    assert caught.value.response["Error"]["Code"] == "NoSuchEntity"
    with pytest.raises(ClientError) as caught:
        _iam().simulate_principal_policy(PolicySourceArn=f"arn:aws:sts::{ACCOUNT}:assumed-role/r/s",
                                         ActionNames=["s3:*"])
    assert caught.value.response["Error"]["Code"] == "InvalidInput"


def test_a_users_groups_count_and_an_explicit_deny_wins(sandbox: None) -> None:
    iam = _iam()
    user = iam.create_user(UserName="alice")["User"]["Arn"]
    iam.create_group(GroupName="builders")
    iam.add_user_to_group(GroupName="builders", UserName="alice")
    iam.put_group_policy(GroupName="builders", PolicyName="ec2", PolicyDocument=json.dumps(
        {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "ec2:Describe*", "Resource": "*"},
                                                {"Effect": "Allow", "Action": "ec2:*Vpc", "Resource": "*"}]}))
    iam.put_user_policy(UserName="alice", PolicyName="no-delete", PolicyDocument=json.dumps(
        {"Version": "2012-10-17", "Statement": [{"Effect": "Deny", "Action": "ec2:DeleteVpc", "Resource": "*"}]}))
    assert _decisions(user, ["ec2:DescribeVpcs", "ec2:CreateVpc", "ec2:DeleteVpc", "eks:CreateCluster"]) == {
        "ec2:DescribeVpcs": "allowed", "ec2:CreateVpc": "allowed", "ec2:DeleteVpc": "explicitDeny",
        "eks:CreateCluster": "implicitDeny",
    }


def test_resources_and_tag_conditions_are_evaluated_against_the_context_given(sandbox: None) -> None:
    iam = _iam()
    trust = {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}]}
    role = iam.create_role(RoleName="runner", AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"]
    policy = {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::weights/models/*"},
        {"Effect": "Allow", "Action": "ec2:DeleteSubnet", "Resource": "*",
         "Condition": {"StringEquals": {"aws:ResourceTag/capserve.io/campaign": "k3"}}},
        {"Effect": "Allow", "Action": "ec2:CreateVpc", "Resource": "*",
         "Condition": {"Null": {"aws:RequestTag/capserve.io/campaign": "false"}}},
    ]}
    arn = iam.create_policy(PolicyName="scoped", PolicyDocument=json.dumps(policy))["Policy"]["Arn"]
    iam.attach_role_policy(RoleName="runner", PolicyArn=arn)

    assert _decisions(role, ["s3:GetObject"], "arn:aws:s3:::weights/models/a") == {"s3:GetObject": "allowed"}
    assert _decisions(role, ["s3:GetObject"], "arn:aws:s3:::weights/other") == {"s3:GetObject": "implicitDeny"}
    tag = "aws:ResourceTag/capserve.io/campaign"
    assert _decisions(role, ["ec2:DeleteSubnet"], **{tag: "k3"}) == {"ec2:DeleteSubnet": "allowed"}
    assert _decisions(role, ["ec2:DeleteSubnet"], **{tag: "other"}) == {"ec2:DeleteSubnet": "implicitDeny"}
    assert _decisions(role, ["ec2:DeleteSubnet"]) == {"ec2:DeleteSubnet": "implicitDeny"}  # key absent: no match
    request_tag = "aws:RequestTag/capserve.io/campaign"
    assert _decisions(role, ["ec2:CreateVpc"], **{request_tag: "k3"}) == {"ec2:CreateVpc": "allowed"}
    assert _decisions(role, ["ec2:CreateVpc"]) == {"ec2:CreateVpc": "implicitDeny"}


def test_hyperpods_cluster_needs_its_service_linked_role_creatable_until_the_account_has_it(sandbox: None) -> None:
    # SageMaker HyperPod creates AWSServiceRoleForSageMakerHyperPod on first use, with the caller's
    # iam:CreateServiceLinkedRole (capserve.core.permissions.DEPENDENT_ACTIONS): the sandbox's enforcement asks it.
    from capserve_sandbox.aws import iam_enforced

    from capserve.core.permissions import HYPERPOD_SLR

    iam = _iam()
    iam.create_user(UserName="builder")
    allowed = [{"Effect": "Allow", "Action": ["sagemaker:CreateCluster", "sagemaker:AddTags"], "Resource": "*"},
               {"Effect": "Allow", "Action": "iam:PassRole", "Resource": "arn:aws:iam::*:role/capserve-*"}]
    linking = {"Effect": "Allow", "Action": "iam:CreateServiceLinkedRole", "Resource": HYPERPOD_SLR.arn("aws", "*"),
               "Condition": {"StringEquals": {"iam:AWSServiceName": HYPERPOD_SLR.service}}}
    key = iam.create_access_key(UserName="builder")["AccessKey"]
    request = {"ClusterName": "c", "InstanceGroups": [{
        "InstanceGroupName": "gpu", "InstanceType": "ml.p6-b300.48xlarge", "InstanceCount": 1,
        "LifeCycleConfig": {"SourceS3Uri": "s3://sagemaker-x/", "OnCreate": "on_create.sh"},
        "ExecutionRole": f"arn:aws:iam::{ACCOUNT}:role/capserve-x-hyperpod"}]}

    def create(statements: list[dict[str, Any]]) -> str:
        iam.put_user_policy(UserName="builder", PolicyName="p", PolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": statements}))
        sagemaker = boto3.client("sagemaker", region_name="us-east-2", aws_access_key_id=key["AccessKeyId"],
                                 aws_secret_access_key=key["SecretAccessKey"], aws_session_token=None)
        with iam_enforced():
            try:
                sagemaker.create_cluster(**request)
            except ClientError as exc:
                return f"{exc.response['Error']['Code']}: {exc.response['Error']['Message']}"
        return "created"

    refused = create(allowed)
    # (moto answers the JSON protocol's client with its XML AccessDenied: the code lands in the message)
    assert "AccessDenied" in refused and "not authorized to perform: iam:CreateServiceLinkedRole" in refused
    with pytest.raises(ClientError):
        iam.get_role(RoleName=HYPERPOD_SLR.name)
    assert "AccessDenied" not in create([*allowed, linking])
    role = iam.get_role(RoleName=HYPERPOD_SLR.name)["Role"]
    assert role["Arn"] == HYPERPOD_SLR.arn("aws", ACCOUNT)
    # Once the account has it, nothing is made and nothing more is asked.
    assert "AccessDenied" not in create(allowed)
