"""Would the scheduler put this pod on that node? The label and taint rules, as pure functions.

Only the rules that decide *where* a pod may go, as the Kubernetes scheduler applies them
(Kubernetes docs, "Assigning Pods to Nodes" and "Taints and Tolerations"):

- every ``nodeSelector`` entry must equal a node label;
- every term of ``requiredDuringSchedulingIgnoredDuringExecution`` is OR-ed, the expressions inside
  a term are AND-ed (operators In, NotIn, Exists, DoesNotExist, Gt, Lt);
- every ``NoSchedule`` / ``NoExecute`` taint of the node must be tolerated (``PreferNoSchedule``
  only discourages). A toleration matches a taint when the keys are equal (or the toleration has no
  key and operator Exists), the operator is Exists or the values are equal, and the toleration's
  effect is empty or equal.

Resources are not checked here (the sandbox's scheduler does that); this module exists so the
renderers' placement can be tested against the node pools bring-up actually creates, and so a
mismatch is caught before a pod sits Pending on a paid cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})

# EKS spells taint effects NO_SCHEDULE; Kubernetes NoSchedule (EKS API reference, Taint).
EKS_EFFECTS = {"NO_SCHEDULE": "NoSchedule", "NO_EXECUTE": "NoExecute", "PREFER_NO_SCHEDULE": "PreferNoSchedule"}


def kubernetes_taints(eks_taints: Iterable[Mapping[str, str]]) -> list[dict[str, str]]:
    """Taints as an EKS node group request spells them, the way they appear on the Node object."""
    return [
        {"key": t["key"], "value": t.get("value", ""), "effect": EKS_EFFECTS.get(t["effect"], t["effect"])}
        for t in eks_taints
    ]


def tolerates(tolerations: Sequence[Mapping[str, Any]], taint: Mapping[str, str]) -> bool:
    for toleration in tolerations:
        key = toleration.get("key") or ""
        operator = toleration.get("operator") or "Equal"
        effect = toleration.get("effect") or ""
        if key and key != taint.get("key"):
            continue
        if not key and operator != "Exists":
            continue
        if operator == "Equal" and (toleration.get("value") or "") != (taint.get("value") or ""):
            continue
        if effect and effect != taint.get("effect"):
            continue
        return True
    return False


def _expression_holds(expression: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, operator = expression.get("key", ""), expression.get("operator", "")
    values = [str(v) for v in expression.get("values") or []]
    present = key in labels
    if operator == "In":
        return present and labels[key] in values
    if operator == "NotIn":
        return not present or labels[key] not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and values:
        try:
            left, right = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return left > right if operator == "Gt" else left < right
    return False


def placement_problems(
    pod_spec: Mapping[str, Any], labels: Mapping[str, str], taints: Sequence[Mapping[str, str]]
) -> list[str]:
    """Why the scheduler would not bind a pod with ``pod_spec`` to a node with these labels and taints.

    An empty list: labels and taints admit it. Each entry reads like the scheduler's own reasons
    ("node(s) didn't match Pod's node affinity/selector", "untolerated taint {key: value}").
    """
    problems = []
    for key, value in (pod_spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            problems.append(f"nodeSelector {key}={value} (node has {key}={labels.get(key, '<unset>')})")
    required = (
        ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        or {}
    ).get("nodeSelectorTerms") or []
    if required and not any(
        all(_expression_holds(e, labels) for e in term.get("matchExpressions") or []) for term in required
    ):
        problems.append("required node affinity not satisfied")
    tolerations = pod_spec.get("tolerations") or []
    for taint in taints:
        if taint.get("effect") in BLOCKING_EFFECTS and not tolerates(tolerations, taint):
            problems.append(f"untolerated taint {{{taint.get('key')}: {taint.get('value', '')}}}")
    return problems


def admits(pod_spec: Mapping[str, Any], labels: Mapping[str, str], taints: Sequence[Mapping[str, str]]) -> bool:
    return not placement_problems(pod_spec, labels, taints)
