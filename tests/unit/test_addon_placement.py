"""Where the add-ons can run, checked against the node pools bring-up really creates (labels, taints).

The pools come from the request builders (what EKS puts on the nodes), the pod specs from the add-on
renderer, and the verdict from the sandbox scheduler's label/taint rules.
Before the system node group existed, the controllers tolerated only ``CriticalAddonsOnly`` on a
GPU-only tainted cluster and stayed Pending; these tests pin the fix.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import kubernetes_validate
import pytest
from capserve_sandbox.kube.pods import tolerates
from rollout_fixtures import node_taints, refusal

from capserve.core.cluster import eks, hyperpod
from capserve.core.cluster.addons import (
    GPU_TOLERATIONS,
    bootstrap_workloads,
    campaign_addon_options,
    render_addons,
)
from capserve.core.cluster.naming import ClusterNames
from capserve.core.cluster.settings import BringUpSettings
from capserve.core.lease import Lease

NAMES = ClusterNames(campaign_id="k3-demo")
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
LEASE = Lease(
    provider="ec2-capacity-block", region="us-east-2", availability_zone="us-east-2b",
    reservation_id="cr-0123456789abcdef0", start=NOW, end=NOW + timedelta(days=1),
    instance_type="p6-b300.48xlarge", instance_count=2, upfront_fee=1.0,
)
# EKS adds the node group's name as a label to every managed node (EKS user guide, managed node groups).
_GPU_REQUEST = eks.nodegroup_request(
    NAMES, LEASE, node_role_arn="arn:aws:iam::1:role/n", subnet_id="subnet-1",
    launch_template_id="lt-1", launch_template_version="1",
)
_SYSTEM_REQUEST = eks.system_nodegroup_request(
    NAMES, node_role_arn="arn:aws:iam::1:role/n", subnet_ids=["subnet-1", "subnet-2"],
    instance_type="m7i.large", node_count=2,
)
# The kubelet adds the well-known node.kubernetes.io/instance-type label to every node (Kubernetes docs,
# "Well-Known Labels"); the EFA chart's affinity selects on it.
GPU_NODE = ({**_GPU_REQUEST["labels"], "eks.amazonaws.com/nodegroup": NAMES.nodegroup,
             "node.kubernetes.io/instance-type": LEASE.instance_type},
            node_taints(_GPU_REQUEST["taints"]))
SYSTEM_NODE = ({**_SYSTEM_REQUEST["labels"], "eks.amazonaws.com/nodegroup": NAMES.system_nodegroup}, [])

# CoreDNS as EKS creates it: tolerates CriticalAddonsOnly and the control-plane taint, no nodeSelector
# (the Deployment `kubectl -n kube-system get deploy coredns -o yaml` shows on a new EKS cluster).
EKS_COREDNS_POD = {
    "tolerations": [
        {"key": "CriticalAddonsOnly", "operator": "Exists"},
        {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"},
    ]
}

GPU_ADDONS = {"nvidia-device-plugin-daemonset", "aws-efa-k8s-device-plugin", "fsx-csi-node"}
# The EFA chart's DaemonSet keeps its own CriticalAddonsOnly toleration (no node of ours has that taint).
CHART_TOLERATIONS = {"aws-efa-k8s-device-plugin": [{"key": "CriticalAddonsOnly", "operator": "Exists"}]}
CONTROLLERS = {"lws-controller-manager", "fsx-csi-controller"}


def pod_specs() -> dict[str, dict[str, Any]]:
    manifests = render_addons(campaign_addon_options("k3-demo", efa=True, system_pool=True, fsx=True))
    return {
        m["metadata"]["name"]: m["spec"]["template"]["spec"]
        for m in manifests
        if m["kind"] in ("DaemonSet", "Deployment")
    }


def test_every_workload_is_either_a_gpu_addon_or_a_controller() -> None:
    assert set(pod_specs()) == GPU_ADDONS | CONTROLLERS


@pytest.mark.parametrize("name", sorted(GPU_ADDONS))
def test_gpu_addons_run_on_gpu_nodes_only_and_tolerate_exactly_the_gpu_taint(name: str) -> None:
    spec = pod_specs()[name]
    assert spec["tolerations"] == [*CHART_TOLERATIONS.get(name, []), *GPU_TOLERATIONS]
    assert refusal(spec, *GPU_NODE) is None
    assert refusal(spec, *SYSTEM_NODE) == "node affinity/selector"  # the nodeSelector keeps them off the system nodes


@pytest.mark.parametrize("name", sorted(CONTROLLERS))
def test_controllers_tolerate_nothing_and_run_on_system_nodes_only(name: str) -> None:
    spec = pod_specs()[name]
    assert "tolerations" not in spec
    assert spec["nodeSelector"] == {"capserve.io/campaign": "k3-demo", "capserve.io/pool": "system"}
    assert refusal(spec, *SYSTEM_NODE) is None
    assert refusal(spec, *GPU_NODE) == "untolerated taint {nvidia.com/gpu: true}"


def test_eks_coredns_can_only_run_on_the_system_nodes_and_is_waited_for() -> None:
    assert refusal(EKS_COREDNS_POD, *SYSTEM_NODE) is None
    assert refusal(EKS_COREDNS_POD, *GPU_NODE) == "untolerated taint {nvidia.com/gpu: true}"
    assert bootstrap_workloads() == [
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "coredns", "namespace": "kube-system"}}
    ]


def test_the_nvidia_plugin_selects_labels_the_gpu_nodes_really_carry() -> None:
    selector = pod_specs()["nvidia-device-plugin-daemonset"]["nodeSelector"]
    # EKS node group labels ...
    assert selector.items() <= _GPU_REQUEST["labels"].items()
    # ... and HyperPod instance-group labels (KubernetesConfig.Labels) alike.
    hp = hyperpod.cluster_request(
        NAMES, LEASE.model_copy(update={"provider": "sagemaker-training-plan",
                                         "reservation_id": "arn:aws:sagemaker:us-east-2:1:training-plan/x"}),
        BringUpSettings(), eks_cluster_arn="arn:aws:eks:us-east-2:1:cluster/c", execution_role_arn="arn:r",
        subnet_id="subnet-1", security_group_ids=["sg-1"], lifecycle_uri="s3://sagemaker-x/lifecycle/",
        spans_nodes=True,
    )
    assert selector.items() <= hp["InstanceGroups"][0]["KubernetesConfig"]["Labels"].items()
    # The upstream chart's default affinity looks for nvidia.com/gpu.present=true: our GPU nodes carry it.
    assert _GPU_REQUEST["labels"]["nvidia.com/gpu.present"] == "true"


def test_on_a_cluster_we_did_not_make_controllers_select_no_pool() -> None:
    manifests = render_addons(campaign_addon_options("k3-demo", efa=False, system_pool=False, fsx=True))
    controllers = [m for m in manifests if m["kind"] == "Deployment" and m["metadata"]["name"] in CONTROLLERS]
    assert controllers and all("nodeSelector" not in m["spec"]["template"]["spec"] for m in controllers)


@pytest.mark.parametrize("version", ["1.33", "1.34"])
def test_placed_addons_still_validate_strict(version: str) -> None:
    for manifest in render_addons(campaign_addon_options("k3-demo", efa=True, system_pool=True)):
        kubernetes_validate.validate(manifest, version, strict=True)


@pytest.mark.parametrize(
    ("toleration", "taint", "expected"),
    [
        ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
         {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}, True),
        ({"key": "nvidia.com/gpu", "operator": "Equal", "value": "false"},
         {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}, False),
        ({"key": "nvidia.com/gpu", "value": "true"},  # operator defaults to Equal, effect empty matches all
         {"key": "nvidia.com/gpu", "value": "true", "effect": "NoExecute"}, True),
        ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"},
         {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}, False),
        ({"operator": "Exists"}, {"key": "anything", "value": "x", "effect": "NoSchedule"}, True),
        ({"key": "CriticalAddonsOnly", "operator": "Exists"},
         {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}, False),
    ],
)
def test_toleration_rules(toleration: dict[str, str], taint: dict[str, str], expected: bool) -> None:
    assert tolerates(toleration, taint) is expected


def test_affinity_terms_or_expressions_and_prefer_no_schedule_does_not_block() -> None:
    labels = {"kubernetes.io/hostname": "n1", "zone": "a"}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["n9"]}]},
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]},
                              {"key": "zone", "operator": "NotIn", "values": ["b"]}]},
    ]}}}
    assert refusal({"affinity": affinity}, labels, [{"key": "k", "value": "v", "effect": "PreferNoSchedule"}]) is None
    assert refusal({"affinity": affinity}, {"kubernetes.io/hostname": "n2"}, []) == "node affinity/selector"


def _hyperpod_gpu_node() -> tuple[dict[str, str], list[dict[str, str]]]:
    """A HyperPod node of the campaign's instance group: its KubernetesConfig labels and taints, and the
    instance-type label as HyperPod spells it, ml.<type> (docs/hyperpod.md §6)."""
    hp = hyperpod.cluster_request(
        NAMES, LEASE.model_copy(update={"provider": "sagemaker-training-plan",
                                         "reservation_id": "arn:aws:sagemaker:us-east-2:1:training-plan/x"}),
        BringUpSettings(), eks_cluster_arn="arn:aws:eks:us-east-2:1:cluster/c", execution_role_arn="arn:r",
        subnet_id="subnet-1", security_group_ids=["sg-1"], lifecycle_uri="s3://sagemaker-x/lifecycle/",
        spans_nodes=True,
    )
    (group,) = hp["InstanceGroups"]
    kube = group["KubernetesConfig"]
    labels = {**kube["Labels"], "node.kubernetes.io/instance-type": group["InstanceType"]}
    taints = [{"key": t["Key"], "value": t["Value"], "effect": t["Effect"]} for t in kube["Taints"]]
    return labels, taints


def test_the_efa_plugin_runs_on_hyperpod_nodes_labelled_with_the_ml_type() -> None:
    # The chart lists plain EC2 types only; a HyperPod node says ml.p6-b300.48xlarge, so without the ml. spellings
    # the plugin never runs there and a layout across HyperPod nodes waits for EFA devices until its deadline.
    node = _hyperpod_gpu_node()
    assert node[0]["node.kubernetes.io/instance-type"] == "ml.p6-b300.48xlarge"
    spec = pod_specs()["aws-efa-k8s-device-plugin"]
    assert refusal(spec, *node) is None
    # Still not on a type the chart does not list, spelled either way.
    other = ({**node[0], "node.kubernetes.io/instance-type": "ml.g5.8xlarge"}, node[1])
    assert refusal(spec, *other) == "node affinity/selector"
