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
"""

from __future__ import annotations

import base64
import binascii
import email
import email.policy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

PART_TYPE = "application/node.eks.aws"
STRATEGIES = ("RAID0", "RAID10", "Mount")
ROOT_DEVICE = "/dev/xvda"


class NodeConfigError(ValueError):
    """nodeadm would refuse this user data: the instances never join the cluster."""


@dataclass(frozen=True)
class NodeStorage:
    local_storage: str | None
    root_volume_gib: int


def _node_configs(user_data: Any) -> list[dict[str, Any]]:
    if hasattr(user_data, "as_bytes"):  # moto keeps user data as its Base64EncodedString
        user_data = user_data.as_bytes().decode("ascii")
    try:
        raw = base64.b64decode(str(user_data), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise NodeConfigError(f"user data is not base64: {exc}") from exc
    text = raw.decode("utf-8", "replace")
    head = text.lstrip()[:200].lower()
    if "mime-version" in head or head.startswith("content-type: multipart"):
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


def root_volume_gib(mappings: Sequence[Mapping[str, Any]] | None, default: int = 20) -> int:
    for mapping in mappings or ():
        if mapping.get("DeviceName") == ROOT_DEVICE and (mapping.get("Ebs") or {}).get("VolumeSize"):
            return int(mapping["Ebs"]["VolumeSize"])
    return default


def node_storage(template_data: Mapping[str, Any] | None, default_root_gib: int = 20) -> NodeStorage:
    """Where a node of this launch template keeps ephemeral storage (raises NodeConfigError like nodeadm)."""
    data = template_data or {}
    return NodeStorage(
        local_storage=local_storage_strategy(data.get("UserData")),
        root_volume_gib=root_volume_gib(data.get("BlockDeviceMappings"), default_root_gib),
    )
