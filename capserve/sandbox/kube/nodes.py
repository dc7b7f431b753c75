"""Node objects as a kubelet registers them, with devices as the NVIDIA and EFA device plugins advertise them.

Shapes: Node v1 core (status.conditions, capacity/allocatable); EKS managed node groups label their
nodes ``eks.amazonaws.com/nodegroup`` (EKS user guide, "Managed node groups"); HyperPod labels
``sagemaker.amazonaws.com/node-health-status`` and ``.../deep-health-check-status`` and taints
unhealthy nodes (HyperPod developer guide, "Resiliency"). GPU capacity is what the device plugin
registers: ``nvidia.com/gpu`` (NVIDIA k8s-device-plugin README) and ``vpc.amazonaws.com/efa``
(aws-efa-k8s-device-plugin).
"""

from __future__ import annotations

import hashlib
from typing import Any

from capserve.sandbox.kube.controllers import NodeFailure
from capserve.sandbox.kube.store import timestamp

HEALTH_LABEL = "sagemaker.amazonaws.com/node-health-status"
DEEP_HEALTH_LABEL = "sagemaker.amazonaws.com/deep-health-check-status"


def node_name(index: int) -> str:
    """EKS-style private DNS names, deterministic per sandbox: ip-10-64-0-11.ec2.internal."""
    return f"ip-10-64-{index // 250}-{index % 250 + 10}.ec2.internal"


def node_object(
    name: str,
    pool: str,
    *,
    gpus: int,
    efa: int,
    labels: dict[str, str],
    taints: list[dict[str, str]],
    failure: NodeFailure | None,
    health_labels: bool,
    ready: bool,
    instance_type: str,
    zone: str,
) -> dict[str, Any]:
    all_labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": instance_type,
        "eks.amazonaws.com/nodegroup": pool,
        "topology.kubernetes.io/zone": zone,
        **labels,
    }
    all_taints = list(taints)
    if health_labels or failure is NodeFailure.HEALTH_CHECK_FAILED:
        failed = failure is NodeFailure.HEALTH_CHECK_FAILED
        all_labels[HEALTH_LABEL] = "UnschedulablePendingReplacement" if failed else "Schedulable"
        all_labels[DEEP_HEALTH_LABEL] = "Failed" if failed else "Passed"
        if failed:
            all_taints.append({"key": HEALTH_LABEL, "value": "UnschedulablePendingReplacement", "effect": "NoSchedule"})
    gpu_count = 0 if failure is NodeFailure.NO_GPUS else gpus
    devices = {"nvidia.com/gpu": str(gpu_count), **({"vpc.amazonaws.com/efa": str(efa)} if efa else {})}
    is_ready = ready and failure is not NodeFailure.NEVER_READY
    now = timestamp()
    ready_condition = (
        {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"}
        if is_ready
        else {
            "type": "Ready",
            "status": "False",
            "reason": "KubeletNotReady",
            "message": "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady",
        }
    )
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": all_labels},
        "spec": {
            "providerID": f"aws:///{zone}/i-{hashlib.sha256(name.encode()).hexdigest()[:17]}",
            **({"taints": all_taints} if all_taints else {}),
        },
        "status": {
            "capacity": {"cpu": "192", "memory": "4194304Mi", "pods": "110", "ephemeral-storage": "500Gi", **devices},
            "allocatable": {
                "cpu": "191450m",
                "memory": "4100000Mi",
                "pods": "110",
                "ephemeral-storage": "450Gi",
                **devices,
            },
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
                "kubeProxyVersion": "v1.33.0",
                "kubeletVersion": "v1.33.0",
                "machineID": "",
                "operatingSystem": "linux",
                "osImage": "Amazon Linux 2023",
                "systemUUID": "",
            },
        },
    }
