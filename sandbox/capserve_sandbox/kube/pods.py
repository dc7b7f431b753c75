"""Pod facts shared by the fake controllers, the scheduler and the kubelet (pure functions on dicts).

Sources, all public: Kubernetes docs "Taints and Tolerations" (matching rules), "Assigning Pods to
Nodes" (nodeSelector, required nodeAffinity: terms ORed, expressions ANDed), "Resource Management
for Pods and Containers" (a missing request defaults to the limit; extended resources), "Sidecar
containers" and "Init containers" (effective requests: max(init) vs sum(app + sidecars)),
kubernetes/apimachinery ``util/rand`` (name suffix alphabet) and ``pkg/controller`` (pod-template-hash).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from kubernetes.utils.quantity import parse_quantity

from capserve_sandbox.kube.store import timestamp

# k8s.io/apimachinery/pkg/util/rand: no vowels (no words) and no confusable characters.
SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
TERMINAL_PHASES = ("Succeeded", "Failed")

Resources = dict[str, Decimal]


def random_suffix(length: int = 5) -> str:
    """What ``metadata.generateName`` appends (apiserver: 5 characters of SUFFIX_ALPHABET)."""
    return "".join(secrets.choice(SUFFIX_ALPHABET) for _ in range(length))


def safe_encode(text: str) -> str:
    """apimachinery ``rand.SafeEncodeString``: every character mapped into SUFFIX_ALPHABET."""
    return "".join(SUFFIX_ALPHABET[ord(char) % len(SUFFIX_ALPHABET)] for char in text)


def template_hash(template: Mapping[str, Any], collision_count: int = 0) -> str:
    """The ``pod-template-hash`` label value: FNV-32a of the template, as a decimal string, safe-encoded.

    (The Deployment controller hashes the Go struct; hashing its JSON gives the same shape of value.)
    """
    value = 0x811C9DC5
    for byte in (json.dumps(template, sort_keys=True) + (str(collision_count) if collision_count else "")).encode():
        value ^= byte
        value = (value * 0x01000193) & 0xFFFFFFFF
    return safe_encode(str(value))


# ---------------------------------------------------------------- resources


def quantity(value: Any) -> Decimal:
    return Decimal(parse_quantity(value))  # type: ignore[no-untyped-call]


def _container_requests(container: Mapping[str, Any]) -> Resources:
    resources = container.get("resources") or {}
    limits = resources.get("limits") or {}
    requests = {**limits, **(resources.get("requests") or {})}  # a missing request defaults to the limit
    return {name: quantity(value) for name, value in requests.items()}


def _add(total: Resources, more: Mapping[str, Decimal]) -> None:
    for name, value in more.items():
        total[name] = total.get(name, Decimal(0)) + value


def pod_requests(spec: Mapping[str, Any]) -> Resources:
    """What the scheduler counts for a pod: app containers and sidecars summed, vs the largest init step."""
    total: Resources = {}
    for container in spec.get("containers") or []:
        _add(total, _container_requests(container))
    sidecars: Resources = {}
    peak: Resources = {}
    for init in spec.get("initContainers") or []:
        requests = _container_requests(init)
        if init.get("restartPolicy") == "Always":  # a sidecar keeps running beside what follows
            _add(sidecars, requests)
            continue
        step = dict(sidecars)
        _add(step, requests)
        for name, value in step.items():
            peak[name] = max(peak.get(name, Decimal(0)), value)
    _add(total, sidecars)
    for name, value in peak.items():
        total[name] = max(total.get(name, Decimal(0)), value)
    _add(total, {k: quantity(v) for k, v in (spec.get("overhead") or {}).items()})
    return total


def node_allocatable(node: Mapping[str, Any]) -> Resources:
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    return {name: quantity(value) for name, value in allocatable.items()}


# ---------------------------------------------------------------- placement rules


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """One toleration against one taint (empty effect = any effect; Exists with no key = any key)."""
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return not toleration.get("key") or toleration["key"] == taint.get("key")
    return bool(
        toleration.get("key") == taint.get("key") and (toleration.get("value") or "") == (taint.get("value") or "")
    )


def untolerated_taint(
    taints: Iterable[Mapping[str, Any]], tolerations: Iterable[Mapping[str, Any]], effects: tuple[str, ...]
) -> Mapping[str, Any] | None:
    """The first taint with one of ``effects`` that no toleration matches."""
    tolerations = list(tolerations)
    for taint in taints:
        if taint.get("effect") in effects and not any(tolerates(t, taint) for t in tolerations):
            return taint
    return None


def _expression_matches(expression: Mapping[str, Any], value: str | None) -> bool:
    operator, values = expression.get("operator"), list(expression.get("values") or [])
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt") and value is not None and values:
        try:
            left, right = int(value), int(values[0])
        except ValueError:
            return False
        return left > right if operator == "Gt" else left < right
    return False


def _term_matches(term: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    labels = (node.get("metadata") or {}).get("labels") or {}
    fields = {"metadata.name": (node.get("metadata") or {}).get("name")}
    expressions = term.get("matchExpressions") or []
    field_expressions = term.get("matchFields") or []
    if not expressions and not field_expressions:
        return False  # an empty term matches no node (API reference, NodeSelectorTerm)
    return all(_expression_matches(e, labels.get(e.get("key", ""))) for e in expressions) and all(
        _expression_matches(e, fields.get(e.get("key", ""))) for e in field_expressions
    )


def node_selector_matches(spec: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """nodeSelector (every label equal) and required node affinity (any term matches)."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    if any(labels.get(key) != value for key, value in (spec.get("nodeSelector") or {}).items()):
        return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if required is None:
        return True
    return any(_term_matches(term, node) for term in required.get("nodeSelectorTerms") or [])


# ---------------------------------------------------------------- status helpers


def is_terminal(pod: Mapping[str, Any]) -> bool:
    return ((pod.get("status") or {}).get("phase")) in TERMINAL_PHASES


def condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == kind), None)


def is_ready(pod: Mapping[str, Any]) -> bool:
    found = condition(pod, "Ready")
    return bool(found and found.get("status") == "True")


def owner_uid(obj: Mapping[str, Any]) -> str | None:
    for reference in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if reference.get("controller"):
            return str(reference.get("uid"))
    return None


def controller_reference(owner: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def merged_conditions(
    old: Iterable[Mapping[str, Any]] | None, wanted: Iterable[tuple[str, str, str | None, str | None]]
) -> list[dict[str, Any]]:
    """Conditions whose lastTransitionTime moves only when their status changes (API conventions).

    ``wanted`` holds (type, status, reason, message); None leaves reason/message out.
    """
    previous = {c.get("type"): c for c in old or []}
    out = []
    for kind, status, reason, message in wanted:
        before = previous.get(kind) or {}
        when = before.get("lastTransitionTime") if before.get("status") == status else None
        entry: dict[str, Any] = {"type": kind, "status": status, "lastTransitionTime": when or timestamp()}
        if reason is not None:
            entry["reason"] = reason
        if message is not None:
            entry["message"] = message
        out.append(entry)
    return out
