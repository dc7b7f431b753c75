"""What an EKS cluster runs before anyone applies anything: CoreDNS, kube-proxy and the VPC CNI (aws-node).

Shapes after ``kubectl get -o yaml`` of a new EKS cluster's default add-ons (EKS user guide,
"Amazon EKS add-ons" / "Manage CoreDNS"): CoreDNS is a 2-replica Deployment in kube-system that
tolerates only ``CriticalAddonsOnly`` and the control-plane taint, requires a Linux amd64/arm64 node
and asks 100m CPU / 70Mi; kube-proxy and aws-node are DaemonSets that tolerate every taint. So on a
cluster whose only nodes carry the ``nvidia.com/gpu`` taint, CoreDNS stays Pending, as on EKS.
Images are the regional ECR ones EKS uses; the sandbox does not pull them (placeholders run).
"""

from __future__ import annotations

from typing import Any

ECR = "602401143452.dkr.ecr.us-east-2.amazonaws.com/eks"
EKS_LABEL = {"eks.amazonaws.com/component": "coredns", "k8s-app": "kube-dns"}
Manifest = dict[str, Any]

_LINUX_NODES = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]},
                    ]
                }
            ]
        }
    }
}

_COREFILE = """.:53 {
    errors
    health { lameduck 5s }
    ready
    kubernetes cluster.local in-addr.arpa ip6.arpa { pods insecure; fallthrough in-addr.arpa ip6.arpa }
    prometheus :9153
    forward . /etc/resolv.conf
    cache 30
    loop
    reload
    loadbalance
}
"""


def coredns() -> list[Manifest]:
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "coredns", "namespace": "kube-system", "labels": EKS_LABEL},
            "data": {"Corefile": _COREFILE},
        },
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "coredns", "namespace": "kube-system"}},
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": "kube-dns",
                "namespace": "kube-system",
                "labels": {**EKS_LABEL, "kubernetes.io/name": "CoreDNS"},
            },
            "spec": {
                "selector": {"k8s-app": "kube-dns"},
                "clusterIP": "10.100.0.10",
                "ports": [
                    {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                    {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
                ],
            },
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "coredns",
                "namespace": "kube-system",
                "labels": {**EKS_LABEL, "kubernetes.io/name": "CoreDNS"},
            },
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": EKS_LABEL},
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": "25%"}},
                "template": {
                    "metadata": {"labels": EKS_LABEL},
                    "spec": {
                        "priorityClassName": "system-cluster-critical",
                        "serviceAccountName": "coredns",
                        "affinity": {
                            **_LINUX_NODES,
                            "podAntiAffinity": {
                                "preferredDuringSchedulingIgnoredDuringExecution": [
                                    {
                                        "weight": 100,
                                        "podAffinityTerm": {
                                            "labelSelector": {
                                                "matchExpressions": [
                                                    {"key": "k8s-app", "operator": "In", "values": ["kube-dns"]}
                                                ]
                                            },
                                            "topologyKey": "kubernetes.io/hostname",
                                        },
                                    }
                                ]
                            },
                        },
                        "tolerations": [
                            {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"},
                            {"key": "CriticalAddonsOnly", "operator": "Exists"},
                        ],
                        "containers": [
                            {
                                "name": "coredns",
                                "image": f"{ECR}/coredns:v1.11.4-eksbuild.14",
                                "args": ["-conf", "/etc/coredns/Corefile"],
                                "resources": {
                                    "limits": {"memory": "170Mi"},
                                    "requests": {"cpu": "100m", "memory": "70Mi"},
                                },
                                "ports": [
                                    {"name": "dns", "containerPort": 53, "protocol": "UDP"},
                                    {"name": "dns-tcp", "containerPort": 53, "protocol": "TCP"},
                                    {"name": "metrics", "containerPort": 9153, "protocol": "TCP"},
                                ],
                                "livenessProbe": {
                                    "httpGet": {"path": "/health", "port": 8080},
                                    "initialDelaySeconds": 60,
                                    "failureThreshold": 5,
                                },
                                "readinessProbe": {"httpGet": {"path": "/ready", "port": 8181}},
                                "volumeMounts": [
                                    {"name": "config-volume", "mountPath": "/etc/coredns", "readOnly": True}
                                ],
                            }
                        ],
                        "volumes": [
                            {
                                "name": "config-volume",
                                "configMap": {"name": "coredns", "items": [{"key": "Corefile", "path": "Corefile"}]},
                            }
                        ],
                    },
                },
            },
        },
    ]


def _node_daemon(name: str, image: str, cpu: str) -> Manifest:
    labels = {"k8s-app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": "kube-system", "labels": labels},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "priorityClassName": "system-node-critical",
                    "hostNetwork": True,
                    "affinity": _LINUX_NODES,
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [{"name": name, "image": image, "resources": {"requests": {"cpu": cpu}}}],
                },
            },
        },
    }


def eks_default_addons() -> list[Manifest]:
    """Everything EKS creates in a new cluster's kube-system, in apply order."""
    return [
        _node_daemon("aws-node", f"{ECR}/amazon-k8s-cni:v1.19.5-eksbuild.1", "25m"),
        _node_daemon("kube-proxy", f"{ECR}/kube-proxy:v1.34.0-minimal-eksbuild.2", "100m"),
        *coredns(),
    ]
