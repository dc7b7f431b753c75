"""The fake scheduler binds a pod only where EKS would, and otherwise says why in kube-scheduler's words."""

from __future__ import annotations

from typing import Any

from capserve_sandbox.kube import FakeKube
from capserve_sandbox.kube.instances import node_shape
from capserve_sandbox.kube.nodes import node_object
from capserve_sandbox.kube.scheduler import NO_NODES, place, usage
from kubernetes import client as k8s

from capserve.core.cluster.addons import AddonOptions, lws_controller
from capserve.tasks import kube as tasks_kube
from tests.sandbox.conftest import GPU_LABELS, GPU_TAINT, SYSTEM_LABELS, condition, events, get, pod, until


def node(name: str, *, gpus: int = 0, taints: list[dict[str, str]] | None = None, **labels: str) -> dict[str, Any]:
    shape = node_shape("p6-b300.48xlarge" if gpus else "m7i.xlarge")
    return node_object(
        name,
        "pool",
        shape=shape,
        labels=labels,
        taints=taints or [],
        failure=None,
        health_labels=False,
        ready=True,
        zone="us-east-2a",
        devices={"nvidia.com/gpu": gpus} if gpus else None,
    )


def gpu_pod(gpus: int, tolerate: bool = True) -> dict[str, Any]:
    spec = pod("p", container={"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}})
    if tolerate:
        spec["spec"]["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    spec["metadata"]["uid"] = "u"
    return spec


# ----------------------------------------------------------------------------- the filters, as data


def test_the_refusal_has_the_real_schedulers_shape() -> None:
    nodes = [node("gpu-a", gpus=8, taints=[GPU_TAINT]), node("gpu-b", gpus=8, taints=[GPU_TAINT]), node("cpu")]
    placement = place(gpu_pod(9), nodes, {})
    assert placement.node is None
    assert placement.message == (
        "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. "
        "preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."
    )
    untolerated = place(gpu_pod(9, tolerate=False), nodes, {})
    assert untolerated.message == (
        "0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 2 node(s) had untolerated taint "
        "{nvidia.com/gpu: true}. preemption: 0/3 nodes are available: 1 No preemption victims found for "
        "incoming pod, 2 Preemption is not helpful for scheduling."
    )
    assert place(gpu_pod(1), [], {}).message == NO_NODES


def test_requests_of_bound_pods_count_against_allocatable() -> None:
    nodes = [node("gpu-a", gpus=8, taints=[GPU_TAINT])]
    first = gpu_pod(5)
    assert place(first, nodes, {}).node == "gpu-a"
    crowded = {"gpu-a": usage([first])}
    assert "1 Insufficient nvidia.com/gpu" in place(gpu_pod(5), nodes, crowded).message
    assert place(gpu_pod(3), nodes, crowded).node == "gpu-a"


def test_selectors_affinity_cordons_and_claims() -> None:
    nodes = [node("a", pool="system"), node("b", pool="gpu")]
    wanted = gpu_pod(0)
    wanted["spec"]["nodeSelector"] = {"pool": "gpu"}
    assert place(wanted, nodes, {}).node == "b"
    wanted["spec"]["nodeSelector"] = {"pool": "nowhere"}
    assert "2 node(s) didn't match Pod's node affinity/selector" in place(wanted, nodes, {}).message
    by_name = gpu_pod(0)
    by_name["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a"]}]}]
            }
        }
    }
    assert place(by_name, nodes, {}).node == "a"
    cordoned = [{**n, "spec": {**n["spec"], "unschedulable": True}} for n in nodes]
    assert "2 node(s) were unschedulable" in place(gpu_pod(0), cordoned, {}).message
    claim = place(gpu_pod(0), nodes, {}, claims_missing=["capserve-fsx"]).message
    assert claim.startswith('0/2 nodes are available: persistentvolumeclaim "capserve-fsx" not found.')


def test_pods_count_against_max_pods() -> None:
    small = node("small")  # m7i.xlarge: 4 interfaces x (15 - 1) + 2 = 58 pods
    full = {"small": usage([{"metadata": {}, "spec": {}}] * 58)}
    assert "1 Too many pods" in place(gpu_pod(0), [small], full).message


# ----------------------------------------------------------------------------- through the API


def test_a_controller_tolerating_only_critical_addons_stays_pending_on_a_gpu_only_cluster(
    kube: FakeKube, api: k8s.ApiClient
) -> None:
    """Today's add-on bug: LWS's manager tolerates CriticalAddonsOnly only; EKS taints the GPU nodes."""
    kube.provision_nodes("gpu", 2, labels=GPU_LABELS, taints=[GPU_TAINT])
    for manifest in lws_controller(AddonOptions(campaign_id="t", gpu_node_labels=GPU_LABELS)):
        tasks_kube.apply(api, manifest)
    name = "lws-controller-manager"

    def pending_pod() -> dict[str, Any] | None:
        pods = [p for p in kube.objects("pods") if p["metadata"]["name"].startswith(name)]
        scheduled = condition(pods[0], "PodScheduled") if pods else None
        return pods[0] if scheduled and scheduled["status"] == "False" else None

    stuck = until(kube, pending_pod, what="the controller's pod refused")
    scheduled = condition(stuck, "PodScheduled")
    assert stuck["status"]["phase"] == "Pending" and not stuck["spec"].get("nodeName")
    assert scheduled is not None and scheduled["reason"] == "Unschedulable"
    assert "2 node(s) had untolerated taint {nvidia.com/gpu: true}" in scheduled["message"]
    listed = k8s.CoreV1Api(api).list_namespaced_event(
        "lws-system", field_selector=f"involvedObject.name={stuck['metadata']['name']}"
    )
    [refused] = [e for e in listed.items if e.reason == "FailedScheduling"]
    assert refused.type == "Warning" and "untolerated taint {nvidia.com/gpu: true}" in refused.message
    deployment = get(kube, "deployments", name, "apps", "lws-system")
    assert deployment["status"].get("availableReplicas", 0) == 0

    # A system node (untainted) appears: the pending pod is scheduled there and runs.
    (system,) = kube.provision_nodes("system", 1, instance_type="m7i.large", labels=SYSTEM_LABELS)
    until(kube, lambda: get(kube, "deployments", name, "apps", "lws-system")["status"].get("availableReplicas") == 1)
    # The release runs 2 replicas of 1 CPU each: one node of 2 vCPUs holds one.
    [running] = [p for p in kube.objects("pods")
                 if p["metadata"]["name"].startswith(name) and p["status"].get("phase") == "Running"]
    assert running["spec"]["nodeName"] == system and running["status"]["phase"] == "Running"


def test_nine_gpus_do_not_fit_an_eight_gpu_node(kube: FakeKube, api: k8s.ApiClient) -> None:
    kube.provision_nodes("gpu", 1, taints=[GPU_TAINT], device_plugins="builtin")
    greedy = pod("greedy", container={"resources": {"limits": {"nvidia.com/gpu": "9"}}})
    greedy["spec"]["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    tasks_kube.apply(api, greedy)
    until(kube, lambda: events(kube, "greedy", "FailedScheduling"))
    [refused] = events(kube, "greedy", "FailedScheduling")
    assert refused["message"].startswith("0/1 nodes are available: 1 Insufficient nvidia.com/gpu.")
    fitting = pod("fits", container={"resources": {"limits": {"nvidia.com/gpu": "8"}}})
    fitting["spec"]["tolerations"] = greedy["spec"]["tolerations"]
    tasks_kube.apply(api, fitting)
    until(kube, lambda: get(kube, "pods", "fits")["status"].get("phase") == "Running")
    assert not get(kube, "pods", "greedy")["spec"].get("nodeName")


def test_pending_pods_are_scheduled_when_nodes_appear(kube: FakeKube, api: k8s.ApiClient) -> None:
    tasks_kube.apply(api, pod("early"))
    until(kube, lambda: events(kube, "early", "FailedScheduling"))
    assert events(kube, "early", "FailedScheduling")[0]["message"] == NO_NODES
    (name,) = kube.provision_nodes("system", 1, instance_type="m7i.large")
    until(kube, lambda: get(kube, "pods", "early")["status"].get("phase") == "Running")
    assert get(kube, "pods", "early")["spec"]["nodeName"] == name
    [bound] = events(kube, "early", "Scheduled")
    assert bound["message"] == f"Successfully assigned default/early to {name}"


def test_coredns_is_pending_on_a_gpu_only_eks_cluster(kube: FakeKube) -> None:
    kube.bootstrap_eks()
    kube.provision_nodes("gpu", 1, labels=GPU_LABELS, taints=[GPU_TAINT])

    def refused() -> list[dict[str, Any]]:
        return [
            p
            for p in kube.objects("pods")
            if p["metadata"]["name"].startswith("coredns-")
            and (condition(p, "PodScheduled") or {}).get("reason") == "Unschedulable"
        ]

    pods = until(kube, lambda: len(refused()) == 2 and refused())
    assert all("untolerated taint {nvidia.com/gpu: true}" in condition(p, "PodScheduled")["message"] for p in pods)
    # The node daemons EKS installs tolerate everything: they run on the GPU node.
    until(kube, lambda: get(kube, "daemonsets", "kube-proxy", "apps", "kube-system")["status"].get("numberReady") == 1)
    kube.provision_nodes("system", 2, instance_type="m7i.large", labels=SYSTEM_LABELS)
    until(kube, lambda: get(kube, "deployments", "coredns", "apps", "kube-system")["status"].get("readyReplicas") == 2)
    hosts = {p["spec"]["nodeName"] for p in kube.objects("pods") if p["metadata"]["name"].startswith("coredns-")}
    assert len(hosts) == 2  # spread over the two system nodes
