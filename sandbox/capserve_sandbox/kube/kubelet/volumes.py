"""Volumes and environment of a container, as the kubelet prepares them, on a local directory tree.

Every node is a directory under the sandbox's state dir (``<state>/nodes/<node>/``): a ``hostPath``
volume ``/mnt/k8s-disks/0/weights`` of a pod on that node is ``<state>/nodes/<node>/mnt/k8s-disks/0/weights``,
so two pods on one node share it and pods on other nodes do not. ``emptyDir`` lives in the pod's
directory, a PersistentVolumeClaim in ``<state>/claims/<namespace>/<claim>`` (shared, like FSx).

The rules that bite, after the Kubernetes docs ("Volumes", "Define Environment Variables for a
Container", "Expose Pod Information to Containers Through Environment Variables"):
- ``hostPath`` type ``Directory`` must exist (``DirectoryOrCreate`` makes it); else the pod stays in
  ``ContainerCreating`` with a ``FailedMount`` event;
- a ``configMap``/``secret`` volume whose object is missing (and not optional) is a ``FailedMount``;
- an env var from a missing Secret/ConfigMap (or key) is ``CreateContainerConfigError``;
- ``$(VAR)`` expands from variables defined earlier in the list (``$$`` escapes); unknown ones stay
  (``capserve.core.rollout.references``: the expansion preflight applies to the command line too).
"""

from __future__ import annotations

import base64
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capserve.core.rollout.references import expand
from capserve_sandbox.kube.store import Store

# What an AL2023 EKS node has before any pod runs (relative to /).
HOST_DIRECTORIES = (
    "etc",
    "dev",
    "sys",
    "proc",
    "run",
    "tmp",
    "var/log/pods",
    "var/lib/kubelet/device-plugins",
    "var/lib/kubelet/plugins",
    "var/lib/kubelet/plugins_registry",
    "var/lib/kubelet/pods",
    "var/lib/containerd",
    "opt/cni/bin",
    "etc/cni/net.d",
)


class MountError(Exception):
    """A volume cannot be set up (FailedMount)."""


class ConfigError(Exception):
    """The container's configuration refers to something missing (CreateContainerConfigError)."""


@dataclass(frozen=True)
class Layout:
    root: Path

    def node_dir(self, node: str) -> Path:
        return self.root / "nodes" / node

    def host_path(self, node: str, path: str) -> Path:
        return self.node_dir(node) / path.lstrip("/")

    def pod_dir(self, uid: str) -> Path:
        return self.root / "pods" / uid

    def prepare_node(
        self, node: str, local_storage: str | None, disks: int, host_directories: Sequence[str] = ()
    ) -> None:
        """The directories a freshly booted node has, for hostPath type checks to find.

        On an EKS node nodeadm's RAID0/RAID10 array is mounted at /mnt/k8s-disks/0; ``Mount`` mounts each
        disk at /mnt/k8s-disks/1..N (nodeadm ``setup-local-disks``); without a strategy there is no
        /mnt/k8s-disks. ``host_directories`` are what another node OS mounts instead (HyperPod:
        /opt/dlami/nvme and /opt/sagemaker, no /mnt/k8s-disks at all: it is not a nodeadm node).
        """
        root = self.node_dir(node)
        for path in HOST_DIRECTORIES:
            (root / path).mkdir(parents=True, exist_ok=True)
        if host_directories:
            for path in host_directories:
                (root / path.lstrip("/")).mkdir(parents=True, exist_ok=True)
            return
        if local_storage in ("RAID0", "RAID10"):
            (root / "mnt/k8s-disks/0").mkdir(parents=True, exist_ok=True)
        elif local_storage == "Mount":
            for disk in range(1, disks + 1):
                (root / f"mnt/k8s-disks/{disk}").mkdir(parents=True, exist_ok=True)

    def claim_dir(self, namespace: str, claim: str) -> Path:
        return self.root / "claims" / namespace / claim

    def remove_pod(self, uid: str) -> None:
        shutil.rmtree(self.pod_dir(uid), ignore_errors=True)


def _lookup(store: Store, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
    return store.objects.get(("", plural, namespace, name))


def _data(obj: Mapping[str, Any], secret: bool) -> dict[str, str]:
    if secret:
        return {k: base64.b64decode(v).decode("utf-8", "replace") for k, v in (obj.get("data") or {}).items()}
    return {**(obj.get("data") or {})}


def prepare_volumes(layout: Layout, store: Store, pod: Mapping[str, Any], node: str) -> dict[str, Path]:
    """Host directories of the pod's volumes, made ready (raises MountError like a FailedMount)."""
    namespace = pod["metadata"]["namespace"]
    uid = pod["metadata"]["uid"]
    out: dict[str, Path] = {}
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        name = volume["name"]
        if "hostPath" in volume:
            host = layout.host_path(node, volume["hostPath"]["path"])
            kind = volume["hostPath"].get("type") or ""
            if kind in ("Directory", "File", "Socket", "CharDevice", "BlockDevice") and not host.exists():
                raise MountError(
                    f'MountVolume.SetUp failed for volume "{name}" : hostPath type check failed: '
                    f"{volume['hostPath']['path']} is not a {kind.lower()}"
                )
            if kind in ("", "DirectoryOrCreate", "Directory"):
                host.mkdir(parents=True, exist_ok=True)
            out[name] = host
        elif "persistentVolumeClaim" in volume:
            host = layout.claim_dir(namespace, volume["persistentVolumeClaim"]["claimName"])
            host.mkdir(parents=True, exist_ok=True)
            out[name] = host
        elif "configMap" in volume or "secret" in volume:
            secret = "secret" in volume
            source = volume["secret"] if secret else volume["configMap"]
            object_name = source.get("secretName") if secret else source.get("name")
            found = _lookup(store, "secrets" if secret else "configmaps", namespace, str(object_name))
            host = layout.pod_dir(uid) / "volumes" / name
            host.mkdir(parents=True, exist_ok=True)
            if found is None:
                if source.get("optional"):
                    out[name] = host
                    continue
                kind = "secret" if secret else "configmap"
                raise MountError(f'MountVolume.SetUp failed for volume "{name}" : {kind} "{object_name}" not found')
            data = _data(found, secret)
            items = source.get("items")
            files = {i["path"]: data.get(i["key"], "") for i in items} if items else data
            for path, content in files.items():
                target = host / path
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(content, encoding="utf-8")
            out[name] = host
        else:  # emptyDir, projected, downwardAPI, csi...: a fresh directory of the pod
            host = layout.pod_dir(uid) / "volumes" / name
            host.mkdir(parents=True, exist_ok=True)
            out[name] = host
    return out


def container_mounts(container: Mapping[str, Any], volumes: Mapping[str, Path]) -> list[tuple[str, Path]]:
    """(mountPath, host directory) of the container's mounts, longest path first."""
    mounts = []
    for mount in container.get("volumeMounts") or []:
        host = volumes.get(mount["name"])
        if host is None:
            continue
        if mount.get("subPath"):
            # A subPath that exists (a configMap key's file) is mounted as it is; a missing one is made as
            # a directory (Kubernetes docs, "Volumes": "Using subPath").
            host = host / mount["subPath"]
            if not host.exists():
                host.mkdir(parents=True)
        mounts.append((str(mount["mountPath"]).rstrip("/") or "/", host))
    return sorted(mounts, key=lambda m: len(m[0]), reverse=True)


def to_host(path: str, mounts: list[tuple[str, Path]]) -> Path | None:
    """The host path of a path inside the container, or None when no mount holds it."""
    for mount_path, host in mounts:
        if path == mount_path:
            return host
        if path.startswith(mount_path + "/"):
            return host / path[len(mount_path) + 1 :]
    return None


def rewrite_paths(value: str, mounts: list[tuple[str, Path]]) -> str:
    """A value that is a path under a mount, rewritten to the host; anything else unchanged."""
    if not value.startswith("/"):
        return value
    host = to_host(value, mounts)
    return str(host) if host is not None else value




def _field(pod: Mapping[str, Any], path: str, host_ip: str, pod_ip: str) -> str:
    metadata = pod["metadata"]
    fixed = {
        "metadata.name": metadata.get("name"),
        "metadata.namespace": metadata.get("namespace"),
        "metadata.uid": metadata.get("uid"),
        "spec.nodeName": (pod.get("spec") or {}).get("nodeName"),
        "spec.serviceAccountName": (pod.get("spec") or {}).get("serviceAccountName"),
        "status.hostIP": host_ip,
        "status.podIP": pod_ip,
    }
    if path in fixed:
        return str(fixed[path] or "")
    match = re.match(r"^metadata\.(labels|annotations)\['(.+)'\]$", path)
    if match:
        return str((metadata.get(match.group(1)) or {}).get(match.group(2), ""))
    raise ConfigError(f"unsupported fieldRef {path}")


def _key_ref(store: Store, namespace: str, ref: Mapping[str, Any], secret: bool) -> str | None:
    kind = "secret" if secret else "configmap"
    found = _lookup(store, "secrets" if secret else "configmaps", namespace, str(ref.get("name")))
    if found is None:
        if ref.get("optional"):
            return None
        raise ConfigError(f'{kind} "{ref.get("name")}" not found')
    data = _data(found, secret)
    if ref.get("key") not in data:
        if ref.get("optional"):
            return None
        title = "Secret" if secret else "ConfigMap"
        raise ConfigError(f"couldn't find key {ref.get('key')} in {title} {namespace}/{ref.get('name')}")
    return data[ref["key"]]


def resolve_env(
    store: Store, pod: Mapping[str, Any], container: Mapping[str, Any], host_ip: str, pod_ip: str
) -> dict[str, str]:
    """The container's environment, as the kubelet computes it (raises ConfigError like it fails)."""
    namespace = pod["metadata"]["namespace"]
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix") or ""
        secret = "secretRef" in source
        ref = source.get("secretRef") if secret else source.get("configMapRef")
        found = _lookup(store, "secrets" if secret else "configmaps", namespace, str((ref or {}).get("name")))
        if found is None:
            if (ref or {}).get("optional"):
                continue
            raise ConfigError(f'{"secret" if secret else "configmap"} "{(ref or {}).get("name")}" not found')
        env.update({prefix + k: v for k, v in _data(found, secret).items()})
    for entry in container.get("env") or []:
        name = entry["name"]
        if "valueFrom" not in entry:
            env[name] = expand(str(entry.get("value", "")), env)
            continue
        source = entry["valueFrom"]
        value: str | None
        if "fieldRef" in source:
            value = _field(pod, source["fieldRef"]["fieldPath"], host_ip, pod_ip)
        elif "secretKeyRef" in source:
            value = _key_ref(store, namespace, source["secretKeyRef"], secret=True)
        elif "configMapKeyRef" in source:
            value = _key_ref(store, namespace, source["configMapKeyRef"], secret=False)
        else:  # resourceFieldRef: the sandbox does not size containers
            value = "0"
        if value is not None:
            env[name] = value
    return env
