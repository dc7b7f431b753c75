"""Whether an IAM role's identity-based policies allow one request: simply, but by IAM's own rules.

What the sandbox's ``aws`` shim asks before an S3 call made by a pod on a node with an instance role
(HyperPod nodes act as their instance group's ExecutionRole). After the IAM user guide, "Policy
evaluation logic" and "IAM JSON policy elements":
- a request is allowed only when some Allow statement matches it and no Deny statement does
  (an explicit Deny wins; otherwise the implicit deny);
- a statement matches when one of its ``Action`` patterns matches the action (case-insensitive) and
  one of its ``Resource`` patterns matches the resource ARN (case-sensitive); ``*`` matches any run of
  characters, ``/`` included, and ``?`` any one character;
- ``Condition``: the ``StringEquals``/``StringLike``, ``ArnEquals``/``ArnLike`` and ``Null`` operators
  are evaluated against the request context (``aws:ResourceAccount`` and ``aws:PrincipalAccount``, and
  whatever keys the caller gives, as SimulatePrincipalPolicy's ``ContextEntries`` do;
  ``${aws:PrincipalAccount}`` substituted). A key absent from the context matches no String/Arn test
  ("Condition element": the values do not match) and is null for ``Null``. Any other operator makes the
  statement not match, which can only deny more than AWS, never allow more. So do
  ``NotAction``/``NotResource`` Allow statements (and such Deny statements are not applied).
Permission boundaries, SCPs, session policies and bucket policies are not modelled: the sandbox's
buckets have none.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from functools import cache
from typing import Any
from urllib.parse import unquote

_STRING_OPERATORS = {"StringEquals": False, "StringLike": True, "ArnEquals": False, "ArnLike": True}


@cache
def _pattern(text: str, ignore_case: bool) -> re.Pattern[str]:
    body = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in text)
    return re.compile(f"^{body}$", re.IGNORECASE if ignore_case else 0)


def _listed(value: Any) -> list[str]:
    if value is None:
        return []
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


def _condition_holds(condition: Mapping[str, Any], context: Mapping[str, str]) -> bool:
    """Every operator and key must hold (IAM ANDs them); a key's values are ORed. ``context`` keys are lower case."""
    for operator, tests in condition.items():
        if operator not in (*_STRING_OPERATORS, "Null") or not isinstance(tests, Mapping):
            return False
        for key, wanted in tests.items():
            actual = context.get(key.lower())
            values = [v.replace("${aws:PrincipalAccount}", context.get("aws:principalaccount", ""))
                      for v in _listed(wanted)]
            if operator == "Null":
                if (actual is None) != (values == ["true"]):
                    return False
                continue
            if actual is None:
                return False
            like = _STRING_OPERATORS[operator]
            if not any(_pattern(v, False).match(actual) if like else actual == v for v in values):
                return False
    return True


def _matches(statement: Mapping[str, Any], action: str, resource: str, context: Mapping[str, str]) -> bool:
    if "NotAction" in statement or "NotResource" in statement:
        return False
    if not any(_pattern(a, True).match(action) for a in _listed(statement.get("Action"))):
        return False
    if not any(_pattern(r, False).match(resource) for r in _listed(statement.get("Resource"))):
        return False
    condition = statement.get("Condition")
    return condition is None or (isinstance(condition, Mapping) and _condition_holds(condition, context))


def document(raw: Any) -> dict[str, Any]:
    """A policy document as IAM returns it: a dict, or (URL-encoded) JSON text."""
    if isinstance(raw, str):
        parsed: dict[str, Any] = json.loads(unquote(raw))
        return parsed
    return dict(raw)


def decision(
    documents: Iterable[Mapping[str, Any]], action: str, resource: str, context: Mapping[str, str]
) -> str:
    """IAM's answer for one request: "explicitDeny" (a Deny matches), "allowed" (an Allow matches and no Deny),
    else "implicitDeny" (the names SimulatePrincipalPolicy's ``EvalDecision`` uses)."""
    lowered = {k.lower(): v for k, v in context.items()}
    allow = False
    for doc in documents:
        statements = doc.get("Statement") or []
        for statement in statements if isinstance(statements, list) else [statements]:
            if not _matches(statement, action, resource, lowered):
                continue
            if statement.get("Effect") == "Deny":
                return "explicitDeny"
            allow = allow or statement.get("Effect") == "Allow"
    return "allowed" if allow else "implicitDeny"


def allowed(documents: Iterable[Mapping[str, Any]], action: str, resource: str, *, account: str) -> bool:
    """Whether ``documents`` (the role's policies) allow ``action`` on ``resource``, in a one-account world."""
    context = {"aws:principalaccount": account, "aws:resourceaccount": account}
    return decision(documents, action, resource, context) == "allowed"


def role_documents(iam: Any, role_name: str) -> list[dict[str, Any]]:
    """Every identity-based policy of the role: attached managed policies (default version) and inline ones."""
    docs = []
    for page in iam.get_paginator("list_attached_role_policies").paginate(RoleName=role_name):
        for attached in page.get("AttachedPolicies", []):
            arn = attached["PolicyArn"]
            version = iam.get_policy(PolicyArn=arn)["Policy"]["DefaultVersionId"]
            docs.append(document(iam.get_policy_version(PolicyArn=arn, VersionId=version)["PolicyVersion"]["Document"]))
    for page in iam.get_paginator("list_role_policies").paginate(RoleName=role_name):
        for name in page.get("PolicyNames", []):
            docs.append(document(iam.get_role_policy(RoleName=role_name, PolicyName=name)["PolicyDocument"]))
    return docs
