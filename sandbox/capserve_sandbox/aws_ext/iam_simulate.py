"""IAM SimulatePrincipalPolicy for the sandbox's moto (5.2.5 has none), evaluated by ``kube.iam_eval``.

Rules, from the IAM API reference (SimulatePrincipalPolicy,
https://docs.aws.amazon.com/IAM/latest/APIReference/API_SimulatePrincipalPolicy.html) and the IAM user
guide ("Policy evaluation logic"):

- ``PolicySourceArn`` names a user, group or role; one that does not exist answers ``NoSuchEntity``, an
  ARN of anything else ``InvalidInput``;
- the simulation uses every identity-based policy of that entity: a user's inline and attached policies
  and those of its groups; a role's or a group's own;
- each action of ``ActionNames`` is evaluated against each ARN of ``ResourceArns`` (``*`` when none is
  given), with the request context ``ContextEntries`` gives; resources' own tags and policies are not read;
- ``EvalDecision`` is ``allowed``, ``explicitDeny`` (a Deny statement matched: it wins) or ``implicitDeny``.

Permission boundaries, SCPs and ``PolicyInputList`` are not modelled.
"""

from __future__ import annotations

import re
from typing import Any

from moto.core.responses import ActionResult
from moto.iam.exceptions import InvalidInput, NoSuchEntity
from moto.iam.responses import IamResponse

from capserve_sandbox.kube import iam_eval

_PRINCIPAL = re.compile(r"^arn:aws[a-z-]*:iam::(?P<account>\d{12}):(?P<kind>user|role|group)/(?:.*/)?(?P<name>[^/]+)$")


def _default_document(policy: Any) -> dict[str, Any]:
    version = next(v for v in policy.versions if v.version_id == policy.default_version_id)
    return iam_eval.document(version.document)


def _entity_documents(entity: Any) -> list[dict[str, Any]]:
    inline = [iam_eval.document(text) for text in entity.policies.values()]
    return inline + [_default_document(p) for p in entity.managed_policies.values()]


def principal_documents(backend: Any, arn: str) -> list[dict[str, Any]]:
    """Every identity-based policy of the user, group or role ``arn`` (``NoSuchEntity`` when it does not exist)."""
    found = _PRINCIPAL.match(arn)
    if found is None:
        raise InvalidInput(f"Invalid ARN: {arn} is not the ARN of an IAM user, group or role.")
    kind, name = found["kind"], found["name"]
    try:
        if kind == "role":
            return _entity_documents(backend.get_role(name))
        if kind == "group":
            return _entity_documents(backend.get_group(name))
        user = backend.get_user(name)
    except Exception as exc:  # moto's own NoSuchEntity, or its generic not-found for groups
        raise NoSuchEntity(f"The {kind} with name {name} cannot be found.") from exc
    documents = _entity_documents(user)
    for group in backend.get_groups_for_user(user.name):
        documents += _entity_documents(group)
    return documents


def simulate_principal_policy(self: IamResponse) -> ActionResult:
    source = self._get_param("PolicySourceArn")
    actions = self._get_param("ActionNames") or []
    if not actions:
        raise InvalidInput("ActionNames must contain at least one action.")
    resources = self._get_param("ResourceArns") or ["*"]
    context = {
        entry["ContextKeyName"]: str((entry.get("ContextKeyValues") or [""])[0])
        for entry in self._get_param("ContextEntries") or []
    }
    documents = principal_documents(self.backend, source)
    account = _PRINCIPAL.match(source)["account"]  # type: ignore[index]  # matched in principal_documents
    context = {"aws:PrincipalAccount": account, "aws:ResourceAccount": account, **context}
    results = [
        {
            "EvalActionName": action,
            "EvalResourceName": resource,
            "EvalDecision": iam_eval.decision(documents, action, resource, context),
            "MatchedStatements": [],
            "MissingContextValues": [],
        }
        for action in actions
        for resource in resources
    ]
    return ActionResult({"EvaluationResults": results, "IsTruncated": False})


def install() -> None:
    """Add the operation to moto's IAM response class (moto looks methods up by name on every request)."""
    IamResponse.simulate_principal_policy = simulate_principal_policy  # type: ignore[attr-defined]
