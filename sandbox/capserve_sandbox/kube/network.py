"""What a node and its pods can reach: the fake Kubernetes' view of the VPC it runs in.

(docs/sandbox.md §3, "Network reachability"; docs/aws-network.md §9.)

The rules live with whoever knows the network: ``capserve_sandbox.aws_ext.reachability`` reads moto's
EC2 state (subnets, route tables, gateways, endpoints, security groups). The fake Kubernetes only
asks, through ``Network``:

- ``cni_failure(pool)``: why the VPC CNI cannot initialise on that pool's nodes (they stay NotReady);
- ``route(pool, host)``: why a node of the pool cannot open a connection to ``host`` outside the VPC;
- ``admits(source, target, protocol, port)``: why the security groups drop a connection from a pod on
  a node of ``source`` to one on a node of ``target`` (``CONTROL_PLANE``: the API server's ENIs).

Each returns None when the path exists, else the missing piece in words. A fake with no VPC behind it
(tests that call ``provision_nodes`` directly) sits on ``OpenNetwork``: everything reaches, names
resolve without CoreDNS. Pools a ``MotoNetwork`` does not know reach everything too, but their pods'
names still go through CoreDNS.

Name resolution (``resolve``) is the cluster's own: a pod with ``dnsPolicy: ClusterFirst`` asks
CoreDNS (the ``kube-dns`` Service's ready endpoints) on UDP 53, which answers cluster names itself and
forwards the rest to the VPC resolver of its node (Corefile ``forward . /etc/resolv.conf``); a pod
with ``dnsPolicy: Default`` (or host network without ``ClusterFirstWithHostNet``) asks the VPC
resolver directly, which security groups do not filter (Amazon VPC user guide, "Amazon DNS server").
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

CONTROL_PLANE = "<eks-control-plane>"
POOL_LABEL = "eks.amazonaws.com/nodegroup"
API_SERVER_NAMES = (
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
KUBERNETES_SERVICE_IP = "10.100.0.1"  # EKS's default service CIDR 10.100.0.0/16: the first address
# What the kubelet says while the CNI has written no network config (containerd's CRI status, as
# EKS nodes report it: the aws/amazon-vpc-cni-k8s troubleshooting guide).
CNI_NOT_READY = (
    "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady "
    "message:Network plugin returns error: cni plugin not initialized"
)


class Network(Protocol):
    # False: no VPC is modelled, so neither is DNS (pods resolve anything: the fake's tests without EKS).
    models_dns: bool

    def cni_failure(self, pool: str) -> str | None: ...

    def route(self, pool: str, host: str) -> str | None: ...

    def admits(self, source: str, target: str, protocol: str, port: int) -> str | None: ...

    def same_cluster(self, pool: str, other: str) -> bool: ...


class OpenNetwork:
    """No VPC behind the fake: every path exists."""

    models_dns = False

    def cni_failure(self, pool: str) -> str | None:
        return None

    def route(self, pool: str, host: str) -> str | None:
        return None

    def admits(self, source: str, target: str, protocol: str, port: int) -> str | None:
        return None

    def same_cluster(self, pool: str, other: str) -> bool:
        return True


def registry_host(image: str) -> str:
    """The registry an image reference names (no domain: Docker Hub, as containerd resolves it)."""
    first, _, rest = image.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return "registry-1.docker.io" if first == "docker.io" else first
    return "registry-1.docker.io"


def placeholder_address(host: str) -> str:
    """A stable address for an outside name (TEST-NET-3, RFC 5737: documentation only, never routed)."""
    return f"203.0.113.{int(hashlib.sha256(host.encode()).hexdigest()[:4], 16) % 254 + 1}"


def pull_timeout(image: str, host: str) -> str:
    """containerd's error when the registry's address never answers (the kubelet shows it as ErrImagePull)."""
    tag = image.rsplit(":", 1)[1] if ":" in image.rsplit("/", 1)[-1] else "latest"
    repository = image.split("/", 1)[1] if "/" in image and registry_host(image) != "registry-1.docker.io" else image
    repository = repository.rsplit(":", 1)[0] if ":" in repository.rsplit("/", 1)[-1] else repository
    return (
        f'failed to pull and unpack image "{image}": failed to resolve reference "{image}": '
        f'failed to do request: Head "https://{host}/v2/{repository}/manifests/{tag}": '
        f"dial tcp {placeholder_address(host)}:443: i/o timeout"
    )


def node_pool(node: Mapping[str, Any] | None) -> str:
    return str(((node or {}).get("metadata") or {}).get("labels", {}).get(POOL_LABEL, ""))


@dataclass(frozen=True)
class Answer:
    """A name lookup's outcome: the address, or why there is none (``timed_out``: no server answered)."""

    address: str | None
    error: str = ""
    timed_out: bool = False


def _pods(objects: Mapping[Any, dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for k, o in objects.items() if k[:2] == ("", "pods")]


def _ready(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
    )


def _cluster_name(name: str, objects: Mapping[Any, dict[str, Any]]) -> str | None:
    """The ClusterIP a cluster name resolves to (search path of a pod: <ns>.svc.cluster.local, svc..., ...)."""
    if name.rstrip(".") in API_SERVER_NAMES:
        return KUBERNETES_SERVICE_IP
    parts = name.rstrip(".").removesuffix(".cluster.local").removesuffix(".svc").split(".")
    if len(parts) == 2:
        service = objects.get(("", "services", parts[1], parts[0]))
        if service is not None:
            return str((service.get("spec") or {}).get("clusterIP") or "") or None
    return None


def is_cluster_name(name: str) -> bool:
    bare = name.rstrip(".")
    return bare in API_SERVER_NAMES or bare.endswith((".svc", ".svc.cluster.local", ".cluster.local"))


def resolve(
    network: Network, objects: Mapping[Any, dict[str, Any]], pod: Mapping[str, Any], name: str
) -> Answer:
    """Resolve ``name`` as the pod's resolver would (see the module docstring). Call under the store's lock."""
    if not network.models_dns:
        return Answer(_cluster_name(name, objects) or placeholder_address(name))
    spec = pod.get("spec") or {}
    node = objects.get(("", "nodes", None, str(spec.get("nodeName") or "")))
    pool = node_pool(node)
    policy = spec.get("dnsPolicy") or "ClusterFirst"
    cluster_dns = policy == "ClusterFirst" and not spec.get("hostNetwork") or policy == "ClusterFirstWithHostNet"
    if not cluster_dns:
        if is_cluster_name(name) or _cluster_name(name, objects):
            return Answer(None, f"** server can't find {name}: NXDOMAIN")
        return Answer(placeholder_address(name))
    servers = [
        p for p in _pods(objects)
        if p["metadata"].get("namespace") == "kube-system"
        and (p["metadata"].get("labels") or {}).get("k8s-app") == "kube-dns"
        and _ready(p)
    ]
    if not servers:
        return Answer(None, "no ready endpoints behind Service kube-system/kube-dns", timed_out=True)
    for server in servers:
        target = node_pool(objects.get(("", "nodes", None, str(server["spec"].get("nodeName") or ""))))
        if not network.same_cluster(pool, target):
            # One fake API server stands for every sandbox cluster, so EKS's CoreDNS may run on another
            # cluster's nodes; a real cluster has its own. Only its presence is judged then.
            continue
        blocked = network.admits(pool, target, "udp", 53)
        if blocked:
            # kube-proxy spreads queries over every endpoint: one unreachable CoreDNS loses a share of them.
            where = server["spec"].get("nodeName")
            return Answer(None, f"DNS to CoreDNS pod {server['metadata']['name']} on {where}: {blocked}", True)
    address = _cluster_name(name, objects)
    if address:
        return Answer(address)
    if is_cluster_name(name):
        return Answer(None, f"** server can't find {name}: NXDOMAIN")
    return Answer(placeholder_address(name))  # CoreDNS forwards it to its node's VPC resolver


def connect(
    network: Network, objects: Mapping[Any, dict[str, Any]], pod: Mapping[str, Any], name: str, port: int
) -> str | None:
    """Why a TCP connection from the pod to ``name``:``port`` (already resolved) would time out, or None."""
    spec = pod.get("spec") or {}
    pool = node_pool(objects.get(("", "nodes", None, str(spec.get("nodeName") or ""))))
    if name.rstrip(".") in API_SERVER_NAMES:
        return network.admits(pool, CONTROL_PLANE, "tcp", 443)
    if is_cluster_name(name):
        return None  # other Services: pod-to-pod rules are the workloads' own; nothing here uses them
    return network.route(pool, name)
