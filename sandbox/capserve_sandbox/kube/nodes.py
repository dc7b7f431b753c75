"""Node objects as a kubelet on an EKS (or HyperPod) instance registers them.

Shapes: Node v1 core (status.conditions, capacity/allocatable, addresses). Labels: the well-known
ones (``kubernetes.io/hostname``, ``node.kubernetes.io/instance-type``, ``topology.kubernetes.io/zone``)
and EKS's (``eks.amazonaws.com/nodegroup``, EKS user guide "Managed node groups"). HyperPod labels
``sagemaker.amazonaws.com/node-health-status`` and ``.../deep-health-check-status`` and taints
unhealthy nodes (HyperPod developer guide, "Resiliency"). A node that is not Ready carries
``node.kubernetes.io/not-ready:NoSchedule`` (node lifecycle controller, "taint nodes by condition").

Device-plugin resources (``nvidia.com/gpu``, ``vpc.amazonaws.com/efa``) are not part of the node's
shape: the kubelet adds them once the device plugin runs on the node (``kubelet/devices.py``).
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from capserve_sandbox.kube.instances import NodeShape
from capserve_sandbox.kube.store import timestamp

HEALTH_LABEL = "sagemaker.amazonaws.com/node-health-status"
DEEP_HEALTH_LABEL = "sagemaker.amazonaws.com/deep-health-check-status"
NOT_READY_TAINT = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}


class NodeFailure(StrEnum):
    NEVER_READY = "never-ready"
    NO_GPUS = "no-gpus"
    HEALTH_CHECK_FAILED = "health-check-failed"


def node_name(index: int) -> str:
    """EKS-style private DNS names, deterministic per sandbox: ip-10-64-0-11.ec2.internal."""
    return f"ip-10-64-{index // 250}-{index % 250 + 10}.ec2.internal"


def node_ip(name: str) -> str:
    """The private IPv4 address in an EKS node name (ip-10-64-0-11.ec2.internal → 10.64.0.11)."""
    return name.split(".", 1)[0].removeprefix("ip-").replace("-", ".")


def node_object(
    name: str,
    pool: str,
    *,
    shape: NodeShape,
    labels: Mapping[str, str],
    taints: list[dict[str, str]],
    failure: NodeFailure | None,
    health_labels: bool,
    ready: bool,
    zone: str,
    devices: Mapping[str, int] | None = None,
    not_ready_message: str = "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady",
) -> dict[str, Any]:
    all_labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": shape.instance_type,
        "eks.amazonaws.com/nodegroup": pool,
        "topology.kubernetes.io/zone": zone,
        "topology.kubernetes.io/region": zone[:-1],
        **labels,
    }
    all_taints = [dict(t) for t in taints]
    if health_labels or failure is NodeFailure.HEALTH_CHECK_FAILED:
        failed = failure is NodeFailure.HEALTH_CHECK_FAILED
        all_labels[HEALTH_LABEL] = "UnschedulablePendingReplacement" if failed else "Schedulable"
        all_labels[DEEP_HEALTH_LABEL] = "Failed" if failed else "Passed"
        if failed:
            all_taints.append({"key": HEALTH_LABEL, "value": "UnschedulablePendingReplacement", "effect": "NoSchedule"})
    is_ready = ready and failure is not NodeFailure.NEVER_READY
    if not is_ready:
        all_taints.append(dict(NOT_READY_TAINT))
    advertised = {key: str(value) for key, value in (devices or {}).items()}
    now = timestamp()
    ready_condition = (
        {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"}
        if is_ready
        else {
            "type": "Ready",
            "status": "False",
            "reason": "KubeletNotReady",
            "message": not_ready_message,
        }
    )
    address = node_ip(name)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": all_labels},
        "spec": {
            "providerID": f"aws:///{zone}/i-{hashlib.sha256(name.encode()).hexdigest()[:17]}",
            **({"taints": all_taints} if all_taints else {}),
        },
        "status": {
            "capacity": {**shape.capacity(), **advertised},
            "allocatable": {**shape.allocatable(), **advertised},
            "addresses": [
                {"type": "InternalIP", "address": address},
                {"type": "InternalDNS", "address": name},
                {"type": "Hostname", "address": name},
            ],
            "conditions": [
                {
                    "type": "MemoryPressure",
                    "status": "False",
                    "reason": "KubeletHasSufficientMemory",
                    "message": "kubelet has sufficient memory available",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                },
                {**ready_condition, "lastHeartbeatTime": now, "lastTransitionTime": now},
            ],
            "nodeInfo": {
                "architecture": "amd64",
                "bootID": "",
                "containerRuntimeVersion": "containerd://2.0.5",
                "kernelVersion": "6.12.0",
                "kubeProxyVersion": "v1.34.0",
                "kubeletVersion": "v1.34.0",
                "machineID": "",
                "operatingSystem": "linux",
                "osImage": "Amazon Linux 2023",
                "systemUUID": "",
            },
        },
    }


def is_node_ready(node: Mapping[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (node.get("status") or {}).get("conditions") or []
    )


def with_devices(node: Mapping[str, Any], devices: Mapping[str, int]) -> dict[str, Any]:
    """The node with device-plugin resources set in capacity and allocatable (0 = registered, none healthy)."""
    updated = copy.deepcopy(dict(node))
    status = updated.setdefault("status", {})
    for section in ("capacity", "allocatable"):
        values = status.setdefault(section, {})
        for key, count in devices.items():
            values[key] = str(count)
    return updated


def set_ready(node: Mapping[str, Any], ready: bool) -> dict[str, Any]:
    """The node with its Ready condition (and the not-ready taint) flipped, as kubelet + lifecycle controller do."""
    updated = copy.deepcopy(dict(node))
    now = timestamp()
    for condition in updated["status"]["conditions"]:
        if condition["type"] != "Ready":
            continue
        was = condition["status"]
        condition.update(
            {"status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"}
            if ready
            else {"status": "False", "reason": "KubeletNotReady", "message": "kubelet stopped posting node status"}
        )
        condition["lastHeartbeatTime"] = now
        if was != condition["status"]:
            condition["lastTransitionTime"] = now
    taints = [t for t in updated["spec"].get("taints") or [] if t.get("key") != NOT_READY_TAINT["key"]]
    if not ready:
        taints.append(dict(NOT_READY_TAINT))
    if taints:
        updated["spec"]["taints"] = taints
    else:
        updated["spec"].pop("taints", None)
    return updated
