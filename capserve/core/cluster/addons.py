"""The cluster add-ons the serving stage needs, as plain Kubernetes objects (pure).

- NVIDIA device plugin: advertises ``nvidia.com/gpu``: NVIDIA/k8s-device-plugin's static manifest
  ``deployments/static/nvidia-device-plugin.yml`` at v0.17.4 (the version the EKS user guide installs),
  vendored (``manifests/``, ``vendored.py``).
- AWS EFA device plugin: advertises ``vpc.amazonaws.com/efa``: the aws/eks-charts chart
  ``stable/aws-efa-k8s-device-plugin`` v0.5.30 rendered with its default values and vendored
  (``manifests/``, ``vendored.py``); its image comes from the block region's EKS registry.
- FSx for Lustre CSI driver: CSIDriver + node DaemonSet + controller Deployment
  (kubernetes-sigs/aws-fsx-csi-driver, ``deploy/kubernetes``), trimmed to the containers that mount;
  rendered only for ``node_target: fsx``.
- LeaderWorkerSet v0.10.0: the release's manifests vendored as upstream renders them (CRDs, RBAC, cert
  Secret, webhook Service, Mutating/ValidatingWebhookConfigurations, manager Deployment and config).

Placement (docs/serving.md §5.1, §5.2): every GPU node carries the ``nvidia.com/gpu=true:NoSchedule``
taint. What must run on GPU nodes (both device plugins, the FSx CSI node DaemonSet) tolerates that
taint and selects the GPU pool; the controllers (LWS manager, FSx controller) tolerate nothing extra
and select the untainted system pool. CoreDNS is created by EKS itself; bring-up only waits for it
(``bootstrap_workloads``). Vendored manifests are patched only in placement, labels and (EFA) the
image registry; an image set in ``AddonImages`` replaces the manifest's. Every object carries the
campaign label so teardown and the reaper find it. Applied server-side by ``capserve.tasks.kube.apply_addons``.
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from capserve.core.cluster.eks import gpu_pool_selector, system_node_labels
from capserve.core.cluster.hyperpod import HYPERPOD_GPU_TYPES, sagemaker_instance_type
from capserve.core.cluster.registries import eks_addon_registry
from capserve.core.cluster.vendored import EFA_DEVICE_PLUGIN, LWS, NVIDIA_DEVICE_PLUGIN, load
from capserve.core.tags import CAMPAIGN_TAG

CAMPAIGN_LABEL = CAMPAIGN_TAG  # the same key, as a Kubernetes label
MANAGED_BY = {"app.kubernetes.io/managed-by": "capserve"}
SYSTEM_NAMESPACE = "kube-system"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"  # Kubernetes well-known label
LWS_NAMESPACE = "lws-system"
LWS_GROUP = "leaderworkerset.x-k8s.io"
LWS_WEBHOOK_SERVICE = "lws-webhook-service"
FSX_DRIVER = "fsx.csi.aws.com"

Manifest = dict[str, Any]


class AddonImages(BaseModel):
    """Container images of the add-ons (pin what the cluster's Kubernetes minor supports)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    nvidia_device_plugin: str | None = Field(
        None,
        min_length=3,
        max_length=300,
        description="NVIDIA device plugin image (unset: the vendored manifest's, nvcr.io/nvidia/k8s-device-plugin).",
    )
    efa_device_plugin: str | None = Field(
        None,
        min_length=3,
        max_length=300,
        description="EFA device plugin image (unset: the vendored chart's, from the region's EKS registry).",
    )
    fsx_csi_driver: str = Field(
        "public.ecr.aws/fsx-csi-driver/aws-fsx-csi-driver:v1.5.0",
        min_length=3,
        max_length=300,
        description="FSx for Lustre CSI driver image.",
    )
    csi_node_driver_registrar: str = Field(
        "registry.k8s.io/sig-storage/csi-node-driver-registrar:v2.13.0",
        min_length=3,
        max_length=300,
        description="CSI node-driver-registrar sidecar.",
    )
    csi_provisioner: str = Field(
        "registry.k8s.io/sig-storage/csi-provisioner:v5.2.0",
        min_length=3,
        max_length=300,
        description="CSI external-provisioner sidecar.",
    )
    # The LWS manager image is the vendored release's (registry.k8s.io/lws/lws:v0.10.0): not an option.


class AddonOptions(BaseModel):
    """Which add-ons, where they run, with which images."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    campaign_id: str = Field(min_length=1, max_length=63, description="Value of the capserve.io/campaign label.")
    gpu_node_labels: dict[str, str] = Field(
        default_factory=dict,
        description="Node labels of the GPU pool: the device plugins and the FSx node driver run only there.",
    )
    system_node_labels: dict[str, str] = Field(
        default_factory=dict,
        description="Node labels of the system pool: the controllers run only there (empty: anywhere untainted).",
    )
    efa: bool = Field(True, description="Install the EFA device plugin (instance types with EFA interfaces).")
    fsx: bool = Field(False, description="Install the FSx for Lustre CSI driver (node_target: fsx).")
    lws: bool = Field(True, description="Install the LeaderWorkerSet CRD and controller (multi-node serving).")
    fsx_role_arn: str | None = Field(
        None,
        pattern=r"^arn:aws[a-z-]*:iam::\d{12}:role/.+$",
        max_length=2048,
        description="IAM role for the FSx CSI controller (IRSA annotation on its service account).",
    )
    region: str | None = Field(
        None, max_length=30, description="The block's region: add-on images come from its EKS registry."
    )
    images: AddonImages = Field(default_factory=AddonImages, description="Container images.")


def campaign_addon_options(
    campaign_id: str, *, efa: bool, system_pool: bool, region: str | None = None, fsx: bool = False
) -> AddonOptions:
    """The add-on options bring-up uses: device plugins on the campaign's GPU pool, controllers on its
    system pool (``system_pool`` False: a cluster we did not make, whose controllers go anywhere untainted);
    the FSx CSI driver only for ``node_target: fsx``."""
    return AddonOptions(
        campaign_id=campaign_id,
        gpu_node_labels=gpu_pool_selector(campaign_id),
        system_node_labels=system_node_labels(campaign_id) if system_pool else {},
        efa=efa,
        fsx=fsx,
        region=region,
    )


def _metadata(name: str, namespace: str | None, campaign_id: str, **labels: str) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "labels": {CAMPAIGN_LABEL: campaign_id, **MANAGED_BY, **labels}}
    if namespace:
        metadata["namespace"] = namespace
    return metadata


def _host_path(name: str, path: str, kind: str | None = None) -> dict[str, Any]:
    host_path: dict[str, Any] = {"path": path}
    if kind:
        host_path["type"] = kind
    return {"name": name, "hostPath": host_path}


# What runs on GPU nodes tolerates the GPU pool's taint (capserve.core.cluster.eks.GPU_TAINT) and
# nothing else: a toleration we do not need would let the pod land where we did not mean it to.
GPU_TOLERATIONS = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def _on_gpu_nodes(options: AddonOptions, pod_spec: dict[str, Any]) -> dict[str, Any]:
    pod_spec["tolerations"] = copy.deepcopy(GPU_TOLERATIONS)
    if options.gpu_node_labels:
        pod_spec["nodeSelector"] = dict(options.gpu_node_labels)
    return pod_spec


def _on_system_nodes(options: AddonOptions, pod_spec: dict[str, Any]) -> dict[str, Any]:
    """Controllers: no toleration, the system pool's labels (they would stay Pending on a GPU-only cluster)."""
    pod_spec["priorityClassName"] = "system-cluster-critical"
    if options.system_node_labels:
        pod_spec["nodeSelector"] = dict(options.system_node_labels)
    return pod_spec


def _daemonset(name: str, namespace: str, options: AddonOptions, pod_spec: dict[str, Any]) -> Manifest:
    selector = {"app.kubernetes.io/name": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": _metadata(name, namespace, options.campaign_id, **selector),
        "spec": {
            "selector": {"matchLabels": selector},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {"metadata": {"labels": selector}, "spec": pod_spec},
        },
    }


def nvidia_device_plugin(options: AddonOptions) -> list[Manifest]:
    """NVIDIA's static manifest as vendored (``manifests/nvidia-device-plugin-v0.17.4.yaml``): its
    ``FAIL_ON_INIT_ERROR=false``, dropped capabilities, ``system-node-critical`` priority, device-plugin
    hostPath and its ``nvidia.com/gpu`` toleration kept. Set here: the campaign label, the GPU pool's
    ``nodeSelector`` (the manifest has none: it would run on every node) and, only when
    ``images.nvidia_device_plugin`` is set, the image."""
    (daemonset,) = load(NVIDIA_DEVICE_PLUGIN)
    _label(daemonset, options.campaign_id)
    pod_spec = daemonset["spec"]["template"]["spec"]
    if pod_spec.get("tolerations") != GPU_TOLERATIONS:  # upstream changed: placement must be looked at again
        raise ValueError(f"{NVIDIA_DEVICE_PLUGIN.file}: tolerations are not the GPU taint's only")
    if options.gpu_node_labels:
        pod_spec["nodeSelector"] = dict(options.gpu_node_labels)
    if options.images.nvidia_device_plugin:
        (container,) = pod_spec["containers"]
        container["image"] = options.images.nvidia_device_plugin
    return [daemonset]


def efa_device_plugin(options: AddonOptions) -> list[Manifest]:
    """The chart's DaemonSet as vendored (``manifests/aws-efa-k8s-device-plugin-v0.5.30.yaml``): its
    ``/dev/infiniband`` and neuron mounts, privileged container, instance-type affinity and
    ``CriticalAddonsOnly`` toleration kept. Set here, as the chart's values would: the image (the block
    region's EKS registry, ``registries.py``), ``tolerations`` (the GPU taint) and ``nodeSelector`` (the pool)."""
    (daemonset,) = load(EFA_DEVICE_PLUGIN)
    _label(daemonset, options.campaign_id)
    pod_spec = daemonset["spec"]["template"]["spec"]
    (container,) = pod_spec["containers"]
    container["image"] = efa_image(options)
    pod_spec["tolerations"] = [*pod_spec["tolerations"], *copy.deepcopy(GPU_TOLERATIONS)]  # values.tolerations
    if options.gpu_node_labels:
        pod_spec["nodeSelector"] = dict(options.gpu_node_labels)  # values.nodeSelector
    _add_hyperpod_spellings(pod_spec)  # values.supportedInstanceLabels
    return [daemonset]


def _add_hyperpod_spellings(pod_spec: dict[str, Any]) -> None:
    """Let the chart's instance-type affinity match HyperPod nodes too.

    HyperPod labels its nodes ``node.kubernetes.io/instance-type: ml.<type>`` (docs/hyperpod.md §6), which the
    chart's list of plain EC2 types never matches, so the plugin would not run there and no node would advertise
    ``vpc.amazonaws.com/efa``. AWS's HyperPod chart selects its own DaemonSets' nodes by that spelling
    (``data/hyperpod/dependencies.yaml``, health-monitoring-agent affinity). capserve adds, as the chart's
    ``supportedInstanceLabels`` value would, the ``ml.`` spelling of each listed type HyperPod offers
    (``HYPERPOD_GPU_TYPES``).
    """
    terms = pod_spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    for term in terms:
        for expression in term.get("matchExpressions", []):
            if expression["key"] == INSTANCE_TYPE_LABEL and expression["operator"] == "In":
                plain = list(expression["values"])
                extra = [sagemaker_instance_type(t) for t in plain if t in HYPERPOD_GPU_TYPES]
                expression["values"] = plain + [t for t in extra if t not in plain]


def efa_image(options: AddonOptions) -> str:
    """``images.efa_device_plugin`` if set; else the chart's image, from the region's EKS registry."""
    if options.images.efa_device_plugin:
        return options.images.efa_device_plugin
    (daemonset,) = load(EFA_DEVICE_PLUGIN)
    chart_image = str(daemonset["spec"]["template"]["spec"]["containers"][0]["image"])
    repository = chart_image.split("/", 1)[1]  # eks/aws-efa-k8s-device-plugin:<appVersion>
    return f"{eks_addon_registry(options.region)}/{repository}"


def _label(manifest: Manifest, campaign_id: str) -> None:
    """The campaign label (teardown and the reaper find objects by it) and capserve as the manager."""
    manifest.setdefault("metadata", {}).setdefault("labels", {}).update({CAMPAIGN_LABEL: campaign_id, **MANAGED_BY})


def fsx_csi_driver(options: AddonOptions) -> list[Manifest]:
    images = options.images
    socket_env = [{"name": "CSI_ENDPOINT", "value": "unix:///csi/csi.sock"}]
    controller_sa = _metadata("fsx-csi-controller-sa", SYSTEM_NAMESPACE, options.campaign_id)
    if options.fsx_role_arn:
        # IRSA: EKS injects web-identity credentials for this role (EKS user guide, "IAM roles for service accounts").
        controller_sa["annotations"] = {"eks.amazonaws.com/role-arn": options.fsx_role_arn}
    node_spec: dict[str, Any] = {
        "priorityClassName": "system-node-critical",
        "containers": [
            {
                "name": "fsx-plugin",
                "image": images.fsx_csi_driver,
                "args": ["--mode=node", "--endpoint=$(CSI_ENDPOINT)", "--logging-format=text"],
                "env": [
                    *socket_env,
                    {"name": "CSI_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                ],
                "securityContext": {"privileged": True},  # mounts Lustre on the host
                "resources": {"requests": {"cpu": "10m", "memory": "40Mi"}},
                "volumeMounts": [
                    {"name": "kubelet-dir", "mountPath": "/var/lib/kubelet", "mountPropagation": "Bidirectional"},
                    {"name": "plugin-dir", "mountPath": "/csi"},
                ],
            },
            {
                "name": "node-driver-registrar",
                "image": images.csi_node_driver_registrar,
                "args": ["--csi-address=$(ADDRESS)", "--kubelet-registration-path=$(DRIVER_REG_SOCK_PATH)"],
                "env": [
                    {"name": "ADDRESS", "value": "/csi/csi.sock"},
                    {"name": "DRIVER_REG_SOCK_PATH", "value": f"/var/lib/kubelet/plugins/{FSX_DRIVER}/csi.sock"},
                ],
                "volumeMounts": [
                    {"name": "plugin-dir", "mountPath": "/csi"},
                    {"name": "registration-dir", "mountPath": "/registration"},
                ],
            },
        ],
        "volumes": [
            _host_path("kubelet-dir", "/var/lib/kubelet", "Directory"),
            _host_path("plugin-dir", f"/var/lib/kubelet/plugins/{FSX_DRIVER}/", "DirectoryOrCreate"),
            _host_path("registration-dir", "/var/lib/kubelet/plugins_registry/", "Directory"),
        ],
    }
    controller_selector = {"app.kubernetes.io/name": "fsx-csi-controller"}
    controller: Manifest = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata("fsx-csi-controller", SYSTEM_NAMESPACE, options.campaign_id, **controller_selector),
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": controller_selector},
            "template": {
                "metadata": {"labels": controller_selector},
                "spec": _on_system_nodes(
                    options,
                    {
                        "serviceAccountName": "fsx-csi-controller-sa",
                        "containers": [
                            {
                                "name": "fsx-plugin",
                                "image": images.fsx_csi_driver,
                                "args": ["--mode=controller", "--endpoint=$(CSI_ENDPOINT)", "--logging-format=text"],
                                "env": socket_env,
                                "resources": {"requests": {"cpu": "10m", "memory": "40Mi"}},
                                "volumeMounts": [{"name": "socket-dir", "mountPath": "/csi"}],
                            },
                            {
                                "name": "csi-provisioner",
                                "image": images.csi_provisioner,
                                "args": ["--csi-address=$(ADDRESS)", "--timeout=5m", "--leader-election=true"],
                                "env": [{"name": "ADDRESS", "value": "/csi/csi.sock"}],
                                "resources": {"requests": {"cpu": "10m", "memory": "40Mi"}},
                                "volumeMounts": [{"name": "socket-dir", "mountPath": "/csi"}],
                            },
                        ],
                        "volumes": [{"name": "socket-dir", "emptyDir": {}}],
                    },
                ),
            },
        },
    }
    return [
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "CSIDriver",
            "metadata": _metadata(FSX_DRIVER, None, options.campaign_id),
            # Lustre needs no attach step; mounting happens on the node (aws-fsx-csi-driver, csidriver.yaml).
            "spec": {"attachRequired": False, "fsGroupPolicy": "ReadWriteOnceWithFSType"},
        },
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": controller_sa},
        # Only GPU pods mount Lustre: the node driver runs on the GPU nodes, tolerating their taint.
        _daemonset("fsx-csi-node", SYSTEM_NAMESPACE, options, _on_gpu_nodes(options, node_spec)),
        controller,
    ]


def lws_crd() -> Manifest:
    """The LeaderWorkerSet CRD of the vendored release (the schema the fake API server and tests check against)."""
    (crd,) = [m for m in load(LWS, "CustomResourceDefinition") if m["spec"]["group"] == LWS_GROUP]
    return crd


def lws_controller(options: AddonOptions) -> list[Manifest]:
    """LWS v0.10.0 as its release installs it (``manifests/lws-v0.10.0.yaml``, docs/serving.md §2): CRDs,
    Namespace, RBAC, the manager's ConfigMap, the cert Secret its rotator fills, the webhook Service, the
    webhook configurations and the manager Deployment. Patched: labels, and the manager's placement
    (the system pool's nodeSelector; no toleration). CRDs first, then the release's order."""
    manifests = load(LWS)
    for manifest in manifests:
        _label(manifest, options.campaign_id)
        if manifest["kind"] == "Deployment" and options.system_node_labels:
            manifest["spec"]["template"]["spec"]["nodeSelector"] = dict(options.system_node_labels)
    crds = [m for m in manifests if m["kind"] == "CustomResourceDefinition"]
    return crds + [m for m in manifests if m["kind"] != "CustomResourceDefinition"]


def lws_webhook_endpoints() -> Manifest:
    """The webhook Service's Endpoints: ready once a manager pod is Ready (``readiness.workload_state``)."""
    metadata = {"name": LWS_WEBHOOK_SERVICE, "namespace": LWS_NAMESPACE}
    return {"apiVersion": "v1", "kind": "Endpoints", "metadata": metadata}


def lws_probe(namespace: str = LWS_NAMESPACE) -> Manifest:
    """A one-pod LeaderWorkerSet for a server-side dry-run create (``dryRun=All``): it passes both LWS
    webhooks and is never stored. Only the mutating webhook sets ``spec.networkConfig.subdomainPolicy``
    (LWS ``pkg/webhooks/leaderworkerset_webhook.go`` Default; the CRD has no default for it), so the
    dry-run's answer shows the webhook ran."""
    pod = {"containers": [{"name": "probe", "image": "registry.k8s.io/pause:3.10"}]}
    return {
        "apiVersion": f"{LWS_GROUP}/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "capserve-lws-probe", "namespace": namespace},
        "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 1, "workerTemplate": {"spec": pod}}},
    }


def bootstrap_workloads() -> list[Manifest]:
    """What EKS itself runs in a new cluster and bring-up must see ready: the CoreDNS Deployment.

    EKS installs CoreDNS (``kube-system/coredns``, 2 replicas) as a self-managed add-on when it
    creates a cluster; its pods tolerate ``CriticalAddonsOnly`` and the control-plane taint only,
    so on our clusters they can only run on the untainted system nodes (docs/serving.md §5.1).
    Not applied by us; these references (kind, namespace, name) are only waited for.
    """
    return [
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "coredns", "namespace": SYSTEM_NAMESPACE}}
    ]


def render_addons(options: AddonOptions) -> list[Manifest]:
    """Every add-on object, in apply order (CRDs and namespaces first)."""
    manifests = list(nvidia_device_plugin(options))
    if options.efa:
        manifests += efa_device_plugin(options)
    if options.fsx:
        manifests += fsx_csi_driver(options)
    if options.lws:
        manifests = lws_controller(options) + manifests
    return manifests


# What bring-up waits for: the workloads, and the CRDs (Established); the rest is ready once applied.
_WAITED_KINDS = ("CustomResourceDefinition", "Deployment", "DaemonSet")


def addons_to_wait_for(options: AddonOptions, manifests: list[Manifest]) -> list[Manifest]:
    """The applied add-ons that have a readiness to wait for, then (with LWS) the webhook Service's Endpoints:
    the LWS manager's webhooks answer only from a Ready pod behind ``lws-webhook-service``."""
    waited = [m for m in manifests if m.get("kind") in _WAITED_KINDS]
    return [*waited, lws_webhook_endpoints()] if options.lws else waited
