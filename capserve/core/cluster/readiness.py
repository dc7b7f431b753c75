"""Is the cluster usable? Pure decisions over objects exactly as the Kubernetes API returns them.

``assess_nodes`` answers "are the expected GPU nodes all there, Ready, schedulable, with their GPUs
(and, for multi-node layouts, EFA devices and 2 MiB huge pages) allocatable and their health checks
passed?" and, when not, says per node what is missing. ``workload_state`` answers the same for the
add-ons' Deployments, DaemonSets, Jobs and CRDs. The watch that feeds them lives in
``capserve.tasks.kube``; these functions never do I/O, so they are tested with plain dicts.

Objects are the JSON (camelCase) form: ``status.allocatable``, ``spec.unschedulable``,
``status.conditions[].type == "Ready"`` (Kubernetes API reference, Node v1 core).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from capserve.core.cluster.nvme import ephemeral_storage_bytes, parse_quantity
from capserve.core.progress import Progress

GPU_RESOURCE = "nvidia.com/gpu"  # advertised by the NVIDIA device plugin
EFA_RESOURCE = "vpc.amazonaws.com/efa"  # advertised by the AWS EFA device plugin
HUGEPAGES_2MI_RESOURCE = "hugepages-2Mi"  # reported by the kubelet from the kernel's pre-allocated pages
_MIB = 2**20
# SageMaker HyperPod labels every node with its health (HyperPod developer guide, "Resiliency:
# node health labels"); only "Schedulable" means the node passed its checks.
HYPERPOD_HEALTH_LABEL = "sagemaker.amazonaws.com/node-health-status"
HYPERPOD_HEALTHY = "Schedulable"
# While the on-start deep health checks run, HyperPod marks the node with this label.
HYPERPOD_DEEP_HEALTH_LABEL = "sagemaker.amazonaws.com/deep-health-check-status"
HYPERPOD_DEEP_HEALTH_FAILED = "Failed"


class NodeExpectation(BaseModel):
    """What "the GPU nodes are ready" means for this campaign."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    count: int = Field(ge=1, le=256, description="How many GPU nodes must be ready.")
    gpus_per_node: int = Field(ge=1, le=64, description="nvidia.com/gpu each node must have allocatable.")
    efa_per_node: int = Field(
        0, ge=0, le=64, description="vpc.amazonaws.com/efa each node must have allocatable (0: EFA not required)."
    )
    hugepages_2mi_mib: int = Field(
        0,
        ge=0,
        le=1024 * 1024,
        description="MiB of hugepages-2Mi each node must have allocatable (0: none requested; multi-node EFA "
        "layouts request them, docs/serving.md §5.2).",
    )
    node_labels: dict[str, str] = Field(
        default_factory=dict,
        description="Labels that pick the GPU nodes out of the cluster (e.g. the node group's); empty: every node.",
    )
    require_health_label: bool = Field(
        False, description=f"Require HyperPod's {HYPERPOD_HEALTH_LABEL}={HYPERPOD_HEALTHY} on every node."
    )

    def label_selector(self) -> str:
        """The same node filter as a Kubernetes label selector string, for list and watch requests."""
        return ",".join(f"{key}={value}" for key, value in sorted(self.node_labels.items()))


class NodeProblem(StrEnum):
    """Why a node does not count as ready. The value is what the timeout message says."""

    NOT_JOINED = "not joined"
    NOT_READY = "NotReady"
    CORDONED = "cordoned"
    GPUS_NOT_ADVERTISED = "GPUs not advertised"
    EFA_MISSING = "EFA missing"
    HUGEPAGES_MISSING = "huge pages missing"
    HEALTH_CHECK_FAILED = "health check failed"
    HEALTH_CHECK_PENDING = "health check not passed yet"


class NodeReport(BaseModel):
    """One node (or one node that never joined) and what it lacks."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=253, description="Node name, or a placeholder for a missing node.")
    problems: tuple[NodeProblem, ...] = Field(description="Empty when the node is ready.")
    details: tuple[str, ...] = Field(default=(), description="Human-readable detail for each problem.")
    gpus_allocatable: int = Field(ge=0, description="nvidia.com/gpu allocatable on the node.")
    efa_allocatable: int = Field(ge=0, description="vpc.amazonaws.com/efa allocatable on the node.")
    ephemeral_storage_bytes: int = Field(
        0, ge=0, description="ephemeral-storage capacity: the RAID0 NVMe array when nodeadm built one, else root EBS."
    )
    registered_at: AwareDatetime | None = Field(None, description="When its kubelet registered it (creationTimestamp).")
    ready_since: AwareDatetime | None = Field(
        None, description="When its Ready condition last turned True (lastTransitionTime), if it is Ready."
    )

    @property
    def ready(self) -> bool:
        return not self.problems


class Readiness(BaseModel):
    """The verdict over all nodes: ready, or who is missing what."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    expected: int = Field(ge=1, description="Nodes expected.")
    nodes: tuple[NodeReport, ...] = Field(description="Every matching node, then a placeholder per node not joined.")

    @property
    def ready_nodes(self) -> int:
        return sum(1 for node in self.nodes if node.ready)

    @property
    def ready(self) -> bool:
        return self.ready_nodes >= self.expected

    @property
    def gpus_allocatable(self) -> int:
        """GPUs allocatable on the ready nodes (what report.json's cluster section shows)."""
        return sum(node.gpus_allocatable for node in self.nodes if node.ready)

    @property
    def storage_by_node(self) -> dict[str, int]:
        """ephemeral-storage capacity of each ready node (the input of the weights' room check)."""
        return {node.name: node.ephemeral_storage_bytes for node in self.nodes if node.ready}

    def problems(self) -> list[NodeReport]:
        return [node for node in self.nodes if not node.ready]

    def progress(self, gpus_per_node: int) -> Progress:
        """How far the nodes got, for a person watching the wait: ``GPU nodes joined 1/2 (0 ready with 8 GPUs
        each)``; a node counts as ready once it is Ready with all its GPUs (and whatever else is expected)."""
        joined = sum(1 for node in self.nodes if NodeProblem.NOT_JOINED not in node.problems)
        return Progress(
            "GPU nodes joined", done=min(joined, self.expected), total=self.expected,
            detail=f"{self.ready_nodes} ready with {gpus_per_node} GPUs each",
        )

    def describe(self) -> str:
        """One line per node that is not ready, e.g. ``ip-10-0-1-2: GPUs not advertised (nvidia.com/gpu 0 of 8)``."""
        head = f"{self.ready_nodes} of {self.expected} GPU nodes ready"
        lines = [
            f"{node.name}: "
            + "; ".join(
                f"{problem.value} ({detail})" if detail else problem.value
                for problem, detail in zip(node.problems, node.details or ("",) * len(node.problems), strict=True)
            )
            for node in self.problems()
        ]
        return head + ("; " + "; ".join(lines) if lines else "")


_INTEGER = re.compile(r"^\d+$")


def device_count(quantity: object) -> int:
    """An extended-resource quantity as an integer. Device plugins advertise whole numbers ("8").

    Anything else (absent, "0", unparseable) counts as no devices: a node whose GPUs we cannot read
    is not a node we can schedule vLLM on.
    """
    if isinstance(quantity, bool):
        return 0
    if isinstance(quantity, int):
        return max(quantity, 0)
    if isinstance(quantity, str) and _INTEGER.match(quantity):
        return int(quantity)
    return 0


def _quantity_bytes(quantity: object) -> int:
    """A byte quantity ("10256Mi"); absent or unreadable counts as none."""
    if quantity is None:
        return 0
    try:
        return max(parse_quantity(quantity), 0)
    except ValueError:
        return 0


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for condition in _mapping(obj.get("status")).get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == kind:
            return condition
    return None


def assess_node(node: Mapping[str, Any], expectation: NodeExpectation) -> NodeReport:
    """What, if anything, keeps this one node from counting as a ready GPU node."""
    metadata = _mapping(node.get("metadata"))
    labels = _mapping(metadata.get("labels"))
    allocatable = _mapping(_mapping(node.get("status")).get("allocatable"))
    gpus = device_count(allocatable.get(GPU_RESOURCE))
    efa = device_count(allocatable.get(EFA_RESOURCE))
    problems: list[NodeProblem] = []
    details: list[str] = []

    ready = _condition(node, "Ready")
    if ready is None or ready.get("status") != "True":
        problems.append(NodeProblem.NOT_READY)
        reason = (ready or {}).get("reason") or ("no Ready condition" if ready is None else "")
        details.append(str(reason))
    # `kubectl cordon` sets spec.unschedulable (Kubernetes docs, "Safely Drain a Node").
    if _mapping(node.get("spec")).get("unschedulable") is True:
        problems.append(NodeProblem.CORDONED)
        details.append("spec.unschedulable=true")
    if gpus < expectation.gpus_per_node:
        problems.append(NodeProblem.GPUS_NOT_ADVERTISED)
        details.append(f"{GPU_RESOURCE} {gpus} of {expectation.gpus_per_node}")
    if efa < expectation.efa_per_node:
        problems.append(NodeProblem.EFA_MISSING)
        details.append(f"{EFA_RESOURCE} {efa} of {expectation.efa_per_node}")
    if expectation.hugepages_2mi_mib:
        hugepages_mib = _quantity_bytes(allocatable.get(HUGEPAGES_2MI_RESOURCE)) // _MIB
        if hugepages_mib < expectation.hugepages_2mi_mib:
            problems.append(NodeProblem.HUGEPAGES_MISSING)
            details.append(f"{HUGEPAGES_2MI_RESOURCE} {hugepages_mib}Mi of {expectation.hugepages_2mi_mib}Mi")
    if expectation.require_health_label or HYPERPOD_HEALTH_LABEL in labels:
        health = labels.get(HYPERPOD_HEALTH_LABEL)
        deep = labels.get(HYPERPOD_DEEP_HEALTH_LABEL)
        if deep == HYPERPOD_DEEP_HEALTH_FAILED or (health is not None and health != HYPERPOD_HEALTHY):
            problems.append(NodeProblem.HEALTH_CHECK_FAILED)
            details.append(
                f"{HYPERPOD_HEALTH_LABEL}={health}" + (f", {HYPERPOD_DEEP_HEALTH_LABEL}={deep}" if deep else "")
            )
        elif health is None:
            problems.append(NodeProblem.HEALTH_CHECK_PENDING)
            details.append(f"no {HYPERPOD_HEALTH_LABEL} label yet")
    return NodeReport(
        name=str(metadata.get("name") or "<unnamed>"),
        problems=tuple(problems),
        details=tuple(details),
        gpus_allocatable=gpus,
        efa_allocatable=efa,
        ephemeral_storage_bytes=ephemeral_storage_bytes(node),
        registered_at=_timestamp(metadata.get("creationTimestamp")),
        ready_since=_timestamp(ready.get("lastTransitionTime")) if ready and ready.get("status") == "True" else None,
    )


def _timestamp(value: object) -> datetime | None:
    """An RFC 3339 time of the API (``2026-12-05T11:59:40Z``), or None when absent or not one."""
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def selected(node: Mapping[str, Any], expectation: NodeExpectation) -> bool:
    labels = _mapping(_mapping(node.get("metadata")).get("labels"))
    return all(labels.get(key) == value for key, value in expectation.node_labels.items())


def assess_nodes(nodes: Sequence[Mapping[str, Any]], expectation: NodeExpectation) -> Readiness:
    """Decide whether ``expectation.count`` GPU nodes are ready; otherwise say per node what is missing.

    Nodes not matching ``expectation.node_labels`` (system nodes, another pool) are ignored. Nodes
    that have not registered at all appear as ``<not joined #i>`` placeholders.
    """
    reports = sorted(
        (assess_node(node, expectation) for node in nodes if selected(node, expectation)),
        key=lambda report: report.name,
    )
    missing = max(0, expectation.count - len(reports))
    placeholders = [
        NodeReport(
            name=f"<not joined #{index}>",
            problems=(NodeProblem.NOT_JOINED,),
            details=(f"{len(reports)} of {expectation.count} nodes registered",),
            gpus_allocatable=0,
            efa_allocatable=0,
        )
        for index in range(1, missing + 1)
    ]
    return Readiness(expected=expectation.count, nodes=(*reports, *placeholders))


class WorkloadState(StrEnum):
    """Where an applied object stands. ``FAILED`` is terminal: waiting longer cannot help."""

    READY = "ready"
    PROGRESSING = "progressing"
    FAILED = "failed"

    @property
    def is_terminal(self) -> bool:
        return self is not WorkloadState.PROGRESSING


def workload_state(obj: Mapping[str, Any]) -> tuple[WorkloadState, str]:
    """Ready / still progressing / failed, with a reason, for the kinds add-ons and Jobs use.

    Rules follow what ``kubectl rollout status`` and ``kubectl wait`` check (kubectl source,
    ``rollout_status.go``): the controller must have observed the latest generation first.
    Kinds without a status to wait for (ConfigMap, ServiceAccount, CSIDriver, ...) are ready once applied.
    """
    kind = obj.get("kind")
    metadata = _mapping(obj.get("metadata"))
    spec = _mapping(obj.get("spec"))
    status = _mapping(obj.get("status"))
    generation = metadata.get("generation")
    observed = status.get("observedGeneration")
    stale = generation is not None and (observed is None or observed < generation)

    if kind == "Deployment":
        if _condition_is(obj, "Progressing", "False") and _reason(obj, "Progressing") == "ProgressDeadlineExceeded":
            return WorkloadState.FAILED, "ProgressDeadlineExceeded"
        wanted = spec.get("replicas", 1)
        available = status.get("availableReplicas") or 0
        updated = status.get("updatedReplicas") or 0
        if stale:
            return WorkloadState.PROGRESSING, "generation not yet observed"
        if updated >= wanted and available >= wanted:
            return WorkloadState.READY, f"{available}/{wanted} available"
        return WorkloadState.PROGRESSING, f"{available}/{wanted} available"
    if kind == "DaemonSet":
        desired = status.get("desiredNumberScheduled")
        ready = status.get("numberReady") or 0
        updated = status.get("updatedNumberScheduled") or 0
        if stale or desired is None:
            return WorkloadState.PROGRESSING, "generation not yet observed"
        if ready >= desired and updated >= desired:
            return WorkloadState.READY, f"{ready}/{desired} ready"
        return WorkloadState.PROGRESSING, f"{ready}/{desired} ready"
    if kind == "Job":
        if _condition_is(obj, "Failed", "True"):
            return WorkloadState.FAILED, str(_reason(obj, "Failed") or "Failed")
        if _condition_is(obj, "Complete", "True"):
            return WorkloadState.READY, "Complete"
        return WorkloadState.PROGRESSING, f"{status.get('succeeded') or 0} succeeded"
    if kind == "CustomResourceDefinition":
        if _condition_is(obj, "Established", "True"):
            return WorkloadState.READY, "Established"
        return WorkloadState.PROGRESSING, "not yet Established"
    if kind == "Endpoints":
        # A Service answers only through a ready address (core/v1 EndpointSubset: notReadyAddresses are
        # "not currently marked as ready"); a webhook behind a Service without one fails every call.
        ready = sum(len(_mapping(s).get("addresses") or []) for s in obj.get("subsets") or [])
        if ready:
            return WorkloadState.READY, f"{ready} ready address(es)"
        return WorkloadState.PROGRESSING, "no ready address"
    return WorkloadState.READY, "applied"


def _condition_is(obj: Mapping[str, Any], kind: str, value: str) -> bool:
    condition = _condition(obj, kind)
    return condition is not None and condition.get("status") == value


def _reason(obj: Mapping[str, Any], kind: str) -> str | None:
    condition = _condition(obj, kind)
    return None if condition is None else condition.get("reason")


# Container waiting/terminated reasons that explain a workload that never becomes ready (kubelet
# reasons as `kubectl describe pod` shows them).
_STUCK_REASONS = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "CrashLoopBackOff",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
        "OOMKilled",
        "Error",
    }
)


def pod_problems(pods: Sequence[Mapping[str, Any]], limit: int = 5) -> list[str]:
    """Why these pods are not running ready, one line each: the scheduler's reason for a Pending pod
    (``PodScheduled=False``, whose message is the ``FailedScheduling`` text: "0/3 nodes are available:
    1 node(s) had untolerated taint …"), or a container stuck pulling, crashing or OOM-killed.
    """
    lines: list[str] = []
    for pod in sorted(pods, key=lambda p: str(_mapping(p.get("metadata")).get("name"))):
        name = str(_mapping(pod.get("metadata")).get("name") or "<pod>")
        scheduled = _condition(pod, "PodScheduled")
        if scheduled is not None and scheduled.get("status") == "False":
            reason = scheduled.get("reason") or "Pending"
            lines.append(f"pod {name} {reason}: {scheduled.get('message') or 'not scheduled'}")
            continue
        status = _mapping(pod.get("status"))
        for container in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
            state = _mapping(_mapping(container).get("state"))
            last = _mapping(_mapping(container).get("lastState"))
            for raw in (state.get("waiting"), state.get("terminated"), last.get("terminated")):
                stuck = _mapping(raw)
                if stuck.get("reason") in _STUCK_REASONS:
                    detail = f": {stuck['message']}" if stuck.get("message") else ""
                    lines.append(f"pod {name} container {container.get('name')} {stuck['reason']}{detail}")
                    break
    return lines[:limit]
