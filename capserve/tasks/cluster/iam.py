"""Converge the campaign's IAM roles: get each by name, create what is missing, attach missing policies."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import unquote

from botocore.exceptions import BotoCoreError, ClientError
from prefect.cache_policies import NO_CACHE
from pydantic import BaseModel, ConfigDict, Field

from capserve.core.cluster import iam as build
from capserve.core.cluster.naming import ClusterNames, partition_for
from capserve.core.errors import PermanentError
from capserve.core.tags import CAMPAIGN_TAG
from capserve.tasks import aws
from capserve.tasks.cluster.common import has_code
from capserve.tasks.resilience import aws_task


class RoleArns(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    by_component: dict[str, str] = Field(description="Role ARN per component ('eks-cluster-role', ...).")
    created: tuple[str, ...] = Field(default=(), description="'kind/name' of what this run created.")


@aws_task(name="converge-iam-roles", cache_policy=NO_CACHE)
def converge_roles(
    campaign_id: str,
    kind: str,
    region: str,
    *,
    compile_cache_bucket: str | None = None,
    compile_cache_prefix: str = "",
    weights_bucket: str | None = None,
    weights_prefix: str = "",
) -> RoleArns:
    """Every role of the campaign, with its managed policies; with ``weights_bucket``, the node role may read the
    weights under ``weights_prefix`` of it (and nothing else of S3); with ``compile_cache_bucket``, it may also
    upload compile caches under ``<compile_cache_prefix>/compile-cache/`` of that bucket.

    The HyperPod execution role also gets its inline policies (``build.hyperpod_inline_policies``): what
    HyperPod on EKS needs, reading the weights under ``weights_prefix`` of ``weights_bucket``, and (with
    ``compile_cache_bucket``) writing the compile caches."""
    names = ClusterNames(campaign_id=campaign_id)
    iam = aws.client("iam", region)
    partition = partition_for(region)
    arns: dict[str, str] = {}
    created: list[str] = []
    for role in build.roles_for(kind, names):
        try:
            try:
                found = iam.get_role(RoleName=role.name)["Role"]
                tags = {t["Key"]: t["Value"] for t in found.get("Tags", [])}
                if tags.get(CAMPAIGN_TAG) != campaign_id:
                    raise PermanentError(
                        f"IAM role {role.name} exists but is not tagged {CAMPAIGN_TAG}={campaign_id}: it is not ours. "
                        "Rename the campaign or delete that role"
                    )
            except ClientError as exc:
                if not has_code(exc, "NoSuchEntity"):
                    raise
                found = iam.create_role(**build.create_role_request(role, campaign_id))["Role"]
                created.append(f"iam-role/{role.name}")
            attached = {p["PolicyArn"] for p in iam.list_attached_role_policies(RoleName=role.name)["AttachedPolicies"]}
            for policy_arn in role.policy_arns(partition):
                if policy_arn not in attached:
                    iam.attach_role_policy(RoleName=role.name, PolicyArn=policy_arn)
            if role.component == "eks-node-role" and weights_bucket:
                document = build.weights_read_policy(partition, weights_bucket, weights_prefix)
                _converge_inline_policy(iam, role.name, build.WEIGHTS_READ_POLICY, document)
            if role.component == "eks-node-role" and compile_cache_bucket:
                document = build.compile_cache_policy(partition, compile_cache_bucket, compile_cache_prefix)
                _converge_inline_policy(iam, role.name, build.COMPILE_CACHE_POLICY, document)
            if role.component == "hyperpod-execution-role":
                inline = build.hyperpod_inline_policies(
                    partition,
                    weights_bucket=weights_bucket,
                    weights_prefix=weights_prefix,
                    compile_cache=bool(compile_cache_bucket),
                )
                for policy_name, document in inline.items():
                    _converge_inline_policy(iam, role.name, policy_name, document)
        except (ClientError, BotoCoreError) as exc:
            raise aws.convert(exc, f"IAM role {role.name}") from exc
        arns[role.component] = str(found["Arn"])
    return RoleArns(by_component=arns, created=tuple(created))


def _converge_inline_policy(iam: Any, role_name: str, policy_name: str, document: str) -> None:
    """Put the inline policy only when it is missing or differs (IAM returns the document URL-encoded)."""
    try:
        current = iam.get_role_policy(RoleName=role_name, PolicyName=policy_name)["PolicyDocument"]
    except ClientError as exc:
        if not has_code(exc, "NoSuchEntity"):
            raise
        current = None
    if isinstance(current, str):
        current = json.loads(unquote(current))
    if current != json.loads(document):
        iam.put_role_policy(RoleName=role_name, PolicyName=policy_name, PolicyDocument=document)
