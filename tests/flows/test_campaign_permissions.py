"""Preflight simulates the campaign's AWS permissions for the caller, on the sandbox: a missing action stops the
campaign before anything is bought, naming it; the generated policy (docs/iam/controller.json) passes, and under
moto's IAM enforcement bring-up is refused an action it lacks (the whole campaign holding exactly that policy is
tests/flows/test_campaign.py's first test)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from capserve_sandbox.aws import iam_enforced
from capserve_sandbox.aws_ext import capacity as capacity_ext
from capserve_sandbox.environment import SandboxEndpoints, sandbox

from capserve.core.cluster.settings import BringUpSettings, KubeSettings
from capserve.core.errors import PermanentError
from capserve.core.lease import Lease
from capserve.core.permissions import cluster_access_problem
from capserve.core.preflight import PreflightError
from capserve.core.spec import CampaignSpec, load_spec
from capserve.flows.bring_up import bring_up
from capserve.flows.campaign import campaign
from capserve.tasks.permissions import check_permissions

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "kimi-k3-sandbox.yaml"
UP = BringUpSettings(poll_seconds=0, kube=KubeSettings(nodes_ready_timeout_s=20, addons_ready_timeout_s=20))


@pytest.fixture
def far_ends() -> Iterator[SandboxEndpoints]:
    with sandbox(served_model_name="kimi-k3") as endpoints:
        yield endpoints


def committed_policy(spec: CampaignSpec, *, without: str | None = None) -> dict[str, Any]:
    """docs/iam/controller.json with the weights bucket filled in (docs/iam/README.md), less one action."""
    text = (ROOT / "docs" / "iam" / "controller.json").read_text().replace("WEIGHTS-BUCKET", spec.weights.s3_bucket)
    policy: dict[str, Any] = json.loads(text)
    for statement in policy["Statement"]:
        statement["Action"] = [a for a in statement["Action"] if a != without]
    policy["Statement"] = [s for s in policy["Statement"] if s["Action"]]  # IAM refuses a statement without one
    return policy


def run_as_user(policy: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> str:
    """A sandbox IAM user carrying ``policy`` (a managed policy, as an administrator would attach it), whose
    keys the rest of the test uses. Returns its ARN."""
    iam = boto3.client("iam", region_name="us-east-1")
    user = iam.create_user(UserName="campaign-runner")["User"]
    arn = iam.create_policy(PolicyName="capserve-controller", PolicyDocument=json.dumps(policy))["Policy"]["Arn"]
    iam.attach_user_policy(UserName="campaign-runner", PolicyArn=arn)
    key = iam.create_access_key(UserName="campaign-runner")["AccessKey"]
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key["AccessKeyId"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", key["SecretAccessKey"])
    return str(user["Arn"])


def test_a_missing_action_stops_the_campaign_before_anything_is_bought(
    tmp_path: Path, far_ends: SandboxEndpoints, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = load_spec(EXAMPLE)
    missing = "eks:CreateCluster"
    user = run_as_user(committed_policy(spec, without=missing), monkeypatch)
    with pytest.raises(PreflightError) as caught:
        campaign(spec, out_dir=tmp_path / "out", hub_endpoint=far_ends.hub, teardown_when_done=True)

    assert caught.value.problems == [
        f"AWS permissions: {user} may not call 1 action(s) this campaign needs (IAM policy simulation): {missing}. "
        "Attach the policy docs/iam/controller.json (its buckets filled in; docs/iam/README.md) to that principal, "
        "or grant these actions, and run again"
    ]
    # Nothing was asked of the capacity APIs (not even a DryRun purchase), nothing created.
    assert capacity_ext.calls(include_dry_run=True) == []
    assert capacity_ext.reservations() == []
    assert boto3.client("eks", region_name="us-west-2").list_clusters()["clusters"] == []


@pytest.mark.parametrize("missing", ["iam:PassRole", "ec2:RunInstances", "iam:CreateServiceLinkedRole"])
def test_an_action_aws_checks_on_top_of_the_called_one_is_simulated_and_denied(
    missing: str, far_ends: SandboxEndpoints, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The campaign's preflight turns what check_permissions denies into the problem above (that test proves
    # the path once); here, the simulation of each dependent action the policy may lack.
    spec = load_spec(EXAMPLE)
    user = run_as_user(committed_policy(spec, without=missing), monkeypatch)
    check = check_permissions.fn(spec, "us-west-2", records_bucket=None, home_region="us-west-2")
    assert (check.principal, check.denied, check.skipped) == (user, (missing,), None)


def test_the_generated_policy_passes_preflight(far_ends: SandboxEndpoints, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = load_spec(EXAMPLE)
    user = run_as_user(committed_policy(spec), monkeypatch)
    check = check_permissions.fn(spec, "us-west-2", records_bucket=None, home_region="us-west-2")
    assert (check.principal, check.denied, check.skipped) == (user, (), None)


def test_an_existing_cluster_the_caller_has_no_access_entry_on_is_refused_before_purchase(
    far_ends: SandboxEndpoints, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = load_spec(EXAMPLE)
    eks = boto3.client("eks", region_name="us-west-2")
    eks.create_cluster(name="team", roleArn="arn:aws:iam::123456789012:role/team", resourcesVpcConfig={},
                       accessConfig={"authenticationMode": "API"})
    cluster = spec.cluster.model_copy(update={"existing_cluster_name": "team"})
    existing = spec.model_copy(update={"cluster": cluster})
    user = run_as_user(committed_policy(spec), monkeypatch)

    check = check_permissions.fn(existing, "us-west-2", records_bucket=None, home_region="us-west-2")
    assert (check.denied, cluster_access_problem(check)) == ((), (
        f"cluster.existing_cluster_name: {user} has no EKS access entry on cluster team, so the campaign's runs "
        "cannot use its Kubernetes API. Have the cluster's administrator create one for it with "
        "AmazonEKSClusterAdminPolicy (aws eks create-access-entry, aws eks associate-access-policy), or run as a "
        "principal that has one, and run again"))
    boto3.client("eks", region_name="us-west-2").create_access_entry(clusterName="team", principalArn=user)
    again = check_permissions.fn(existing, "us-west-2", records_bucket=None, home_region="us-west-2")
    assert cluster_access_problem(again) is None


def test_every_denied_action_is_named_at_once(far_ends: SandboxEndpoints, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = load_spec(EXAMPLE)
    policy = committed_policy(spec)
    # An explicit Deny wins over the Allow the generated policy gives (IAM user guide, "Policy evaluation logic").
    policy["Statement"].append({"Effect": "Deny", "Action": ["ec2:PurchaseCapacityBlock", "s3:PutObject"],
                                "Resource": "*"})
    run_as_user(policy, monkeypatch)
    check = check_permissions.fn(spec, "us-west-2", records_bucket=None, home_region="us-west-2")
    assert check.denied == ("ec2:PurchaseCapacityBlock", "s3:PutObject")


def test_an_assumed_role_is_simulated_as_its_role(far_ends: SandboxEndpoints, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = load_spec(EXAMPLE)
    iam = boto3.client("iam", region_name="us-east-1")
    trust = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"AWS": "*"},
                                                     "Action": "sts:AssumeRole"}]}
    role = iam.create_role(RoleName="runner", Path="/team/", AssumeRolePolicyDocument=json.dumps(trust))["Role"]
    iam.put_role_policy(RoleName="runner", PolicyName="read-only", PolicyDocument=json.dumps(
        {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": ["iam:GetRole", "iam:Simulate*"],
                                                 "Resource": "*"}]}))
    session = boto3.client("sts", region_name="us-east-1").assume_role(RoleArn=role["Arn"], RoleSessionName="preflight")
    for name, key in (("AWS_ACCESS_KEY_ID", "AccessKeyId"), ("AWS_SECRET_ACCESS_KEY", "SecretAccessKey"),
                      ("AWS_SESSION_TOKEN", "SessionToken")):
        monkeypatch.setenv(name, session["Credentials"][key])
    check = check_permissions.fn(spec, "us-west-2", records_bucket=None, home_region="us-west-2")
    assert check.principal == "arn:aws:iam::123456789012:role/team/runner"  # with its path, from GetRole
    assert "eks:CreateCluster" in check.denied and "iam:GetRole" not in check.denied


@pytest.mark.slow
@pytest.mark.parametrize("missing", [
    "eks:CreateCluster",
    # Actions AWS checks on top of the called one (capserve.core.permissions.DEPENDENT_ACTIONS): EKS's for a node
    # group with a launch template, IAM's for the service-linked role the account's first cluster makes.
    "ec2:RunInstances", "ec2:CreateTags", "iam:CreateServiceLinkedRole",
])
def test_enforcement_itself_refuses_an_action_missing_from_the_policy(
    missing: str, far_ends: SandboxEndpoints, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Preflight's simulation would name the action first (the tests above): here bring-up's real calls, with no
    # simulation before them, are refused by moto's enforcement, so a registry gap the simulation shares would
    # be caught by this test's twin (the whole campaign under the generated policy: tests/flows/test_campaign.py's
    # first test). Bring-up alone, on a lease of the block: the stages before it make none of these calls, and
    # what a campaign does when bring-up fails (its report, the teardown) is tests/flows/test_campaign.py's.
    spec = load_spec(EXAMPLE)
    run_as_user(committed_policy(spec, without=missing), monkeypatch)
    monkeypatch.delenv("AWS_SESSION_TOKEN")  # an IAM user's long-term keys carry no session token
    with iam_enforced(), pytest.raises(PermanentError) as caught:
        bring_up(spec, block_lease(far_ends.region), UP)

    assert f"is not authorized to perform: {missing}" in str(caught.value)


def block_lease(region: str) -> Lease:
    """A lease of a started 24-h block in ``region``, as acquire records one."""
    now = datetime.now(UTC)
    return Lease(
        provider="ec2-capacity-block", region=region, availability_zone=f"{region}a",
        reservation_id="cr-0123456789abcdef0", start=now - timedelta(hours=1), end=now + timedelta(hours=23),
        instance_type="p6-b300.48xlarge", instance_count=1, upfront_fee=1.0,
    )
