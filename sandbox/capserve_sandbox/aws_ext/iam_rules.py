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
"""

from __future__ import annotations

from typing import Any

from botocore.awsrequest import AWSRequest
from moto import settings as moto_settings
from moto.core.authorization import ActionAuthenticatorMixin
from moto.iam.access_control import IAMRequestBase
from moto.iam.exceptions import NotFoundException
from moto.iam.responses import IamResponse
from moto.s3.responses import S3Response
from moto.utilities.utils import get_partition

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


def install() -> None:
    S3Response._authenticate_and_authorize_s3_action = _authorize_s3  # type: ignore[method-assign]
    IAMRequestBase._create_aws_request = _aws_request  # type: ignore[method-assign]
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
