"""Every Kubernetes object capserve renders or the sandbox creates validates against the official schema (strict)."""

from __future__ import annotations

import kubernetes_validate
import pytest

from capserve.core.cluster.addons import CAMPAIGN_LABEL, AddonOptions, render_addons

# The sandbox's fake API server speaks 1.34; EKS's oldest supported minor is checked too.
VERSIONS = ("1.33", "1.34")
OPTIONS = AddonOptions(
    campaign_id="demo",
    gpu_node_labels={"capserve.io/pool": "gpu"},
    fsx=True,
    fsx_role_arn="arn:aws:iam::123456789012:role/capserve-demo-fsx",
)


@pytest.mark.parametrize("version", VERSIONS)
def test_every_addon_manifest_validates_strict(version: str) -> None:
    manifests = render_addons(OPTIONS)
    kinds = {m["kind"] for m in manifests}
    assert {"CustomResourceDefinition", "DaemonSet", "Deployment", "CSIDriver", "ServiceAccount", "Namespace",
            "Secret", "Service", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} <= kinds
    for manifest in manifests:
        kubernetes_validate.validate(manifest, version, strict=True)


def test_addons_carry_the_campaign_label_and_unique_names() -> None:
    manifests = render_addons(OPTIONS)
    assert all(m["metadata"]["labels"][CAMPAIGN_LABEL] == "demo" for m in manifests)
    keys = [(m["kind"], m["metadata"].get("namespace"), m["metadata"]["name"]) for m in manifests]
    assert len(keys) == len(set(keys))
    assert manifests[0]["kind"] == "CustomResourceDefinition"  # CRD and namespace before what needs them
    assert [m["kind"] for m in manifests].index("Namespace") < [m["kind"] for m in manifests].index("Deployment")


def test_selectors_match_templates_and_device_plugins_stay_on_gpu_nodes() -> None:
    for manifest in render_addons(OPTIONS):
        if manifest["kind"] in ("DaemonSet", "Deployment"):
            template_labels = manifest["spec"]["template"]["metadata"]["labels"]
            assert manifest["spec"]["selector"]["matchLabels"].items() <= template_labels.items()
            if "device-plugin" in manifest["metadata"]["name"]:
                assert manifest["spec"]["template"]["spec"]["nodeSelector"] == {"capserve.io/pool": "gpu"}


def test_options_select_addons() -> None:
    names = {
        m["metadata"]["name"] for m in render_addons(AddonOptions(campaign_id="x", efa=False, fsx=False, lws=False))
    }
    assert names == {"nvidia-device-plugin-daemonset"}
