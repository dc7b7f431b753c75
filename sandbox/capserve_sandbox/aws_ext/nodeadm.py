"""What an EKS node makes of its launch template: nodeadm's NodeConfig in the user data, and the root volume.

AL2023 nodes run nodeadm, which reads ``NodeConfig`` objects (``apiVersion: node.eks.aws/v1alpha1``)
from MIME multi-part user data, parts of ``Content-Type: application/node.eks.aws``, merged in order
(later wins) (awslabs/amazon-eks-ami ``nodeadm/doc/api.md``, ``nodeadm/doc/examples.md``).
``spec.instance.localStorage.strategy`` ``RAID0``/``RAID10`` builds an array of the instance-store
NVMe disks at ``/mnt/k8s-disks/0`` and bind-mounts /var/lib/kubelet (so ephemeral storage) onto it;
``Mount`` mounts each disk at ``/mnt/k8s-disks/<n>``; no strategy leaves the disks alone. A NodeConfig
nodeadm cannot read stops the node from joining: EKS then fails the node group with
``NodeCreationFailure``. The root volume is ``/dev/xvda`` of the template's block device mappings
(20 GiB on the AL2023 EKS AMIs when not set). Sources listed in docs/sandbox-kubelet.md.

Huge pages: a node has the 2 MiB pages its boot configuration allocates and no others. NodeConfig has
no sysctl field (``nodeadm/doc/api.md``), so they come from a ``text/x-shellscript`` part of the same
MIME document running ``sysctl -w vm.nr_hugepages=<n>``: cloud-init runs it in its final stage, and
``nodeadm-run.service`` (which starts the kubelet) is ordered ``After=cloud-final.service``
(awslabs/amazon-eks-ami ``templates/al2023/runtime/rootfs/etc/systemd/system/nodeadm-run.service``), so
the kubelet reports them as ``hugepages-2Mi`` capacity (Kubernetes docs, "Manage HugePages": nodes
must pre-allocate huge pages to report them). The last such line wins, as the last ``sysctl -w``
would. The sandbox assumes the kernel finds every page (a fresh boot's memory is not fragmented).
"""

from __future__ import annotations

import base64
import binascii
import email
import email.policy
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

PART_TYPE = "application/node.eks.aws"
SCRIPT_TYPE = "text/x-shellscript"
_NR_HUGEPAGES = re.compile(r"^\s*sysctl\s+-w\s+vm\.nr_hugepages=(\d+)\s*$", re.MULTILINE)
STRATEGIES = ("RAID0", "RAID10", "Mount")
ROOT_DEVICE = "/dev/xvda"


class NodeConfigError(ValueError):
    """nodeadm would refuse this user data: the instances never join the cluster."""


@dataclass(frozen=True)
class NodeStorage:
    local_storage: str | None
    root_volume_gib: int
    hugepages_2mi: int = 0  # 2 MiB huge pages the boot configuration allocates


def _decoded(user_data: Any) -> bytes:
    if hasattr(user_data, "as_bytes"):  # moto keeps user data as its Base64EncodedString
        user_data = user_data.as_bytes().decode("ascii")
    try:
        return base64.b64decode(str(user_data), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise NodeConfigError(f"user data is not base64: {exc}") from exc


def _is_mime(text: str) -> bool:
    head = text.lstrip()[:200].lower()
    return "mime-version" in head or head.startswith("content-type: multipart")


def _node_configs(user_data: Any) -> list[dict[str, Any]]:
    raw = _decoded(user_data)
    text = raw.decode("utf-8", "replace")
    if _is_mime(text):
        message = email.message_from_bytes(raw, policy=email.policy.default)
        documents = [part.get_content() for part in message.walk() if part.get_content_type() == PART_TYPE]
    elif "kind: nodeconfig" in text.lower():
        documents = [text]
    else:
        return []  # a shell script or cloud-config: nodeadm does not read it
    configs = []
    for document in documents:
        try:
            loaded = yaml.safe_load(document)
        except yaml.YAMLError as exc:
            raise NodeConfigError(f"a {PART_TYPE} part is not YAML: {exc}") from exc
        if (
            not isinstance(loaded, dict)
            or loaded.get("kind") != "NodeConfig"
            or not str(loaded.get("apiVersion", "")).startswith("node.eks.aws/")
        ):
            raise NodeConfigError(f"a {PART_TYPE} part is not a node.eks.aws NodeConfig")
        configs.append(loaded)
    return configs


def local_storage_strategy(user_data: Any) -> str | None:
    """The merged ``spec.instance.localStorage.strategy`` of the user data's NodeConfigs (None: not set)."""
    if not user_data:
        return None
    strategy = None
    for config in _node_configs(user_data):
        found = (((config.get("spec") or {}).get("instance") or {}).get("localStorage") or {}).get("strategy")
        if found is not None:
            if found not in STRATEGIES:
                raise NodeConfigError(f"localStorage.strategy {found!r} is not one of {', '.join(STRATEGIES)}")
            strategy = found
    return str(strategy) if strategy else None


def hugepages_2mi(user_data: Any) -> int:
    """2 MiB huge pages the user data's shell scripts allocate (0: none, the kernel's default)."""
    if not user_data:
        return 0
    raw = _decoded(user_data)
    text = raw.decode("utf-8", "replace")
    if _is_mime(text):
        message = email.message_from_bytes(raw, policy=email.policy.default)
        scripts = [str(part.get_content()) for part in message.walk() if part.get_content_type() == SCRIPT_TYPE]
    else:
        scripts = [text] if text.startswith("#!") else []
    pages = 0
    for script in scripts:
        pages = script_hugepages_2mi(script) or pages
    return pages


def script_hugepages_2mi(script: str) -> int:
    """2 MiB huge pages one shell script allocates: its last ``sysctl -w vm.nr_hugepages=<n>`` line (0: none).

    Also how the sandbox's HyperPod reads an instance group's lifecycle script (``hyperpod.py``)."""
    found = _NR_HUGEPAGES.findall(script)
    return int(found[-1]) if found else 0


def root_volume_gib(mappings: Sequence[Mapping[str, Any]] | None, default: int = 20) -> int:
    for mapping in mappings or ():
        if mapping.get("DeviceName") == ROOT_DEVICE and (mapping.get("Ebs") or {}).get("VolumeSize"):
            return int(mapping["Ebs"]["VolumeSize"])
    return default


def node_storage(template_data: Mapping[str, Any] | None, default_root_gib: int = 20) -> NodeStorage:
    """Where a node of this launch template keeps ephemeral storage, and the huge pages it boots with
    (raises NodeConfigError like nodeadm)."""
    data = template_data or {}
    return NodeStorage(
        local_storage=local_storage_strategy(data.get("UserData")),
        root_volume_gib=root_volume_gib(data.get("BlockDeviceMappings"), default_root_gib),
        hugepages_2mi=hugepages_2mi(data.get("UserData")),
    )
