"""The cluster add-ons the serving stage needs, rendered as plain Kubernetes objects (pure).

- NVIDIA device plugin: advertises ``nvidia.com/gpu`` (NVIDIA/k8s-device-plugin,
  ``deployments/static/nvidia-device-plugin.yml``).
- AWS EFA device plugin: advertises ``vpc.amazonaws.com/efa`` (aws/eks-charts,
  ``stable/aws-efa-k8s-device-plugin``; host network, privileged on some instance types).
- FSx for Lustre CSI driver: CSIDriver + node DaemonSet + controller Deployment
  (kubernetes-sigs/aws-fsx-csi-driver, ``deploy/kubernetes``), trimmed to the containers that mount.
- LeaderWorkerSet controller: the CRD (kubernetes-sigs/lws, shipped in ``data/lws-crd.yaml``), its
  RBAC and its manager Deployment.

Placement (docs/serving.md §5.1, §5.2): every GPU node carries the ``nvidia.com/gpu=true:NoSchedule``
taint. What must run on GPU nodes (both device plugins, the FSx CSI node DaemonSet) tolerates exactly
that taint and selects the GPU pool; the controllers (LWS manager, FSx controller) tolerate nothing
extra and select the untainted system pool. CoreDNS is created by EKS itself; bring-up only waits for
it (``bootstrap_workloads``).

Minimal on purpose: what these objects must contain for the component to run, nothing of the
upstream charts' options. Not rendered (and needed on a real cluster): LWS's admission webhooks
and their certificates, FSx's IRSA role (pass ``fsx_role_arn``). Every object carries the campaign
label so teardown and the reaper find it. Applied server-side by ``capserve.tasks.kube.apply_addons``.
"""

from __future__ import annotations

import copy
from functools import cache
from importlib import resources
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from capserve.core.cluster.eks import gpu_pool_selector, system_node_labels
from capserve.core.tags import CAMPAIGN_TAG

CAMPAIGN_LABEL = CAMPAIGN_TAG  # the same key, as a Kubernetes label
MANAGED_BY = {"app.kubernetes.io/managed-by": "capserve"}
SYSTEM_NAMESPACE = "kube-system"
LWS_NAMESPACE = "lws-system"
FSX_DRIVER = "fsx.csi.aws.com"

Manifest = dict[str, Any]


class AddonImages(BaseModel):
    """Container images of the add-ons (pin what the cluster's Kubernetes minor supports)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    nvidia_device_plugin: str = Field(
        "nvcr.io/nvidia/k8s-device-plugin:v0.17.2",
        min_length=3,
        max_length=300,
        description="NVIDIA device plugin image (NVIDIA/k8s-device-plugin releases).",
    )
    efa_device_plugin: str = Field(
        "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/aws-efa-k8s-device-plugin:v0.5.8",
        min_length=3,
        max_length=300,
        description="EFA device plugin image (aws/eks-charts default; the registry is regional).",
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
    lws_controller: str = Field(
        # The newest tag, matching the CRD shipped in data/lws-crd.yaml (docs/serving.md §2).
        "registry.k8s.io/lws/lws:v0.10.0",
        min_length=3,
        max_length=300,
        description="LeaderWorkerSet controller image.",
    )


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
    fsx: bool = Field(True, description="Install the FSx for Lustre CSI driver.")
    lws: bool = Field(True, description="Install the LeaderWorkerSet CRD and controller (multi-node serving).")
    fsx_role_arn: str | None = Field(
        None,
        pattern=r"^arn:aws[a-z-]*:iam::\d{12}:role/.+$",
        max_length=2048,
        description="IAM role for the FSx CSI controller (IRSA annotation on its service account).",
    )
    images: AddonImages = Field(default_factory=AddonImages, description="Container images.")


def campaign_addon_options(campaign_id: str, *, efa: bool, system_pool: bool) -> AddonOptions:
    """The add-on options bring-up uses: device plugins on the campaign's GPU pool, controllers on its
    system pool (``system_pool`` False: a cluster we did not make, whose controllers go anywhere untainted)."""
    return AddonOptions(
        campaign_id=campaign_id,
        gpu_node_labels=gpu_pool_selector(campaign_id),
        system_node_labels=system_node_labels(campaign_id) if system_pool else {},
        efa=efa,
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
_DROP_ALL = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


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
    pod_spec: dict[str, Any] = {
        "priorityClassName": "system-node-critical",
        "containers": [
            {
                "name": "nvidia-device-plugin-ctr",
                "image": options.images.nvidia_device_plugin,
                # Keep running on a node whose driver is not up yet instead of crash-looping.
                "env": [{"name": "FAIL_ON_INIT_ERROR", "value": "false"}],
                "securityContext": copy.deepcopy(_DROP_ALL),
                "resources": {"requests": {"cpu": "10m", "memory": "20Mi"}},
                "volumeMounts": [{"name": "device-plugin", "mountPath": "/var/lib/kubelet/device-plugins"}],
            }
        ],
        "volumes": [_host_path("device-plugin", "/var/lib/kubelet/device-plugins")],
    }
    return [_daemonset("nvidia-device-plugin-daemonset", SYSTEM_NAMESPACE, options, _on_gpu_nodes(options, pod_spec))]


def efa_device_plugin(options: AddonOptions) -> list[Manifest]:
    pod_spec: dict[str, Any] = {
        "priorityClassName": "system-node-critical",
        "hostNetwork": True,  # the plugin enumerates the host's EFA devices
        "containers": [
            {
                "name": "aws-efa-k8s-device-plugin",
                "image": options.images.efa_device_plugin,
                "securityContext": copy.deepcopy(_DROP_ALL),
                "resources": {"requests": {"cpu": "10m", "memory": "20Mi"}},
                "volumeMounts": [{"name": "device-plugin", "mountPath": "/var/lib/kubelet/device-plugins"}],
            }
        ],
        "volumes": [_host_path("device-plugin", "/var/lib/kubelet/device-plugins")],
    }
    return [
        _daemonset("aws-efa-k8s-device-plugin-daemonset", SYSTEM_NAMESPACE, options, _on_gpu_nodes(options, pod_spec))
    ]


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


@cache
def _lws_crd() -> Manifest:
    text = resources.files("capserve.core.cluster").joinpath("data/lws-crd.yaml").read_text(encoding="utf-8")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the C loader parses the 1.3 MB schema in ~0.1 s
    crd: Manifest = yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader, chosen above
    return crd


def lws_controller(options: AddonOptions) -> list[Manifest]:
    crd = copy.deepcopy(_lws_crd())
    crd["metadata"].setdefault("labels", {}).update({CAMPAIGN_LABEL: options.campaign_id, **MANAGED_BY})
    name = "lws-controller-manager"
    selector = {"app.kubernetes.io/name": name}
    campaign = options.campaign_id
    rules = [
        {
            "apiGroups": ["leaderworkerset.x-k8s.io"],
            "resources": ["leaderworkersets", "leaderworkersets/status", "leaderworkersets/finalizers"],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
        },
        {
            "apiGroups": ["apps"],
            "resources": ["statefulsets", "statefulsets/status", "controllerrevisions"],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
        },
        {
            "apiGroups": [""],
            "resources": ["pods", "pods/status", "services", "events"],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
        },
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get", "list", "watch", "create", "update", "patch"],
        },
    ]
    return [
        crd,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": _metadata(LWS_NAMESPACE, None, campaign)},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _metadata(name, LWS_NAMESPACE, campaign)},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": _metadata(name, None, campaign),
            "rules": rules,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": _metadata(name, None, campaign),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": LWS_NAMESPACE}],
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": _metadata(name, LWS_NAMESPACE, campaign, **selector),
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": selector},
                "template": {
                    "metadata": {"labels": selector},
                    "spec": _on_system_nodes(
                        options,
                        {
                            "serviceAccountName": name,
                            "containers": [
                                {
                                    "name": "manager",
                                    "image": options.images.lws_controller,
                                    "args": ["--zap-log-level=2", "--leader-elect"],
                                    "ports": [{"name": "health", "containerPort": 8081}],
                                    "readinessProbe": {"httpGet": {"path": "/readyz", "port": 8081}},
                                    "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8081}},
                                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                                    "securityContext": copy.deepcopy(_DROP_ALL),
                                }
                            ],
                        },
                    ),
                },
            },
        },
    ]


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
