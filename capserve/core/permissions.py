"""Every AWS permission a campaign needs, declared once: the registry, the policies made from it, and what
preflight simulates before anything is bought (docs/iam/README.md).

Each ``Permission`` ties one IAM action to the boto3 call that needs it (``"s3.head_object"``: the client's
service name and method), the feature of the campaign that makes the call, and the resources it may touch
(``Scope``). ``tests/unit/test_permissions.py`` scans ``capserve/tasks`` for boto3 calls and fails on any
call not declared here, so the list cannot drift from the code.

The IAM action is the API operation's name under the service's IAM prefix, except where the Service
Authorization Reference (https://docs.aws.amazon.com/service-authorization/latest/reference/) says
otherwise: ``ACTION_RENAMES``. A call may need more than its own action: tagging on create (EC2's
``ec2:CreateTags`` for ``TagSpecifications``, ``iam:TagRole``, ``sagemaker:AddTags``, ``ecr:TagResource``,
``sqs:TagQueue``, ``events:TagResource``, ``eks:TagResource``), and the actions AWS checks of the caller on
top of the called one (``DEPENDENT_ACTIONS``, each with its source: ``iam:PassRole``, EKS's
``ec2:RunInstances`` for a node group with a launch template, ``iam:CreateServiceLinkedRole``). The sandbox
demands the same table when it plays those calls under IAM enforcement. A few permissions are used by no
boto3 call of ours (``call=None``): crane's pushes to ECR.

Pure: no SDK. Run ``python -m capserve.core.permissions --write docs/iam`` to regenerate the policies.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from capserve.core.cluster import iam as roles
from capserve.core.cluster.naming import ClusterNames
from capserve.core.tags import CAMPAIGN_TAG


class Feature(StrEnum):
    """What part of a campaign makes the call; preflight simulates the features a spec uses."""

    PREFLIGHT = "preflight"  # the read-only checks before buying (and this simulation)
    RECORDS = "records"  # the campaign record and the hub watcher's marks, in the records bucket
    CAPACITY_BLOCK = "capacity-block"  # EC2 Capacity Blocks
    TRAINING_PLAN = "training-plan"  # SageMaker training plans (HyperPod)
    WEIGHTS = "weights"  # the weights bucket
    IMAGE = "image"  # the serving image copied into ECR (serving.image_mirror: ecr)
    NETWORK = "network"  # VPC, subnets, gateways, security group
    ROLES = "roles"  # the campaign's IAM roles
    EKS = "eks"  # the EKS cluster, launch template, node group, access entry
    HYPERPOD = "hyperpod"  # the HyperPod cluster and its lifecycle-script bucket
    EVENTS = "events"  # EventBridge rule and SQS queue for Capacity Block events
    COST = "cost"  # the Price List API
    TEARDOWN = "teardown"  # inventory by tag, deletion, and what EKS left behind (status, down, reaper)


class Scope(StrEnum):
    """Which resources a statement names (``resource_and_condition``)."""

    ANY = "any"  # the action has no resource-level permission, or the resource is not ours to name
    TAGGED = "tagged"  # an existing resource carrying the campaign tag (aws:ResourceTag)
    TAGGING = "tagging"  # a create whose request carries the campaign tag (aws:RequestTag)
    ROLES = "roles"  # the campaign's IAM roles, by name (capserve-*)
    MANAGED_POLICIES = "managed-policies"  # the campaign's roles, and only the AWS-managed policies it attaches
    SERVICE_LINKED_ROLES = "service-linked-roles"  # EKS's and HyperPod's own roles, made on first use
    LAUNCH_RESOURCES = "launch-resources"  # what a node launch uses but does not make or tag (image, subnet, ...)
    WEIGHTS_BUCKET = "weights-bucket"
    WEIGHTS_OBJECTS = "weights-objects"
    RECORDS_BUCKET = "records-bucket"
    RECORDS_OBJECTS = "records-objects"
    LIFECYCLE_BUCKET = "lifecycle-bucket"  # HyperPod's lifecycle scripts: sagemaker-* (docs/hyperpod.md §2)
    LIFECYCLE_OBJECTS = "lifecycle-objects"


@dataclass(frozen=True)
class Permission:
    action: str  # IAM action, "eks:CreateCluster"
    feature: Feature
    scope: Scope
    call: str | None  # the boto3 call needing it, "eks.create_cluster"; None: made by a tool, not by boto3


# boto3 client name → IAM action prefix, where they differ (Service Authorization Reference, each service's page).
IAM_PREFIX = {"elbv2": "elasticloadbalancing", "service-quotas": "servicequotas"}

# Calls whose IAM action is not the operation's own name (Service Authorization Reference, "Actions defined
# by Amazon S3"; the S3 API reference's "Permissions" section of each operation).
ACTION_RENAMES = {
    "s3.head_object": "s3:GetObject",
    "s3.head_bucket": "s3:ListBucket",
    "s3.list_objects_v2": "s3:ListBucket",
    "s3.delete_objects": "s3:DeleteObject",
    # Not renamed, only spelled as the API spells it ("OpenID"), which the snake-case name cannot say.
    "iam.list_open_id_connect_providers": "iam:ListOpenIDConnectProviders",
    "service-quotas.get_aws_default_service_quota": "servicequotas:GetAWSDefaultServiceQuota",
}

# Calls that need no permission: "No permissions are required to perform this operation" (STS API reference,
# GetCallerIdentity); the EKS token is a presigned GetCallerIdentity too.
NO_PERMISSION = frozenset({"sts.get_caller_identity"})

# Every create that tags its resource in the same request: the tagging action it also needs.
_TAG_ON_CREATE = {"ec2": "ec2:CreateTags", "iam": "iam:TagRole", "sagemaker": "sagemaker:AddTags",
                  "ecr": "ecr:TagResource", "sqs": "sqs:TagQueue", "events": "events:TagResource",
                  "eks": "eks:TagResource"}


def iam_action(call: str) -> str:
    """``"eks.create_cluster"`` → ``"eks:CreateCluster"`` (snake case back to the operation's name)."""
    if call in ACTION_RENAMES:
        return ACTION_RENAMES[call]
    service, method = call.split(".")
    operation = "".join(word.capitalize() for word in method.split("_"))
    return f"{IAM_PREFIX.get(service, service)}:{operation}"


def _calls(feature: Feature, scope: Scope, *calls: str) -> list[Permission]:
    return [Permission(iam_action(c), feature, scope, c) for c in calls]


# --- actions AWS checks of the caller on top of the called one ------------------------------------------------------

_PASS_ROLE = "https://docs.aws.amazon.com/IAM/latest/UserGuide/id_roles_use_passrole.html"  # noqa: S105 - a documentation URL, not a password
_EKS_LAUNCH_TEMPLATES = "https://docs.aws.amazon.com/eks/latest/userguide/launch-templates.html"
_EKS_SLR = "https://docs.aws.amazon.com/eks/latest/userguide/using-service-linked-roles.html"
_HYPERPOD_SLR = ("https://docs.aws.amazon.com/sagemaker/latest/dg/"
                 "security-iam-awsmanpol-AmazonSageMakerHyperPodServiceRolePolicy.html")


@dataclass(frozen=True)
class ServiceLinkedRole:
    """A role a service makes in the account on first use, with the caller's ``iam:CreateServiceLinkedRole``
    (IAM user guide, "Service-linked role permissions": https://docs.aws.amazon.com/IAM/latest/UserGuide/
    using-service-linked-roles.html#service-linked-role-permissions); ``service`` is the ``iam:AWSServiceName``
    it is made for, ``source`` the service's page naming the role."""

    service: str
    name: str
    source: str

    def arn(self, partition: str, account: str) -> str:
        return f"arn:{partition}:iam::{account}:role/aws-service-role/{self.service}/{self.name}"


EKS_SLR = ServiceLinkedRole("eks.amazonaws.com", "AWSServiceRoleForAmazonEKS", _EKS_SLR)
EKS_NODEGROUP_SLR = ServiceLinkedRole("eks-nodegroup.amazonaws.com", "AWSServiceRoleForAmazonEKSNodegroup", _EKS_SLR)
HYPERPOD_SLR = ServiceLinkedRole("hyperpod.sagemaker.amazonaws.com", "AWSServiceRoleForSageMakerHyperPod",
                                 _HYPERPOD_SLR)
SERVICE_LINKED_ROLES = (EKS_SLR, EKS_NODEGROUP_SLR, HYPERPOD_SLR)


@dataclass(frozen=True)
class Dependent:
    """An action AWS authorizes for the caller of a call, on top of the call's own.

    ``when``: the request field whose presence makes AWS check it (None: every request); ``roles``: for
    ``iam:PassRole``, where the request names the role(s) passed (``"InstanceGroups[].ExecutionRole"``);
    ``service_linked_role``: for ``iam:CreateServiceLinkedRole``, the role made when the account lacks it;
    ``scopes``: the policy statements that grant it (one per kind of resource it is authorized on)."""

    action: str
    scopes: tuple[Scope, ...]
    source: str
    when: str | None = None
    roles: tuple[str, ...] = ()
    service_linked_role: ServiceLinkedRole | None = None


def _passes(*fields: str) -> Dependent:
    return Dependent("iam:PassRole", (Scope.ROLES,), _PASS_ROLE, roles=fields)


def _links(role: ServiceLinkedRole) -> Dependent:
    return Dependent("iam:CreateServiceLinkedRole", (Scope.SERVICE_LINKED_ROLES,), role.source,
                     service_linked_role=role)


DEPENDENT_ACTIONS: dict[str, tuple[Dependent, ...]] = {
    "eks.create_cluster": (_passes("roleArn"), _links(EKS_SLR)),
    "eks.create_nodegroup": (
        _passes("nodeRole"),
        _links(EKS_NODEGROUP_SLR),
        # "The IAM entity calling the CreateNodegroup or UpdateNodegroupVersion APIs must have permissions for
        # ec2:RunInstances and ec2:CreateTags" (EKS user guide, "Customize managed nodes with launch templates",
        # "Tagging Amazon EC2 instances"). RunInstances authorizes on every resource of the launch (EC2 user
        # guide, "Example policies for working with the Amazon EC2 API", "Launch instances"): the instances and
        # volumes it tags (aws:RequestTag), the campaign's launch template and Capacity Block reservation
        # (aws:ResourceTag), and the image, subnet, security groups and interfaces, which carry no campaign tag.
        Dependent("ec2:RunInstances", (Scope.TAGGING, Scope.TAGGED, Scope.LAUNCH_RESOURCES), _EKS_LAUNCH_TEMPLATES,
                  when="launchTemplate"),
        Dependent("ec2:CreateTags", (Scope.TAGGING,), _EKS_LAUNCH_TEMPLATES, when="launchTemplate"),
    ),
    "sagemaker.create_cluster": (_passes("InstanceGroups[].ExecutionRole"), _links(HYPERPOD_SLR)),
}


def dependents_of(action: str) -> tuple[Dependent, ...]:
    """The dependent actions of the IAM action ``action`` (``"eks:CreateNodegroup"``), for the sandbox."""
    return next((deps for call, deps in DEPENDENT_ACTIONS.items() if iam_action(call) == action), ())


def applies(dependent: Dependent, request: dict[str, Any]) -> bool:
    """Whether AWS checks ``dependent`` for this request (its parameters as the API names them)."""
    return dependent.when is None or bool(request.get(dependent.when))


def passed_roles(dependent: Dependent, request: dict[str, Any]) -> list[str]:
    """The role ARNs the request passes, at ``dependent.roles`` (``"a[].b"``: field b of each item of list a)."""
    found: list[str] = []
    for path in dependent.roles:
        outer, _, inner = path.partition("[].")
        values = [item.get(inner) for item in request.get(outer) or []] if inner else [request.get(outer)]
        found += [str(v) for v in values if v]
    return found


def _create(
    feature: Feature, scope: Scope, call: str, *, tag_scope: Scope = Scope.TAGGING
) -> list[Permission]:
    """A create that tags what it makes: its own action, its tagging action, and its dependent actions."""
    implied = [Permission(_TAG_ON_CREATE[call.split(".")[0]], feature, tag_scope, call)]
    implied += [Permission(d.action, feature, s, call) for d in DEPENDENT_ACTIONS.get(call, ()) for s in d.scopes]
    return [Permission(iam_action(call), feature, scope, call), *implied]


_S3_BUCKET = ("s3.head_bucket", "s3.get_bucket_tagging")
_S3_MAKE_BUCKET = ("s3.create_bucket", "s3.put_bucket_tagging")
_S3_OBJECTS = ("s3.head_object", "s3.get_object", "s3.put_object")

F, S = Feature, Scope
REGISTRY: tuple[Permission, ...] = (
    *_calls(F.PREFLIGHT, S.ANY, "ec2.describe_instance_type_offerings", "iam.simulate_principal_policy",
            "iam.get_role"),
    # The quotas the campaign counts against and their usage (docs/preflight.md §3).
    *_calls(F.PREFLIGHT, S.ANY, "service-quotas.get_service_quota", "service-quotas.get_aws_default_service_quota",
            "ec2.describe_vpcs", "ec2.describe_addresses", "ec2.describe_nat_gateways", "ec2.describe_subnets",
            "ec2.describe_availability_zones", "ec2.describe_instances"),
    *_calls(F.RECORDS, S.RECORDS_BUCKET, *_S3_BUCKET, *_S3_MAKE_BUCKET, "s3.list_objects_v2"),
    *_calls(F.RECORDS, S.RECORDS_OBJECTS, *_S3_OBJECTS),
    *_calls(F.CAPACITY_BLOCK, S.ANY, "ec2.describe_capacity_block_offerings", "ec2.describe_availability_zones",
            "ec2.describe_capacity_reservations"),
    *_create(F.CAPACITY_BLOCK, S.TAGGING, "ec2.purchase_capacity_block"),
    *_calls(F.TRAINING_PLAN, S.ANY, "sagemaker.search_training_plan_offerings", "sagemaker.describe_training_plan",
            "sagemaker.list_tags"),
    *_create(F.TRAINING_PLAN, S.TAGGING, "sagemaker.create_training_plan"),
    *_calls(F.WEIGHTS, S.WEIGHTS_BUCKET, *_S3_BUCKET, *_S3_MAKE_BUCKET),
    *_calls(F.WEIGHTS, S.WEIGHTS_OBJECTS, *_S3_OBJECTS),
    *_calls(F.IMAGE, S.ANY, "ecr.describe_repositories", "ecr.list_tags_for_resource", "ecr.describe_images",
            "ecr.get_authorization_token"),
    *_create(F.IMAGE, S.TAGGING, "ecr.create_repository"),
    # crane copies the image into the campaign's repository with the token (docs/serving.md §9): the push
    # and pull actions of the ECR user guide, "Private repository policies", on that tagged repository.
    *(Permission(f"ecr:{a}", F.IMAGE, S.TAGGED, None) for a in (
        "BatchCheckLayerAvailability", "InitiateLayerUpload", "UploadLayerPart", "CompleteLayerUpload", "PutImage",
        "BatchGetImage", "GetDownloadUrlForLayer")),
    *_calls(F.NETWORK, S.ANY, "ec2.describe_availability_zones", "ec2.describe_vpcs", "ec2.describe_subnets",
            "ec2.describe_route_tables", "ec2.describe_internet_gateways", "ec2.describe_addresses",
            "ec2.describe_nat_gateways", "ec2.describe_vpc_endpoints", "ec2.describe_security_groups",
            # These also authorize on a resource that is not the one made (the VPC, subnet or rule), so a
            # request-tag condition would refuse them (Service Authorization Reference, "Actions defined by
            # Amazon EC2": each lists several resource types).
            "ec2.associate_route_table", "ec2.authorize_security_group_ingress",
            "ec2.authorize_security_group_egress"),
    *_create(F.NETWORK, S.TAGGING, "ec2.create_vpc"),
    *_create(F.NETWORK, S.TAGGING, "ec2.create_internet_gateway"),
    *_create(F.NETWORK, S.TAGGING, "ec2.allocate_address"),
    *_create(F.NETWORK, S.ANY, "ec2.create_subnet"),
    *_create(F.NETWORK, S.ANY, "ec2.create_route_table"),
    *_create(F.NETWORK, S.ANY, "ec2.create_nat_gateway"),
    *_create(F.NETWORK, S.ANY, "ec2.create_vpc_endpoint"),
    *_create(F.NETWORK, S.ANY, "ec2.create_security_group"),
    *_calls(F.NETWORK, S.TAGGED, "ec2.modify_vpc_attribute", "ec2.modify_subnet_attribute",
            "ec2.attach_internet_gateway", "ec2.create_route", "ec2.replace_route", "ec2.modify_vpc_endpoint"),
    *_calls(F.ROLES, S.ROLES, "iam.get_role", "iam.list_attached_role_policies", "iam.get_role_policy",
            "iam.put_role_policy"),
    *_create(F.ROLES, S.ROLES, "iam.create_role"),
    *_calls(F.ROLES, S.MANAGED_POLICIES, "iam.attach_role_policy"),
    *_calls(F.EKS, S.ANY, "eks.describe_cluster", "eks.describe_nodegroup", "eks.describe_access_entry",
            "eks.create_access_entry", "eks.associate_access_policy", "eks.list_associated_access_policies",
            "ec2.describe_launch_templates", "ec2.describe_launch_template_versions", "ec2.describe_instance_types"),
    *_create(F.EKS, S.TAGGING, "eks.create_cluster"),
    # A node group may join a cluster the campaign did not make (cluster.existing_cluster_name), untagged.
    *_create(F.EKS, S.ANY, "eks.create_nodegroup"),
    *_create(F.EKS, S.TAGGING, "ec2.create_launch_template"),
    *_calls(F.EKS, S.TAGGED, "ec2.create_launch_template_version"),
    # The GPU node group the prepare run made at size 0 is scaled at the block's start.
    *_calls(F.EKS, S.TAGGED, "eks.update_nodegroup_config"),
    *_calls(F.HYPERPOD, S.ANY, "sagemaker.describe_cluster", "eks.describe_cluster"),
    *_create(F.HYPERPOD, S.TAGGING, "sagemaker.create_cluster"),
    *_calls(F.HYPERPOD, S.LIFECYCLE_BUCKET, *_S3_BUCKET, *_S3_MAKE_BUCKET),
    *_calls(F.HYPERPOD, S.LIFECYCLE_OBJECTS, *_S3_OBJECTS),
    *_calls(F.EVENTS, S.ANY, "events.put_targets", "events.remove_targets", "events.delete_rule",
            "sqs.set_queue_attributes", "sqs.get_queue_attributes", "sqs.receive_message", "sqs.delete_message",
            "ec2.describe_capacity_reservations"),
    *_create(F.EVENTS, S.ANY, "events.put_rule"),
    # The queues are shared by the region's campaigns: tagged as capserve's, not with one campaign's tag.
    *_create(F.EVENTS, S.ANY, "sqs.create_queue", tag_scope=S.ANY),
    *_calls(F.COST, S.ANY, "pricing.get_products"),
    *_calls(F.TEARDOWN, S.ANY, "ec2.describe_vpcs", "ec2.describe_subnets", "ec2.describe_route_tables",
            "ec2.describe_security_groups", "ec2.describe_internet_gateways", "ec2.describe_instances",
            "ec2.describe_launch_templates", "ec2.describe_launch_template_versions", "ec2.describe_nat_gateways",
            "ec2.describe_vpc_endpoints", "ec2.describe_addresses", "ec2.describe_network_interfaces",
            "ec2.describe_volumes", "ecr.describe_repositories", "ecr.list_tags_for_resource",
            "eks.list_clusters", "eks.describe_cluster", "eks.list_nodegroups", "eks.describe_nodegroup",
            "sagemaker.list_clusters", "sagemaker.describe_cluster", "sagemaker.list_tags",
            "logs.describe_log_groups", "elbv2.describe_load_balancers", "elbv2.describe_tags",
            "iam.list_open_id_connect_providers"),
    # Teardown deletes only what carries the campaign tag (docs/design.md §9).
    *_calls(F.TEARDOWN, S.TAGGED, "ec2.terminate_instances", "ec2.delete_launch_template", "eks.delete_cluster",
            "eks.delete_nodegroup", "ecr.delete_repository", "sagemaker.delete_cluster", "ec2.delete_vpc_endpoints",
            "ec2.delete_nat_gateway", "ec2.release_address", "ec2.revoke_security_group_ingress",
            "ec2.revoke_security_group_egress", "ec2.delete_security_group", "ec2.disassociate_route_table",
            "ec2.delete_route_table", "ec2.detach_internet_gateway", "ec2.delete_internet_gateway",
            "ec2.delete_subnet", "ec2.delete_vpc"),
    *_calls(F.TEARDOWN, S.ROLES, "iam.get_role", "iam.list_attached_role_policies", "iam.list_role_policies",
            "iam.detach_role_policy", "iam.delete_role_policy", "iam.delete_role"),
    *_calls(F.TEARDOWN, S.LIFECYCLE_BUCKET, *_S3_BUCKET, "s3.list_objects_v2", "s3.delete_bucket"),
    *_calls(F.TEARDOWN, S.LIFECYCLE_OBJECTS, "s3.delete_objects"),
)
del F, S


def declared_calls() -> frozenset[str]:
    """Every boto3 call the registry knows (``"service.method"``), those needing no permission included."""
    return frozenset(p.call for p in REGISTRY if p.call) | NO_PERMISSION


# --- which features a campaign uses -------------------------------------------------------------------------------


def features_for(
    *, provider: str, cluster_kind: str, image_mirror: str, existing_cluster: bool = False
) -> frozenset[Feature]:
    """The features a campaign with these spec choices calls (capacity.provider, cluster.kind, ...)."""
    used = {Feature.PREFLIGHT, Feature.RECORDS, Feature.WEIGHTS, Feature.COST, Feature.TEARDOWN, Feature.EKS}
    if provider == "ec2-capacity-block":
        used |= {Feature.CAPACITY_BLOCK, Feature.EVENTS}  # Capacity Block events: training plans send none
    else:
        used.add(Feature.TRAINING_PLAN)
    if not existing_cluster:
        used |= {Feature.NETWORK, Feature.ROLES}
    if cluster_kind == "hyperpod":
        used |= {Feature.HYPERPOD, Feature.ROLES}
    if image_mirror == "ecr":
        used.add(Feature.IMAGE)
    return frozenset(used)


# --- resources and conditions -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Targets:
    """The names a policy is scoped to; the defaults are placeholders for the committed templates."""

    partition: str = "aws"
    weights_bucket: str = "WEIGHTS-BUCKET"
    weights_prefix: str = "capserve/weights"  # weights.s3_prefix's default
    records_bucket: str = "capserve-records-*"
    role_prefix: str = "capserve-"  # every role a campaign makes is capserve-<campaign>-… (ClusterNames)
    lifecycle_bucket: str = "sagemaker-*"  # HyperPod reads lifecycle scripts only from sagemaker-* buckets
    campaign_id: str = "*"
    account: str = "*"
    role_arn: str = ""  # one of the campaign's roles, simulated where a statement names roles

    def bucket(self, name: str) -> str:
        return f"arn:{self.partition}:s3:::{name}"

    def objects(self, name: str, prefix: str = "") -> str:
        parts = [p for p in prefix.split("/") if p]
        return f"arn:{self.partition}:s3:::{name}/{'/'.join(parts) + '/' if parts else ''}*"


def _managed_policy_arns(partition: str) -> list[str]:
    names = ClusterNames(campaign_id="x")
    every = [*roles.eks_roles(names), roles.hyperpod_role(names)]
    return sorted({arn for role in every for arn in role.policy_arns(partition)})


def resource_and_condition(scope: Scope, targets: Targets) -> tuple[list[str], dict[str, Any] | None]:
    """The statement's ``Resource`` and ``Condition`` for ``scope`` (tags: the campaign tag, any value, or
    the campaign's own when ``targets.campaign_id`` is set)."""
    tag_value = targets.campaign_id
    operator = "StringLike" if "*" in tag_value else "StringEquals"
    if scope is Scope.ANY:
        return ["*"], None
    if scope is Scope.TAGGED:
        return ["*"], {operator: {f"aws:ResourceTag/{CAMPAIGN_TAG}": tag_value}}
    if scope is Scope.TAGGING:
        return ["*"], {operator: {f"aws:RequestTag/{CAMPAIGN_TAG}": tag_value}}
    if scope is Scope.SERVICE_LINKED_ROLES:  # only these roles, and only for their own services
        return ([r.arn(targets.partition, targets.account) for r in SERVICE_LINKED_ROLES],
                {"StringEquals": {"iam:AWSServiceName": [r.service for r in SERVICE_LINKED_ROLES]}})
    if scope is Scope.LAUNCH_RESOURCES:
        # Not taggable by the launch, and not necessarily the campaign's: the AMI is AWS's, the cluster security
        # group is EKS's, the subnets may be an existing cluster's (cluster.existing_cluster_name).
        ec2 = f"arn:{targets.partition}:ec2:*:{targets.account}"
        return [f"arn:{targets.partition}:ec2:*::image/*", f"{ec2}:subnet/*", f"{ec2}:security-group/*",
                f"{ec2}:network-interface/*"], None
    role = f"arn:{targets.partition}:iam::*:role/{targets.role_prefix}*"
    if scope is Scope.ROLES:
        return [role], None
    if scope is Scope.MANAGED_POLICIES:
        return [role], {"ArnEquals": {"iam:PolicyARN": _managed_policy_arns(targets.partition)}}
    buckets = {
        Scope.WEIGHTS_BUCKET: [targets.bucket(targets.weights_bucket)],
        Scope.WEIGHTS_OBJECTS: [targets.objects(targets.weights_bucket, targets.weights_prefix)],
        Scope.RECORDS_BUCKET: [targets.bucket(targets.records_bucket)],
        Scope.RECORDS_OBJECTS: [targets.objects(targets.records_bucket)],
        Scope.LIFECYCLE_BUCKET: [targets.bucket(targets.lifecycle_bucket)],
        Scope.LIFECYCLE_OBJECTS: [targets.objects(targets.lifecycle_bucket)],
    }
    return buckets[scope], None


# --- policies ------------------------------------------------------------------------------------------------------


def _sid(*words: str) -> str:
    return "".join(part.capitalize() for word in words for part in word.replace("-", " ").split())


def controller_policy(targets: Targets, features: Iterable[Feature] = tuple(Feature)) -> dict[str, Any]:
    """The identity policy of the principal that runs the flows: one statement per scope (per feature would
    not fit: a managed policy holds at most 6,144 characters, IAM user guide, "IAM and AWS STS quotas")."""
    wanted = set(features)
    grouped: dict[Scope, set[str]] = {}
    for permission in REGISTRY:
        if permission.feature in wanted:
            grouped.setdefault(permission.scope, set()).add(permission.action)
    statements = []
    for scope, actions in sorted(grouped.items()):
        resources, condition = resource_and_condition(scope, targets)
        statement: dict[str, Any] = {"Sid": _sid(scope), "Effect": "Allow", "Action": sorted(actions),
                                     "Resource": resources}
        if condition:
            statement["Condition"] = condition
        statements.append(statement)
    return {"Version": "2012-10-17", "Statement": statements}


def _merged(*documents: str) -> dict[str, Any]:
    statements = [s for document in documents for s in json.loads(document)["Statement"]]
    return {"Version": "2012-10-17", "Statement": statements}


def node_policy(targets: Targets) -> dict[str, Any]:
    """What the pods on EKS nodes call with the node role: read the weights, write the compile caches
    (``capserve.core.cluster.iam``, the same builders bring-up uses): the node role's inline policies, its only
    S3 access (docs/iam/README.md §4)."""
    return _merged(
        roles.weights_read_policy(targets.partition, targets.weights_bucket, targets.weights_prefix),
        roles.compile_cache_policy(targets.partition, targets.weights_bucket, targets.weights_prefix),
    )


def hyperpod_execution_policy(targets: Targets) -> dict[str, Any]:
    """The HyperPod execution role's inline policies, as bring-up puts them, in one document."""
    inline = roles.hyperpod_inline_policies(
        targets.partition, weights_bucket=targets.weights_bucket, weights_prefix=targets.weights_prefix,
        compile_cache=True,
    )
    return _merged(*inline.values())


def policy_files(targets: Targets | None = None) -> dict[str, str]:
    """File name → JSON text of every generated policy (what ``--write`` writes, and the test compares)."""
    targets = targets or Targets()
    documents = {
        "controller.json": controller_policy(targets),
        "node.json": node_policy(targets),
        "hyperpod-execution.json": hyperpod_execution_policy(targets),
    }
    return {name: json.dumps(document, indent=2, sort_keys=True) + "\n" for name, document in documents.items()}


# --- what preflight simulates ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Simulation:
    """One SimulatePrincipalPolicy request: these actions on these resources, with this request context."""

    actions: tuple[str, ...]
    resources: tuple[str, ...]
    context: tuple[tuple[str, str], ...] = ()


def simulations(features: Iterable[Feature], targets: Targets) -> list[Simulation]:
    """The requests that ask whether the caller may make every call of ``features``, on the campaign's own
    resources: real bucket and role ARNs, and the campaign tag in the context where a statement is tag-scoped
    (the simulation does not read resources' tags itself: IAM API reference, SimulatePrincipalPolicy)."""
    wanted = set(features)
    by_scope: dict[Scope, set[str]] = {}
    for permission in REGISTRY:
        if permission.feature in wanted:
            by_scope.setdefault(permission.scope, set()).add(permission.action)
    requests = []
    if by_scope.pop(Scope.SERVICE_LINKED_ROLES, None):  # one request per role: the context names its service
        calls = {p.call for p in REGISTRY if p.feature in wanted and p.call}
        linked = {d.service_linked_role for call in calls for d in DEPENDENT_ACTIONS.get(call, ())
                  if d.service_linked_role}
        requests += [Simulation(("iam:CreateServiceLinkedRole",), (r.arn(targets.partition, targets.account),),
                                (("iam:AWSServiceName", r.service),))
                     for r in SERVICE_LINKED_ROLES if r in linked]
    for scope, actions in sorted(by_scope.items()):
        resources, _ = resource_and_condition(scope, targets)
        context: tuple[tuple[str, str], ...] = ()
        if scope is Scope.TAGGED:
            context = ((f"aws:ResourceTag/{CAMPAIGN_TAG}", targets.campaign_id),)
        elif scope is Scope.TAGGING:
            context = ((f"aws:RequestTag/{CAMPAIGN_TAG}", targets.campaign_id),)
        elif scope is Scope.MANAGED_POLICIES:
            context = (("iam:PolicyARN", _managed_policy_arns(targets.partition)[0]),)
        if scope in (Scope.ROLES, Scope.MANAGED_POLICIES):
            resources = [targets.role_arn]
        requests.append(Simulation(tuple(sorted(actions)), tuple(resources), context))
    return requests


def campaign_targets(
    *, campaign_id: str, account_id: str, partition: str, weights_bucket: str, weights_prefix: str,
    records_bucket: str, lifecycle_bucket: str | None = None,
) -> Targets:
    """The concrete names of one campaign, for its simulation (and ``--spec`` rendering)."""
    names = ClusterNames(campaign_id=campaign_id)
    return Targets(
        partition=partition,
        weights_bucket=weights_bucket,
        weights_prefix=weights_prefix,
        records_bucket=records_bucket,
        role_prefix=f"{names.prefix}-",
        lifecycle_bucket=lifecycle_bucket or f"sagemaker-{campaign_id}-{account_id}",
        campaign_id=campaign_id,
        account=account_id,
        role_arn=f"arn:{partition}:iam::{account_id}:role/{names.cluster_role}",
    )


@dataclass(frozen=True)
class PermissionCheck:
    """What the simulation found: the principal asked about, the actions it may not call, or why it was not
    asked (``skipped``: a principal IAM cannot simulate, such as the root user)."""

    principal: str | None = None
    denied: tuple[str, ...] = ()
    skipped: str | None = None
    no_cluster_access: str | None = None  # the existing cluster (cluster.existing_cluster_name) it has no entry on


def principal_to_simulate(caller_arn: str) -> tuple[str, str] | None:
    """GetCallerIdentity's ARN → ("user", its ARN) or ("role", the role's name: the session ARN does not carry
    the role's path, so its ARN is asked of IAM), or None for what SimulatePrincipalPolicy cannot take
    (the root user, federated users)."""
    parts = caller_arn.split(":", 5)
    if len(parts) != 6:
        return None
    service, resource = parts[2], parts[5]
    if service == "iam" and resource.startswith("user/"):
        return "user", caller_arn
    if service == "sts" and resource.startswith("assumed-role/"):
        return "role", resource.split("/")[1]
    if service == "iam" and resource.startswith("role/"):
        return "role", resource.rsplit("/", 1)[-1]
    return None


POLICY_FILE = "docs/iam/controller.json"


def permission_problem(check: PermissionCheck) -> str | None:
    """One preflight problem naming every denied action, or None."""
    if not check.denied:
        return None
    return (
        f"AWS permissions: {check.principal} may not call {len(check.denied)} action(s) this campaign needs "
        f"(IAM policy simulation): {', '.join(check.denied)}. Attach the policy {POLICY_FILE} (its buckets "
        "filled in; docs/iam/README.md) to that principal, or grant these actions, and run again"
    )


def cluster_access_problem(check: PermissionCheck) -> str | None:
    """One preflight problem when the principal has no access entry on the spec's existing cluster: capserve never
    changes a cluster it does not own, so its runs (the scheduled drain and teardown included) could neither
    deploy there nor remove their workloads (EKS user guide, "Grant IAM users access to Kubernetes with EKS
    access entries": https://docs.aws.amazon.com/eks/latest/userguide/access-entries.html)."""
    if check.no_cluster_access is None:
        return None
    return (
        f"cluster.existing_cluster_name: {check.principal} has no EKS access entry on cluster "
        f"{check.no_cluster_access}, so the campaign's runs cannot use its Kubernetes API. Have the cluster's "
        "administrator create one for it with AmazonEKSClusterAdminPolicy (aws eks create-access-entry, "
        "aws eks associate-access-policy), or run as a principal that has one, and run again"
    )


def _main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m capserve.core.permissions", description=__doc__.split("\n")[0])
    parser.add_argument("--write", type=Path, metavar="DIR", help="write the generated policies into DIR")
    args = parser.parse_args(argv)
    files = policy_files()
    if args.write is None:
        print(files["controller.json"], end="")
        return 0
    args.write.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (args.write / name).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
