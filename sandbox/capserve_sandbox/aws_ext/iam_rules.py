"""Where moto 5.2.5's IAM enforcement authorizes a request differently from AWS, AWS's rule (only matters
under ``capserve_sandbox.aws.iam_enforced``; without it moto authorizes nothing); and the credentials of an
instance's role, which the sandbox kubelet gives a node's pods under enforcement (``instance_credentials``).

- ``HeadBucket`` is authorized as ``s3:ListBucket`` on the bucket (S3 API reference, HeadBucket:
  https://docs.aws.amazon.com/AmazonS3/latest/API/API_HeadBucket.html); moto asks for ``s3:HeadBucket``, an
  action IAM does not have, so no policy could allow it.
- An IAM request naming a role is authorized on that role's ARN whether or not the role exists yet:
  ``CreateRole`` on the role it makes, ``GetRole`` of a missing role answers ``NoSuchEntity`` to a caller
  allowed on that name (Service Authorization Reference, IAM:
  https://docs.aws.amazon.com/service-authorization/latest/reference/list_awsidentityandaccessmanagementiam.html,
  resource type ``role``: ``arn:${Partition}:iam::${Account}:role/${RoleNameWithPath}``). moto authorizes a
  missing role's request on ``*``, which a statement scoped to the campaign's roles does not match.
- A request's SigV4 signature covers the hash of its body as sent, the empty string's for a GET without one
  (IAM user guide, "Create a signed AWS API request":
  https://docs.aws.amazon.com/IAM/latest/UserGuide/create-signed-request.html). moto re-signs an empty body as
  its parsed parameters, so every REST GET/DELETE (EKS DescribeCluster, ListClusters) failed with
  ``SignatureDoesNotMatch``.
- A call is authorized on more than its own action: AWS also checks the caller for the call's dependent
  actions (``capserve.core.permissions.DEPENDENT_ACTIONS``, each with its source: ``iam:PassRole`` on the role
  passed; ``ec2:RunInstances`` and ``ec2:CreateTags`` for an EKS node group with a launch template, on the
  launch's instances, volumes, template and subnet; ``iam:CreateServiceLinkedRole`` for a service-linked role
  the account does not have yet, which AWS then makes). moto checks only the request's own action. They are
  evaluated with ``kube.iam_eval`` (its conditions included) against the caller's identity policies.
"""

from __future__ import annotations

import json
from typing import Any

from botocore.awsrequest import AWSRequest
from moto import settings as moto_settings
from moto.core.authorization import ActionAuthenticatorMixin
from moto.iam.access_control import IAMRequestBase
from moto.iam.exceptions import NotFoundException
from moto.iam.responses import IamResponse
from moto.s3.responses import S3Response
from moto.utilities.utils import get_partition

from capserve.core.permissions import Dependent, applies, dependents_of, passed_roles
from capserve_sandbox.aws_ext.iam_simulate import principal_documents
from capserve_sandbox.kube import iam_eval

_original_s3_authorize = S3Response._authenticate_and_authorize_s3_action


def _authorize_s3(self: Any, bucket_name: str | None = None, key_name: str | None = None) -> None:
    if self.data.get("Action") != "HeadBucket":
        _original_s3_authorize(self, bucket_name=bucket_name, key_name=key_name)
        return
    self.data["Action"] = "ListBucket"
    try:
        _original_s3_authorize(self, bucket_name=bucket_name, key_name=key_name)
    finally:
        self.data["Action"] = "HeadBucket"


_original_aws_request = IAMRequestBase._create_aws_request


def _aws_request(self: Any) -> AWSRequest:
    request = _original_aws_request(self)
    if not self._body and self._method in ("GET", "HEAD", "DELETE"):
        request.data = b""  # signed as sent: nothing
    return request


def _role_resource(self: Any) -> str:
    name = (self.data.get("RoleName") or [None])[0]
    if not name:
        return "*"
    try:
        return str(self.backend.get_role(name).arn)
    except NotFoundException:  # the ARN the role would have (its path: CreateRole's)
        path = (self.data.get("Path") or ["/"])[0]
        return f"arn:{get_partition(self.region)}:iam::{self.current_account}:role{path}{name}"


_original_check = IAMRequestBase.check_action_permitted


def _parameters(request: Any) -> dict[str, Any]:
    """The request's parameters as the API names them: a JSON body (EKS, SageMaker), else the query's."""
    body = request._body.decode() if isinstance(request._body, bytes) else request._body
    try:
        parsed = json.loads(body) if body else None
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        return parsed
    return {k: v[0] if isinstance(v, list) and len(v) == 1 else v for k, v in (request._data or {}).items()}


def _caller_documents(request: Any) -> list[dict[str, Any]]:
    key = request._access_key
    if getattr(key, "_owner_role_name", None):
        arn = request.backend.get_role(key._owner_role_name).arn
    else:
        arn = request.backend.get_user(key._owner_user_name).arn
    return principal_documents(request.backend, arn)


def _launch_tags(region: str, account: str, template: dict[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """The launch template's own tags, and the tags its data puts on the instances it launches."""
    from moto.ec2.models import ec2_backends

    backend = ec2_backends[account][region]
    found = (backend.get_launch_template(template["id"]) if template.get("id")
             else backend.get_launch_template_by_name(template["name"]))
    data = found.get_version(template.get("version") or "$Default").data
    instance = {t["Key"]: t["Value"] for spec in data.get("TagSpecifications") or []
                if spec.get("ResourceType") == "instance" for t in spec.get("Tags") or []}
    return {t["key"]: t["value"] for t in found.get_tags()}, instance


def _authorizations(
    request: Any, dependent: Dependent, params: dict[str, Any]
) -> list[tuple[str, dict[str, str]]]:
    """Each resource (with its request context) AWS authorizes ``dependent`` on, for this request."""
    partition, account, region = get_partition(request._region), request.account_id, request._region
    if dependent.roles:
        return [(arn, {}) for arn in passed_roles(dependent, params)]
    if dependent.service_linked_role:
        role = dependent.service_linked_role
        try:
            request.backend.get_role(role.name)
            return []  # the account has it: nothing is made, nothing asked
        except NotFoundException:
            return [(role.arn(partition, account), {"iam:AWSServiceName": role.service})]
    template_tags, instance_tags = _launch_tags(region, account, params["launchTemplate"])
    ec2 = f"arn:{partition}:ec2:{region}:{account}"
    made = {f"aws:RequestTag/{k}": v for k, v in instance_tags.items()}
    used: list[tuple[str, dict[str, str]]] = [(f"{ec2}:subnet/{s}", {}) for s in params.get("subnets") or []]
    template = (f"{ec2}:launch-template/{params['launchTemplate'].get('id', '')}",
                {f"aws:ResourceTag/{k}": v for k, v in template_tags.items()})
    if dependent.action == "ec2:CreateTags":
        return [(f"{ec2}:instance/*", made)]
    return [(f"{ec2}:instance/*", made), (f"{ec2}:volume/*", made), template, *used]


def _made_service_linked_roles(request: Any, dependents: tuple[Dependent, ...]) -> None:
    """As AWS does once the call is authorized: the service-linked roles the account lacked now exist."""
    for role in (d.service_linked_role for d in dependents if d.service_linked_role):
        try:
            request.backend.get_role(role.name)
        except NotFoundException:
            trust = {"Version": "2012-10-17", "Statement": [
                {"Effect": "Allow", "Principal": {"Service": [role.service]}, "Action": ["sts:AssumeRole"]}]}
            request.backend.create_role(role.name, json.dumps(trust), f"/aws-service-role/{role.service}/",
                                        permissions_boundary=None, description="", tags=[],
                                        max_session_duration="3600", linked_service=role.service)


def _check_with_dependents(self: Any, resource: str) -> None:
    _original_check(self, resource)
    dependents = dependents_of(self._action)
    if not dependents:
        return
    params = _parameters(self)
    wanted = [d for d in dependents if applies(d, params)]
    documents = _caller_documents(self)
    account = {"aws:PrincipalAccount": self.account_id, "aws:ResourceAccount": self.account_id}
    for dependent in wanted:
        for arn, context in _authorizations(self, dependent, params):
            if iam_eval.decision(documents, dependent.action, arn, {**account, **context}) != "allowed":
                self._action = dependent.action  # moto's AccessDenied names the action refused
                self._raise_access_denied()
    _made_service_linked_roles(self, tuple(wanted))


def install() -> None:
    S3Response._authenticate_and_authorize_s3_action = _authorize_s3  # type: ignore[method-assign]
    IAMRequestBase._create_aws_request = _aws_request  # type: ignore[method-assign]
    IAMRequestBase.check_action_permitted = _check_with_dependents  # type: ignore[method-assign]
    IamResponse._determine_resource = _role_resource  # type: ignore[method-assign]


# The roles whose credentials instances handed out (tests: whose credentials the pods' S3 calls were made with).
ISSUED: list[str] = []


def iam_enforcing() -> bool:
    """Whether moto authorizes requests now (``capserve_sandbox.aws.iam_enforced``)."""
    return ActionAuthenticatorMixin.request_count >= moto_settings.INITIAL_NO_AUTH_ACTION_COUNT


def instance_credentials(role_arn: str, region: str) -> dict[str, str] | None:
    """Temporary credentials of ``role_arn``, as an instance's metadata service hands its role's to the pods'
    SDK (EC2 user guide, "IAM roles for Amazon EC2": https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/iam-roles-for-amazon-ec2.html),
    so moto authorizes their calls against that role's policies. None when moto does not enforce IAM: nothing
    would check them, and the sandbox's own keys serve (the aws shim then checks the role's policies itself).
    Issued by moto's STS in-process, as EC2 does: no caller needs ``sts:AssumeRole``."""
    if not iam_enforcing():
        return None
    ISSUED.append(role_arn)
    from moto.sts.models import sts_backends

    _, partition, _, _, account, _ = role_arn.split(":", 5)
    session = sts_backends[account][partition].assume_role(
        region_name=region, role_session_name="sandbox-instance", role_arn=role_arn, policy="", duration=3600,
        external_id="",
    )
    return {"AWS_ACCESS_KEY_ID": session.access_key_id, "AWS_SECRET_ACCESS_KEY": session.secret_access_key,
            "AWS_SESSION_TOKEN": session.session_token}
