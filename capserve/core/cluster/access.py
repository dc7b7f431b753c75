"""Who may use the campaign's Kubernetes API besides the principal that created the cluster (pure).

Bring-up creates the cluster with ``authenticationMode: API_AND_CONFIG_MAP`` and
``bootstrapClusterCreatorAdminPermissions: true``: EKS gives the *creating* principal an access entry
with cluster-admin rights, and no one else (EKS API reference, ``CreateAccessConfigRequest``). The
scheduled drain/teardown runs and the reaper may run as another principal (a Prefect worker's role);
without an access entry its Kubernetes calls get 401 and the workloads cannot be removed. So every
ARN in ``cluster.admin_principals`` that is not the creator gets an access entry (type ``STANDARD``)
with ``AmazonEKSClusterAdminPolicy`` on the whole cluster (EKS user guide, "Grant IAM users access to
Kubernetes with EKS access entries", "Associate access policies with access entries").

The creator is found with STS GetCallerIdentity, whose answer for a role is the *session* ARN
(``arn:aws:sts::<acct>:assumed-role/<name>/<session>``, without the role's path); an access entry names
the IAM ARN (``arn:aws:iam::<acct>:role/<path/><name>``). They are compared by account, kind and name.
Entries live inside the cluster: deleting the cluster deletes them (docs/aws-network.md, "Access").
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from capserve.core.cluster.naming import ClusterNames, campaign_tags

# IAM users and roles (roles may have a path). Service-linked roles cannot have access entries (EKS user
# guide, "Create access entries"), so role/aws-service-role/ is refused by the spec.
# IAM names are ASCII letters, digits and _+=,.@- (IAM API reference, CreateRole "RoleName"): Python's \w would
# also take full-width and accented letters, which IAM refuses only once the access entry is made.
IAM_PRINCIPAL_ARN = r"^arn:aws(-cn|-us-gov|-iso|-iso-b)?:iam::\d{12}:(role|user)/([\w+=,.@-]+/)*[\w+=,.@-]{1,64}$"
_IAM = re.compile(IAM_PRINCIPAL_ARN, re.ASCII)
_STS_ROLE = re.compile(r"^arn:(aws[a-z-]*):sts::(\d{12}):assumed-role/([\w+=,.@-]+)/[^/]+$")
_STS_USER = re.compile(r"^arn:(aws[a-z-]*):sts::(\d{12}):user/([\w+=,.@-]+)$")  # moto's default identity
ADMIN_POLICY = "AmazonEKSClusterAdminPolicy"


@dataclass(frozen=True)
class Principal:
    """An IAM user or role reduced to what STS and IAM ARNs share."""

    account: str
    kind: str  # "role" or "user"
    name: str  # without the path


def principal_of(arn: str) -> Principal | None:
    """The principal an IAM ARN or an STS caller ARN stands for (None: neither, e.g. a federated user)."""
    iam = _IAM.match(arn)
    if iam:
        account, kind, rest = arn.split(":", 5)[4], iam.group(2), arn.split(":", 5)[5]
        return Principal(account=account, kind=kind, name=rest.rsplit("/", 1)[1])
    role = _STS_ROLE.match(arn)
    if role:
        return Principal(account=role.group(2), kind="role", name=role.group(3))
    user = _STS_USER.match(arn)
    if user:
        return Principal(account=user.group(2), kind="user", name=user.group(3))
    return None


def principals_to_grant(admins: Sequence[str], caller_arn: str) -> list[str]:
    """The admin principals that need an access entry: all but the cluster's creator (who has one)."""
    creator = principal_of(caller_arn)
    return [arn for arn in dict.fromkeys(admins) if principal_of(arn) != creator]


def admin_policy_arn(partition: str) -> str:
    return f"arn:{partition}:eks::aws:cluster-access-policy/{ADMIN_POLICY}"


def access_entry_request(names: ClusterNames, cluster_name: str, principal_arn: str) -> dict[str, Any]:
    return {
        "clusterName": cluster_name,
        "principalArn": principal_arn,
        "type": "STANDARD",
        "tags": campaign_tags(names.campaign_id, "access-entry", principal_arn.rsplit("/", 1)[1]),
    }


def admin_policy_request(cluster_name: str, principal_arn: str, partition: str) -> dict[str, Any]:
    return {
        "clusterName": cluster_name,
        "principalArn": principal_arn,
        "policyArn": admin_policy_arn(partition),
        "accessScope": {"type": "cluster"},
    }
