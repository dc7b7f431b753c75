"""The vendored upstream manifests: unchanged files (sha256), and what capserve patches in them (only
placement, labels and the EFA image's registry)."""

from __future__ import annotations

import copy
import hashlib
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from capserve.core.cluster.addons import (
    CAMPAIGN_LABEL,
    MANAGED_BY,
    AddonOptions,
    efa_device_plugin,
    lws_controller,
    nvidia_device_plugin,
)
from capserve.core.cluster.efa import NO_EFA
from capserve.core.cluster.expectations import cluster_expectations
from capserve.core.cluster.hyperpod import HYPERPOD_GPU_TYPES
from capserve.core.cluster.vendored import (
    EFA_DEVICE_PLUGIN,
    LWS,
    NVIDIA_DEVICE_PLUGIN,
    VENDORED,
    Vendored,
    load,
    vendored_bytes,
)
from capserve.core.lease import Lease

SYSTEM = {"capserve.io/campaign": "k3", "capserve.io/pool": "system"}


@pytest.mark.parametrize("vendored", VENDORED, ids=lambda v: v.file)
def test_each_vendored_file_is_the_one_recorded(vendored: Vendored) -> None:
    text = vendored_bytes(vendored)
    assert hashlib.sha256(text).hexdigest() == vendored.sha256
    header = text.decode().split("\n---", 1)[0]
    assert vendored.commit in header and vendored.repository in header  # the file says where it came from


def _key(manifest: dict[str, Any]) -> tuple[str, str | None, str]:
    return manifest["kind"], manifest["metadata"].get("namespace"), manifest["metadata"]["name"]


def test_the_lws_release_is_installed_whole_and_patched_only_in_labels_and_placement() -> None:
    rendered = {_key(m): m for m in lws_controller(AddonOptions(campaign_id="k3", system_node_labels=SYSTEM))}
    upstream = {_key(m): m for m in load(LWS)}
    assert rendered.keys() == upstream.keys()
    for key in [("Secret", "lws-system", "lws-webhook-server-cert"), ("Service", "lws-system", "lws-webhook-service"),
                ("MutatingWebhookConfiguration", None, "lws-mutating-webhook-configuration"),
                ("ValidatingWebhookConfiguration", None, "lws-validating-webhook-configuration"),
                ("ConfigMap", "lws-system", "lws-manager-config"), ("Role", "lws-system", "lws-leader-election-role")]:
        assert key in rendered
    for key, manifest in rendered.items():
        assert manifest["metadata"]["labels"][CAMPAIGN_LABEL] == "k3"
        expected = copy.deepcopy(upstream[key])
        expected["metadata"].setdefault("labels", {}).update({CAMPAIGN_LABEL: "k3", **MANAGED_BY})
        if key[0] == "Deployment":
            expected["spec"]["template"]["spec"]["nodeSelector"] = SYSTEM
        assert manifest == expected, key
    manager = rendered[("Deployment", "lws-system", "lws-controller-manager")]
    assert manager["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.k8s.io/lws/lws:v0.10.0"
    assert "tolerations" not in manager["spec"]["template"]["spec"]


@pytest.mark.parametrize(
    ("region", "registry"),
    [("us-east-2", "602401143452.dkr.ecr.us-east-2.amazonaws.com"),
     ("me-south-1", "558608220178.dkr.ecr.me-south-1.amazonaws.com")],
)
def test_the_efa_plugin_is_the_charts_with_the_regions_image(region: str, registry: str) -> None:
    (daemonset,) = efa_device_plugin(AddonOptions(campaign_id="k3", region=region, gpu_node_labels={"p": "gpu"}))
    (chart,) = load(EFA_DEVICE_PLUGIN)
    pod = daemonset["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == f"{registry}/eks/aws-efa-k8s-device-plugin:v0.5.20"
    assert {"name": "infiniband-volume", "mountPath": "/dev/infiniband/"} in pod["containers"][0]["volumeMounts"]
    assert pod["tolerations"] == [{"key": "CriticalAddonsOnly", "operator": "Exists"},
                                  {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert pod["nodeSelector"] == {"p": "gpu"}
    # Everything else is the chart's, but for the ml. spellings of HyperPod's types in the instance-type affinity
    # (HyperPod labels its nodes ml.<type>: docs/hyperpod.md §9).
    for field in ("hostNetwork", "volumes", "priorityClassName"):
        assert pod[field] == chart["spec"]["template"]["spec"][field]
    expected = copy.deepcopy(chart["spec"]["template"]["spec"]["affinity"])
    (term,) = expected["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    types = term["matchExpressions"][0]["values"]
    types += [f"ml.{t}" for t in types if t in HYPERPOD_GPU_TYPES]
    assert pod["affinity"] == expected and "ml.p6-b300.48xlarge" in types


def test_the_nvidia_plugin_is_nvidias_static_manifest_placed_on_the_gpu_pool() -> None:
    (daemonset,) = nvidia_device_plugin(AddonOptions(campaign_id="k3", gpu_node_labels={"p": "gpu"}))
    (upstream,) = load(NVIDIA_DEVICE_PLUGIN)
    expected = copy.deepcopy(upstream)
    expected["metadata"]["labels"] = {CAMPAIGN_LABEL: "k3", **MANAGED_BY}
    expected["spec"]["template"]["spec"]["nodeSelector"] = {"p": "gpu"}
    assert daemonset == expected  # the campaign label and the pool: nothing else differs from NVIDIA's file
    pod = daemonset["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == "nvcr.io/nvidia/k8s-device-plugin:v0.17.4"
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert NVIDIA_DEVICE_PLUGIN in VENDORED  # so its checksum is checked above


def _lease() -> Lease:
    now = datetime(2026, 12, 1, tzinfo=UTC)
    return Lease(provider="ec2-capacity-block", region="us-east-2", availability_zone="us-east-2a",
                 reservation_id="cr-0123456789abcdef0", start=now, end=now + timedelta(days=1),
                 instance_type="p6-b300.48xlarge", instance_count=2, upfront_fee=1.0)


@pytest.mark.parametrize(("node_target", "fsx"), [("nvme", False), ("fsx", True)])
def test_fsx_is_installed_and_waited_for_only_for_node_target_fsx(node_target: str, fsx: bool) -> None:
    expect = cluster_expectations("k3", _lease(), kind="eks", system_pool=True, efa=NO_EFA, node_target=node_target)
    assert any(m["metadata"]["name"] == "fsx-csi-node" for m in expect.addons) is fsx
    assert any(m["metadata"]["name"] == "fsx-csi-node" for m in expect.wait_for) is fsx


def test_bring_up_waits_for_the_webhook_endpoints_and_has_a_probe_for_the_webhooks() -> None:
    expect = cluster_expectations("k3", _lease(), kind="eks", system_pool=True, efa=NO_EFA)
    assert {"apiVersion": "v1", "kind": "Endpoints",
            "metadata": {"name": "lws-webhook-service", "namespace": "lws-system"}} in expect.wait_for
    assert expect.lws_probe is not None and expect.lws_probe["kind"] == "LeaderWorkerSet"
    assert "networkConfig" not in expect.lws_probe["spec"]  # the webhook's default is what proves it ran
