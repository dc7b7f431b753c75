"""EKS access entries for the sandbox's moto (5.2.5 has none): create, describe, associate, list, with
EKS's own refusals.

Rules, from the EKS user guide ("Grant IAM users access to Kubernetes with EKS access entries", "Create
access entries", "Associate access policies with access entries") and the EKS API reference
(``CreateAccessEntry``, ``AssociateAccessPolicy``, ``CreateAccessConfigRequest``):

- the cluster's ``accessConfig.authenticationMode`` must be ``API`` or ``API_AND_CONFIG_MAP``
  (``InvalidRequestException``); through the API it defaults to ``CONFIG_MAP``;
- with ``bootstrapClusterCreatorAdminPermissions`` (default true) the creating principal gets an access
  entry with ``AmazonEKSClusterAdminPolicy`` at creation, so creating another for it is refused;
- "An IAM principal can't be included in more than one access entry" (``ResourceInUseException``);
- the principal is an IAM role (a path is allowed) or user; never a service-linked role
  (``role/aws-service-role/``) (``InvalidParameterException``);
- associating needs an existing entry (``ResourceNotFoundException``), an EKS access policy ARN
  (``arn:aws:eks::aws:cluster-access-policy/...``) and a scope of ``cluster``, or ``namespace`` with
  namespaces (``InvalidParameterException``); associating the same policy again replaces its scope;
- entries live on the cluster: deleting the cluster deletes them (they are kept on moto's cluster
  object here, so they go with it, and with ``/moto-api/reset``);
- the API server authenticates an EKS token's principal by its access entries: without one (and no
  ``aws-auth`` mapping, which capserve never writes) every request is refused with 401 ``Unauthorized``
  (EKS user guide, "Grant IAM users access to Kubernetes with EKS access entries"; "Troubleshoot IAM",
  "Unauthorized or access denied (kubectl)"). The sandbox's one fake API server stands for every cluster,
  and the token's cluster name is in a signed header it does not see: a principal is let in when it has an
  entry on any API-mode cluster (or when no cluster is in API mode).

Routes are added to moto's EKS URL map and the operations to its response class (moto finds the
operation from botocore's model by method and URI); installed before the moto server starts.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import unquote

from moto.core.responses import ActionResult
from moto.eks import urls as eks_urls
from moto.eks.exceptions import (
    InvalidParameterException,
    InvalidRequestException,
    ResourceInUseException,
    ResourceNotFoundException,
)
from moto.eks.responses import EKSResponse
from moto.sts.models import sts_backends

from capserve.core.cluster.access import IAM_PRINCIPAL_ARN, principal_of
from capserve_sandbox.clock import CLOCK
from capserve_sandbox.kube import auth as kube_auth

# The principal's ARN is one percent-encoded path segment, which the server decodes ("/" included)
# before routing: one route takes every path below access-entries/ (the operation itself is picked
# from botocore's model by method and URI, not by these routes).
_PATHS = {
    "{0}/clusters/(?P<name>[^/]+)/access-entries$": eks_urls.response.dispatch,
    "{0}/clusters/(?P<name>[^/]+)/access-entries/(?P<principalArn>.+)$": eks_urls.response.dispatch,
}
_POLICY = re.compile(r"^arn:aws[a-z-]*:eks::aws:cluster-access-policy/[A-Za-z]+$")
_API_MODES = ("API", "API_AND_CONFIG_MAP")
_INSTALLED = False


def _error(kind: type[Any], message: str, cluster: str | None = None) -> Exception:
    error: Exception = kind(clusterName=cluster, nodegroupName=None, fargateProfileName=None, addonName=None,
                            message=message)
    return error


def _cluster(response: Any, name: str) -> Any:
    cluster = response.eks_backend.clusters.get(name)
    if cluster is None:
        raise _error(ResourceNotFoundException, f"No cluster found for name: {name}.", name)
    access = getattr(cluster, "_capserve_access", None)
    if access is None:  # a cluster made before this extension: as the API default
        access = cluster._capserve_access = {"mode": "CONFIG_MAP", "entries": {}}
    if access["mode"] not in _API_MODES:
        raise _error(
            InvalidRequestException,
            f"The cluster's authentication mode must be set to one of [API, API_AND_CONFIG_MAP] to perform this "
            f"operation (it is {access['mode']})",
            name,
        )
    return cluster


def _entry(cluster: Any, principal: str) -> dict[str, Any]:
    entry: dict[str, Any] | None = cluster._capserve_access["entries"].get(principal)
    if entry is None:
        raise _error(
            ResourceNotFoundException, f"The specified access entry resource is not found: {principal}", cluster.name
        )
    return entry


def _new_entry(cluster: Any, principal: str, kind: str, tags: dict[str, str]) -> dict[str, Any]:
    now = CLOCK.now()
    arn = cluster.arn.replace(":cluster/", ":access-entry/", 1) + "/" + principal.rsplit("/", 1)[1]
    return {
        "clusterName": cluster.name,
        "principalArn": principal,
        "kubernetesGroups": [],
        "accessEntryArn": arn,
        "createdAt": now,
        "modifiedAt": now,
        "tags": dict(tags),
        "type": kind,
        "_policies": {},
    }


def _view(entry: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in entry.items() if not k.startswith("_")}


def create_access_entry(self: Any) -> Any:
    cluster = _cluster(self, self._get_param("name"))
    principal = str(self._get_param("principalArn") or "")
    if ":role/aws-service-role/" in principal:
        raise _error(InvalidParameterException, "Access entries cannot be created for service-linked roles",
                     cluster.name)
    if not re.match(IAM_PRINCIPAL_ARN, principal):
        raise _error(InvalidParameterException, f"The principalArn {principal} is not a valid IAM principal ARN",
                     cluster.name)
    entries = cluster._capserve_access["entries"]
    if principal in entries:
        raise _error(ResourceInUseException, f"The specified access entry resource is already in use on this "
                     f"cluster: {principal}", cluster.name)
    entry = _new_entry(cluster, principal, self._get_param("type") or "STANDARD", self._get_param("tags") or {})
    entries[principal] = entry
    return ActionResult({"accessEntry": _view(entry)})


def describe_access_entry(self: Any) -> Any:
    cluster = _cluster(self, self._get_param("name"))
    return ActionResult({"accessEntry": _view(_entry(cluster, unquote(self._get_param("principalArn"))))})


def list_access_entries(self: Any) -> Any:
    cluster = _cluster(self, self._get_param("name"))
    return ActionResult({"accessEntries": sorted(cluster._capserve_access["entries"])})


def associate_access_policy(self: Any) -> Any:
    cluster = _cluster(self, self._get_param("name"))
    principal = unquote(self._get_param("principalArn"))
    entry = _entry(cluster, principal)
    policy = str(self._get_param("policyArn") or "")
    scope = self._get_param("accessScope") or {}
    if not _POLICY.match(policy):
        raise _error(InvalidParameterException, f"{policy} is not an EKS access policy ARN", cluster.name)
    if scope.get("type") not in ("cluster", "namespace") or (
        scope.get("type") == "namespace" and not scope.get("namespaces")
    ):
        raise _error(InvalidParameterException, "accessScope must be type cluster, or namespace with namespaces",
                     cluster.name)
    now = CLOCK.now()
    previous = entry["_policies"].get(policy)
    associated = {
        "policyArn": policy,
        "accessScope": {"type": scope["type"], "namespaces": list(scope.get("namespaces") or [])},
        "associatedAt": previous["associatedAt"] if previous else now,
        "modifiedAt": now,
    }
    entry["_policies"][policy] = associated
    return ActionResult({"clusterName": cluster.name, "principalArn": principal, "associatedAccessPolicy": associated})


def list_associated_access_policies(self: Any) -> Any:
    cluster = _cluster(self, self._get_param("name"))
    principal = unquote(self._get_param("principalArn"))
    policies = list(_entry(cluster, principal)["_policies"].values())
    return ActionResult({"clusterName": cluster.name, "principalArn": principal, "associatedAccessPolicies": policies})


def _creator_arn(self: Any) -> str | None:
    """The IAM ARN of the principal making this request (STS answers with a session ARN for roles)."""
    backend = sts_backends[self.current_account]["global"]
    _, arn, account = backend.get_caller_identity(self.get_access_key(), self.region)
    return _iam_arn(arn)


_MOTO_CREATE_CLUSTER = EKSResponse.create_cluster


def create_cluster(self: Any) -> Any:
    """moto's CreateCluster, then the cluster's access config (moto ignores it) and the creator's entry."""
    result = _MOTO_CREATE_CLUSTER(self)
    config = self._get_param("accessConfig") or {}
    cluster = self.eks_backend.clusters[self._get_param("name")]
    mode = config.get("authenticationMode") or "CONFIG_MAP"
    cluster._capserve_access = {"mode": mode, "entries": {}}
    creator = _creator_arn(self)
    if mode in _API_MODES and config.get("bootstrapClusterCreatorAdminPermissions", True) and creator:
        entry = _new_entry(cluster, creator, "STANDARD", {})
        policy = f"arn:{creator.split(':', 2)[1]}:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"
        now = CLOCK.now()
        entry["_policies"][policy] = {"policyArn": policy, "accessScope": {"type": "cluster", "namespaces": []},
                                      "associatedAt": now, "modifiedAt": now}
        cluster._capserve_access["entries"][creator] = entry
    return result


def entries(cluster: Any) -> dict[str, dict[str, Any]]:
    """The access entries of a moto cluster object, with their policies (for tests)."""
    return {p: {**_view(e), "policies": sorted(e["_policies"])}
            for p, e in (getattr(cluster, "_capserve_access", None) or {"entries": {}})["entries"].items()}


def _iam_arn(arn: str) -> str | None:
    """A caller's STS ARN as the IAM ARN an access entry names (by account, kind and name)."""
    who = principal_of(arn)
    if who is None:
        return None
    return f"arn:{arn.split(':', 2)[1]}:iam::{who.account}:{who.kind}/{who.name}"


def access_problem(token: str) -> str | None:
    """Why the EKS token's principal may not use the cluster: it has no access entry (None: it has one)."""
    from moto.core.models import DEFAULT_ACCOUNT_ID
    from moto.eks.models import eks_backends

    query = kube_auth.eks_token_query(token)
    key_id, _, rest = query.get("X-Amz-Credential", "").partition("/")
    region = rest.split("/")[1] if rest.count("/") >= 1 else "us-east-1"
    _, caller, _ = sts_backends[DEFAULT_ACCOUNT_ID]["global"].get_caller_identity(key_id, region)
    principal = _iam_arn(caller)
    api_modes: list[dict[str, Any]] = [
        access for account in eks_backends.values() for backend in account.values()
        for cluster in backend.clusters.values()
        if (access := getattr(cluster, "_capserve_access", None) or {}).get("mode") in _API_MODES
    ]
    if not api_modes or any(principal in access["entries"] for access in api_modes):
        return None
    return f"Unauthorized: {caller} has no access entry on the cluster"


def install() -> None:
    """Add the routes and operations (once per process; before the moto server builds its URL map)."""
    global _INSTALLED
    if _INSTALLED:
        return
    kube_auth.EKS_ACCESS_CHECKS.append(access_problem)
    eks_urls.url_paths.update(_PATHS)
    for operation in (create_access_entry, describe_access_entry, list_access_entries, associate_access_policy,
                      list_associated_access_policies, create_cluster):
        setattr(EKSResponse, operation.__name__, operation)
    _INSTALLED = True
