"""The permissions registry against the code: every boto3 call in capserve/tasks is declared, each declared
call exists in botocore's model under the IAM action the registry gives it, and the committed policies are
what the registry generates."""

from __future__ import annotations

import ast
import json
from functools import cache
from pathlib import Path

import botocore.exceptions
import botocore.session
import pytest
from botocore import xform_name

from capserve.core import permissions
from capserve.core.permissions import (
    ACTION_RENAMES,
    IAM_PREFIX,
    REGISTRY,
    Feature,
    PermissionCheck,
    Targets,
    controller_policy,
    declared_calls,
    features_for,
    permission_problem,
    policy_files,
    principal_to_simulate,
)

ROOT = Path(__file__).resolve().parents[2]
TASKS = ROOT / "capserve" / "tasks"
# Teardown's calls are data: capserve/core/teardown/plan.py names service and method, tasks/teardown/execute.py
# sends them with getattr.
TEARDOWN_PLAN = ROOT / "capserve" / "core" / "teardown" / "plan.py"
# Modules that pick a method or paginator by a variable; their string constants are read as the calls.
DYNAMIC = {"teardown/execute.py", "teardown/inventory.py", "eks_leftovers.py"}
# Receivers named for their service but not spelled like it.
ALIASES = {"elb": "elbv2"}
_SESSION = botocore.session.get_session()


@cache
def operations(service: str) -> dict[str, str]:
    """boto3 method name → the API operation's name, from botocore's service model."""
    return {xform_name(name): name for name in _SESSION.get_service_model(service).operation_names}


@cache
def waiters(service: str) -> dict[str, str]:
    """boto3 waiter name → the operation it polls."""
    try:
        model = _SESSION.get_waiter_model(service)
    except botocore.exceptions.DataNotFoundError:  # a service without waiters: botocore has no waiters file
        return {}
    return {xform_name(name): model.get_waiter(name).operation for name in model.waiter_names}


def _constant(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _client_service(node: ast.AST) -> str | None:
    """``client("ec2", …)`` / ``aws.client("ec2")`` / ``aws.new_client("sts")`` / ``x or aws.client("sts")`` → "ec2"."""
    if isinstance(node, ast.BoolOp):
        return next((s for s in map(_client_service, node.values) if s), None)
    if isinstance(node, ast.Call) and node.args:
        name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
        if name in ("client", "new_client"):
            return _constant(node.args[0])
    return None


def _assigned(tree: ast.Module) -> dict[str, str]:
    """Variable → service, for every ``x = client("svc")`` (also ``x, y = client("svc"), …``) in the module."""
    found = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            pairs = (zip(target.elts, node.value.elts, strict=False)
                     if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple) else [(target, node.value)])
            for name, value in pairs:
                service = _client_service(value)
                if isinstance(name, ast.Name) and service:
                    found[name.id] = service
    return found


def _services_made(tree: ast.Module) -> set[str]:
    return {s for node in ast.walk(tree) if (s := _client_service(node))}


def _constants_as_calls(tree: ast.Module, services: set[str]) -> set[str]:
    """Every string constant that names an operation (or waiter) of one of ``services``."""
    calls = set()
    for node in ast.walk(tree):
        text = _constant(node)
        for service in services:
            if text in operations(service):
                calls.add(f"{service}.{text}")
            if text in waiters(service):
                calls.add(f"{service}.{xform_name(waiters(service)[text])}")
    return calls


@cache
def boto3_calls() -> tuple[set[str], list[str], set[str]]:
    """(calls found as "service.method", receivers that could not be told apart, modules with dynamic calls)."""
    made_anywhere: set[str] = set()
    trees = {p.relative_to(TASKS).as_posix(): ast.parse(p.read_text()) for p in sorted(TASKS.rglob("*.py"))}
    for tree in trees.values():
        made_anywhere |= _services_made(tree)
    calls: set[str] = set()
    unresolved: list[str] = []
    dynamic: set[str] = set()
    for module, tree in trees.items():
        variables = _assigned(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr":
                if len(node.args) > 1 and _constant(node.args[1]) is None:
                    dynamic.add(module)
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            receiver, method = node.func.value, node.func.attr
            service = _client_service(receiver)
            if service is None and isinstance(receiver, ast.Name):
                service = variables.get(receiver.id) or ALIASES.get(receiver.id)
                service = service or (receiver.id if receiver.id in made_anywhere else None)
            if method in ("get_paginator", "get_waiter"):
                name = _constant(node.args[0]) if node.args else None
                if name is None:
                    dynamic.add(module)
                elif service is None:
                    unresolved.append(f"{module}:{node.lineno} {method}({name!r})")
                else:
                    operation = name if method == "get_paginator" else xform_name(waiters(service)[name])
                    calls.add(f"{service}.{operation}")
            elif service is not None and method in operations(service):
                calls.add(f"{service}.{method}")
            elif service is None and any(method in operations(s) for s in made_anywhere):
                unresolved.append(f"{module}:{node.lineno} {ast.unparse(receiver)}.{method}")
        if module in DYNAMIC:
            calls |= _constants_as_calls(tree, _services_made(tree))
    plan = ast.parse(TEARDOWN_PLAN.read_text())
    plan_services = {c for node in ast.walk(plan) if (c := _constant(node)) in made_anywhere}
    calls |= _constants_as_calls(plan, plan_services)
    return calls, unresolved, dynamic


def test_every_boto3_call_in_the_tasks_is_declared() -> None:
    calls, unresolved, dynamic = boto3_calls()
    assert unresolved == [], "name each client variable after its service (ec2 = client('ec2', …))"
    assert dynamic == DYNAMIC, "a module picks its boto3 call by a variable: list it in DYNAMIC"
    assert len(calls) > 100  # the scan sees the code (a broken scan would find nothing and pass)
    assert sorted(calls - declared_calls()) == []


def test_every_declared_call_exists_and_maps_to_its_iam_action() -> None:
    calls, _, _ = boto3_calls()
    for permission in REGISTRY:
        if permission.call is None:
            continue
        service, method = permission.call.split(".")
        assert method in operations(service), permission.call
        natural = f"{IAM_PREFIX.get(service, service)}:{operations(service)[method]}"
        own = [p.action for p in REGISTRY if p.call == permission.call]
        assert ACTION_RENAMES.get(permission.call, natural) in own, permission.call
    # Nothing declared that the code no longer calls.
    assert sorted(declared_calls() - calls) == []


def test_s3_operations_map_to_the_actions_s3_authorizes() -> None:
    # Service Authorization Reference, Amazon S3: HeadObject needs s3:GetObject, ListObjectsV2 s3:ListBucket.
    assert permissions.iam_action("s3.head_object") == "s3:GetObject"
    assert permissions.iam_action("s3.list_objects_v2") == "s3:ListBucket"
    assert permissions.iam_action("s3.head_bucket") == "s3:ListBucket"
    assert permissions.iam_action("elbv2.describe_tags") == "elasticloadbalancing:DescribeTags"


def test_a_role_passed_needs_iam_pass_role() -> None:
    passing = {p.call for p in REGISTRY if p.action == "iam:PassRole"}
    assert passing == {"eks.create_cluster", "eks.create_nodegroup", "sagemaker.create_cluster"}


@pytest.mark.parametrize("name", sorted(policy_files()))
def test_committed_policies_are_what_the_registry_generates(name: str) -> None:
    committed = ROOT / "docs" / "iam" / name
    assert committed.read_text() == policy_files()[name], (
        f"docs/iam/{name} is stale: run python -m capserve.core.permissions --write docs/iam"
    )


def test_the_controller_policy_fits_a_managed_policy() -> None:
    # A customer managed policy holds at most 6,144 characters, whitespace not counted (IAM user guide,
    # "IAM and AWS STS quotas").
    text = json.dumps(controller_policy(Targets()), separators=(",", ":"))
    assert len(text) <= 6144


def test_features_follow_the_spec() -> None:
    eks = features_for(provider="ec2-capacity-block", cluster_kind="eks", image_mirror="ecr")
    hyperpod = features_for(provider="sagemaker-training-plan", cluster_kind="hyperpod", image_mirror="none")
    assert {Feature.CAPACITY_BLOCK, Feature.EVENTS, Feature.IMAGE, Feature.NETWORK} <= eks
    assert Feature.HYPERPOD not in eks and Feature.TRAINING_PLAN not in eks
    assert {Feature.TRAINING_PLAN, Feature.HYPERPOD} <= hyperpod
    assert Feature.CAPACITY_BLOCK not in hyperpod and Feature.IMAGE not in hyperpod


def test_the_principal_simulated_is_the_user_or_the_sessions_role() -> None:
    assert principal_to_simulate("arn:aws:iam::123456789012:user/ops/alice") == (
        "user", "arn:aws:iam::123456789012:user/ops/alice")
    assert principal_to_simulate("arn:aws:sts::123456789012:assumed-role/Runner/i-0abc") == ("role", "Runner")
    # SimulatePrincipalPolicy takes a user, group or role: not the root user nor a federated user.
    assert principal_to_simulate("arn:aws:iam::123456789012:root") is None
    assert principal_to_simulate("arn:aws:sts::123456789012:federated-user/bob") is None


def test_every_denied_action_is_one_problem() -> None:
    check = PermissionCheck(principal="arn:aws:iam::1:user/u", denied=("eks:CreateCluster", "iam:PassRole"))
    assert permission_problem(check) == (
        "AWS permissions: arn:aws:iam::1:user/u may not call 2 action(s) this campaign needs (IAM policy "
        "simulation): eks:CreateCluster, iam:PassRole. Attach the policy docs/iam/controller.json (its buckets "
        "filled in; docs/iam/README.md) to that principal, or grant these actions, and run again"
    )
    assert permission_problem(PermissionCheck(principal="arn:aws:iam::1:user/u")) is None


def _grants(action: str, resource: str, context: dict[str, str]) -> bool:
    """Whether the generated controller policy (one campaign's names) allows ``action`` on ``resource``."""
    from capserve_sandbox.kube import iam_eval

    targets = permissions.campaign_targets(
        campaign_id="k3", account_id="123456789012", partition="aws", weights_bucket="w", weights_prefix="p",
        records_bucket="r",
    )
    return iam_eval.decision([controller_policy(targets)], action, resource, context) == "allowed"


def test_a_node_group_from_a_launch_template_needs_run_instances_and_create_tags_on_the_campaigns_launch() -> None:
    # EKS user guide, "Customize managed nodes with launch templates": the caller of CreateNodegroup needs both.
    needed = {d.action for d in permissions.DEPENDENT_ACTIONS["eks.create_nodegroup"] if d.when == "launchTemplate"}
    assert needed == {"ec2:RunInstances", "ec2:CreateTags"}
    assert {"ec2:RunInstances", "ec2:CreateTags"} <= {p.action for p in REGISTRY if p.call == "eks.create_nodegroup"}
    ec2 = "arn:aws:ec2:us-east-2:123456789012"
    ours, theirs = {"aws:RequestTag/capserve.io/campaign": "k3"}, {"aws:RequestTag/capserve.io/campaign": "other"}
    for action in ("ec2:RunInstances", "ec2:CreateTags"):
        assert _grants(action, f"{ec2}:instance/*", ours)
        assert not _grants(action, f"{ec2}:instance/*", theirs)  # another campaign's instances: refused
    template = f"{ec2}:launch-template/lt-1"
    assert _grants("ec2:RunInstances", template, {"aws:ResourceTag/capserve.io/campaign": "k3"})
    assert not _grants("ec2:RunInstances", template, {"aws:ResourceTag/capserve.io/campaign": "other"})
    # What the launch uses but does not tag: the AMI (AWS's), subnets and security groups (maybe not ours).
    assert _grants("ec2:RunInstances", "arn:aws:ec2:us-east-2::image/ami-1", {})
    assert _grants("ec2:RunInstances", f"{ec2}:subnet/subnet-1", {})


def test_only_eks_and_hyperpod_service_linked_roles_may_be_created() -> None:
    hyperpod = permissions.HYPERPOD_SLR
    arn = hyperpod.arn("aws", "123456789012")
    assert arn == ("arn:aws:iam::123456789012:role/aws-service-role/hyperpod.sagemaker.amazonaws.com/"
                   "AWSServiceRoleForSageMakerHyperPod")
    assert _grants("iam:CreateServiceLinkedRole", arn, {"iam:AWSServiceName": hyperpod.service})
    assert not _grants("iam:CreateServiceLinkedRole", arn, {"iam:AWSServiceName": "ec2.amazonaws.com"})
    other = "arn:aws:iam::123456789012:role/aws-service-role/spot.amazonaws.com/AWSServiceRoleForEC2Spot"
    assert not _grants("iam:CreateServiceLinkedRole", other, {"iam:AWSServiceName": "spot.amazonaws.com"})


def test_preflight_simulates_the_dependent_actions_with_their_resources_and_context() -> None:
    targets = permissions.campaign_targets(
        campaign_id="k3", account_id="123456789012", partition="aws", weights_bucket="w", weights_prefix="p",
        records_bucket="r",
    )
    hyperpod = features_for(provider="sagemaker-training-plan", cluster_kind="hyperpod", image_mirror="none")
    asked = permissions.simulations(hyperpod, targets)
    linked = [s for s in asked if s.actions == ("iam:CreateServiceLinkedRole",)]
    assert {(s.resources, s.context) for s in linked} == {
        ((r.arn("aws", "123456789012"),), (("iam:AWSServiceName", r.service),))
        for r in (permissions.EKS_SLR, permissions.EKS_NODEGROUP_SLR, permissions.HYPERPOD_SLR)
    }
    launched = [s for s in asked if "ec2:RunInstances" in s.actions]
    assert len(launched) == 3  # the tagged launch, the tagged template and reservation, the untagged rest
    assert any(("aws:RequestTag/capserve.io/campaign", "k3") in s.context for s in launched)


def test_passed_roles_are_read_where_each_call_names_them() -> None:
    passes = {call: next(d for d in deps if d.action == "iam:PassRole")
              for call, deps in permissions.DEPENDENT_ACTIONS.items()}
    request = {"InstanceGroups": [{"ExecutionRole": "arn:aws:iam::1:role/a"},
                                  {"ExecutionRole": "arn:aws:iam::1:role/b"}]}
    assert permissions.passed_roles(passes["sagemaker.create_cluster"], request) == [
        "arn:aws:iam::1:role/a", "arn:aws:iam::1:role/b"]
    assert permissions.passed_roles(passes["eks.create_nodegroup"], {"nodeRole": "arn:aws:iam::1:role/n"}) == [
        "arn:aws:iam::1:role/n"]
    nodegroup = permissions.dependents_of("eks:CreateNodegroup")
    assert [d.action for d in nodegroup if permissions.applies(d, {"nodeRole": "x"})] == [
        "iam:PassRole", "iam:CreateServiceLinkedRole"]  # no launch template: EKS asks no RunInstances of the caller
