"""A stand-in for kube-scheduler: the filters that decide where a pod may run, and its refusal message.

Filters run per node in the default profile's order (kube-scheduler config v1, default plugins):
NodeUnschedulable, NodeName, TaintToleration, NodeAffinity, NodeResourcesFit; the first that fails
gives that node's reasons. A pod no node admits stays Pending with ``PodScheduled=False`` (reason
``Unschedulable``) and a ``FailedScheduling`` event whose message has the real shape
(pkg/scheduler/framework ``FitError.Error``): ``0/N nodes are available: <count> <reason>, ...``
sorted as strings, then the preemption summary. The reason strings are the plugins' own:

- ``node(s) were unschedulable`` (cordoned);
- ``node(s) had untolerated taint {<key>: <value>}`` (NoSchedule and NoExecute taints);
- ``node(s) didn't match Pod's node affinity/selector``;
- ``Insufficient <resource>`` and ``Too many pods`` (allocatable minus the requests of pods bound there).

Among the nodes that pass, the least allocated (CPU and memory) wins, spreading pods of one owner.
Not modelled: preemption (the summary says no victims were found), inter-pod affinity, topology
spread constraints, host ports, volume zones (see docs/sandbox-kubelet.md).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from capserve_sandbox.kube.pods import (
    Resources,
    node_allocatable,
    node_selector_matches,
    owner_uid,
    pod_requests,
    untolerated_taint,
)

SCHEDULER = "default-scheduler"
NO_NODES = "no nodes available to schedule pods"
_NOT_HELPFUL = "Preemption is not helpful for scheduling"
_NO_VICTIMS = "No preemption victims found for incoming pod"
_UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}


@dataclass(frozen=True)
class Placement:
    """Where a pod goes, or why nowhere (``message`` is the FailedScheduling message)."""

    node: str | None
    message: str = ""


@dataclass
class NodeUsage:
    """What pods bound to a node already request."""

    requested: Resources
    pods: int
    owners: Counter[str]


def usage(bound: Iterable[Mapping[str, Any]]) -> NodeUsage:
    total: Resources = {}
    count = 0
    owners: Counter[str] = Counter()
    for pod in bound:
        count += 1
        for name, value in pod_requests(pod.get("spec") or {}).items():
            total[name] = total.get(name, Decimal(0)) + value
        owner = owner_uid(pod)
        if owner:
            owners[owner] += 1
    return NodeUsage(total, count, owners)


def _filter(pod: Mapping[str, Any], node: Mapping[str, Any], used: NodeUsage) -> tuple[list[str], bool]:
    """(reasons this node refuses the pod, whether preemption could help). No reasons: it fits."""
    spec = pod.get("spec") or {}
    tolerations = spec.get("tolerations") or []
    node_spec = node.get("spec") or {}
    if node_spec.get("unschedulable") and untolerated_taint([_UNSCHEDULABLE_TAINT], tolerations, ("NoSchedule",)):
        return ["node(s) were unschedulable"], False
    if spec.get("nodeName") and spec["nodeName"] != node["metadata"]["name"]:
        return ["node(s) didn't match the requested node name"], False
    taint = untolerated_taint(node_spec.get("taints") or [], tolerations, ("NoSchedule", "NoExecute"))
    if taint is not None:
        return [f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value') or ''}}}"], False
    if not node_selector_matches(spec, node):
        return ["node(s) didn't match Pod's node affinity/selector"], False
    allocatable = node_allocatable(node)
    reasons = []
    if used.pods + 1 > allocatable.get("pods", Decimal(0)):
        reasons.append("Too many pods")
    for name, wanted in sorted(pod_requests(spec).items()):
        if wanted <= 0:
            continue
        if used.requested.get(name, Decimal(0)) + wanted > allocatable.get(name, Decimal(0)):
            reasons.append(f"Insufficient {name}")
    return reasons, True


def _score(pod: Mapping[str, Any], node: Mapping[str, Any], used: NodeUsage) -> tuple[int, float, str]:
    allocatable = node_allocatable(node)
    wanted = pod_requests(pod.get("spec") or {})
    free = []
    for name in ("cpu", "memory"):
        capacity = allocatable.get(name, Decimal(0))
        if capacity > 0:
            left = capacity - used.requested.get(name, Decimal(0)) - wanted.get(name, Decimal(0))
            free.append(float(left / capacity))
    owner = owner_uid(pod)
    siblings = used.owners.get(owner, 0) if owner else 0
    # Lower is better: fewer siblings of the same owner, more free share; the name breaks ties.
    return (siblings, -(sum(free) / len(free) if free else 0.0), node["metadata"]["name"])


def place(
    pod: Mapping[str, Any],
    nodes: list[Mapping[str, Any]],
    used: Mapping[str, NodeUsage],
    claims_missing: list[str] | None = None,
) -> Placement:
    """Choose a node for ``pod``, or say why none fits in kube-scheduler's words.

    ``claims_missing``: names of PersistentVolumeClaims the pod mounts that do not exist (the
    VolumeBinding pre-filter refuses those pods before any node is looked at).
    """
    if not nodes:
        return Placement(None, NO_NODES)
    total = len(nodes)
    if claims_missing:
        return Placement(
            None,
            f'0/{total} nodes are available: persistentvolumeclaim "{claims_missing[0]}" not found. '
            f"preemption: 0/{total} nodes are available: {total} {_NOT_HELPFUL}.",
        )
    empty = NodeUsage({}, 0, Counter())
    reasons: Counter[str] = Counter()
    preemption: Counter[str] = Counter()
    fitting = []
    for node in nodes:
        node_used = used.get(node["metadata"]["name"], empty)
        refused, resolvable = _filter(pod, node, node_used)
        if not refused:
            fitting.append((node, node_used))
            continue
        reasons.update(refused)
        preemption[_NO_VICTIMS if resolvable else _NOT_HELPFUL] += 1
    if fitting:
        best = min(fitting, key=lambda pair: _score(pod, pair[0], pair[1]))
        return Placement(best[0]["metadata"]["name"])
    histogram = ", ".join(sorted(f"{count} {reason}" for reason, count in reasons.items()))
    summary = ", ".join(sorted(f"{count} {reason}" for reason, count in preemption.items()))
    return Placement(
        None, f"0/{total} nodes are available: {histogram}. preemption: 0/{total} nodes are available: {summary}."
    )
