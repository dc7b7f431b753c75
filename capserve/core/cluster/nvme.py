"""The GPU nodes' instance-store NVMe: assembled as one RAID0 array by nodeadm, and checked for room.

AL2023 nodes are configured by ``nodeadm`` from ``NodeConfig`` documents in the instance's user data
(MIME multipart, one ``application/node.eks.aws`` part per document). With
``spec.instance.localStorage.strategy: RAID0`` it builds one array from every local NVMe disk, formats
it, mounts it at ``/mnt/k8s-disks/0`` and bind-mounts the kubelet's and containerd's directories onto
it; without it the disks stay unused and everything lands on the 20 GiB root EBS volume
(docs/serving.md §5.3). A managed node group on an EKS-optimized AMI appends its own NodeConfig (the
cluster's endpoint and CA), so ours only says what differs.

When the layout spans nodes (EFA), the user data carries a second part: a shell script that sets
``vm.nr_hugepages`` (and keeps it in ``/etc/sysctl.d`` for reboots). nodeadm's NodeConfig has no sysctl
field (awslabs/amazon-eks-ami ``nodeadm/doc/api.md``: cluster, containerd, instance, kubelet,
featureGates) and the kubelet does not allocate huge pages, it reports what the kernel holds
(Kubernetes docs, "Manage HugePages"). The script runs in cloud-init's final stage, and nodeadm starts
the kubelet after it (AL2023 ``nodeadm-run.service``: ``After=... cloud-final.service``), so the
kubelet sees the pages at start. EKS merges its part into ours, which must be MIME multipart; shell
script parts are allowed there (EKS user guide, "Customize managed nodes with launch templates").

Pure: the user data is a string the launch template carries; the room check compares numbers the
caller read from the Node objects (``status.capacity["ephemeral-storage"]`` is the size of the
filesystem holding ``/var/lib/kubelet``, which RAID0 moves onto the array).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation

import yaml

from capserve.core.errors import PermanentError

# nodeadm's default localStorage.mountPath is /mnt/k8s-disks/; RAID0 mounts the array at <mountPath>/0.
RAID0_MOUNT = "/mnt/k8s-disks/0"
# HyperPod nodes are not nodeadm nodes: their instance-store NVMe is mounted where the DLAMI mounts it,
# /opt/dlami/nvme, and our lifecycle script (data/hyperpod/on_create.sh) makes sure of it (RAID0 of the
# local disks when nothing is mounted there yet). /opt/sagemaker is the extra EBS volume
# (SageMaker API reference, ClusterEbsVolumeConfig), far too small for weights. docs/hyperpod.md §3.
HYPERPOD_NVME_MOUNT = "/opt/dlami/nvme"
NVME_MOUNTS: dict[str, str] = {"eks": RAID0_MOUNT, "hyperpod": HYPERPOD_NVME_MOUNT}


def nvme_mount(kind: str) -> str:
    """Where a GPU node of ``kind`` ("eks" or "hyperpod") has its instance-store NVMe mounted."""
    try:
        return NVME_MOUNTS[kind]
    except KeyError:
        raise ValueError(f"unknown cluster kind {kind!r} (known: {', '.join(sorted(NVME_MOUNTS))})") from None
NODEADM_CONTENT_TYPE = "application/node.eks.aws"
SHELL_SCRIPT_CONTENT_TYPE = "text/x-shellscript"  # cloud-init runs it (cloud-init docs, "User data formats")
HUGEPAGES_SYSCTL_FILE = "/etc/sysctl.d/90-capserve-efa-hugepages.conf"
_BOUNDARY = "//capserve-nodeadm//"


def nvme_node_config() -> dict[str, object]:
    """The partial NodeConfig: local disks as one RAID0 array (EKS merges in the cluster's own part)."""
    return {
        "apiVersion": "node.eks.aws/v1alpha1",
        "kind": "NodeConfig",
        "spec": {"instance": {"localStorage": {"strategy": "RAID0"}}},
    }


def hugepages_commands(pages: int) -> str:
    """The shell lines that pre-allocate ``pages`` 2 MiB huge pages now and on every boot (the EKS user
    data's script part and the HyperPod lifecycle script both carry them)."""
    return (
        f"echo 'vm.nr_hugepages = {pages}' > {HUGEPAGES_SYSCTL_FILE}\n"
        f"sysctl -w vm.nr_hugepages={pages}\n"
    )


def hugepages_script(pages: int) -> str:
    """The shell script part that pre-allocates ``pages`` 2 MiB huge pages now and on every boot."""
    return (
        "#!/bin/bash\n"
        "# 2 MiB huge pages for EFA (libfabric); before nodeadm starts the kubelet, which reports them.\n"
        "set -eu\n"
        f"{hugepages_commands(pages)}"
    )


def gpu_user_data(*, hugepages_2mi_pages: int = 0) -> str:
    """The launch template's user data, as text: a MIME multipart document with one nodeadm part, plus
    the huge pages script when ``hugepages_2mi_pages`` > 0.

    Deterministic (fixed boundary, fixed key order), so a re-run renders the same bytes and the
    launch template's drift check sees no change.
    """
    if hugepages_2mi_pages < 0:
        raise ValueError("hugepages_2mi_pages cannot be negative")
    document = yaml.safe_dump(nvme_node_config(), sort_keys=False, default_flow_style=False)
    parts = [f"Content-Type: {NODEADM_CONTENT_TYPE}\n\n---\n{document}\n"]
    if hugepages_2mi_pages:
        parts.append(f'Content-Type: {SHELL_SCRIPT_CONTENT_TYPE}; charset="us-ascii"\n\n'
                     f"{hugepages_script(hugepages_2mi_pages)}\n")
    body = "".join(f"--{_BOUNDARY}\n{part}" for part in parts)
    return (
        "MIME-Version: 1.0\n"
        f'Content-Type: multipart/mixed; boundary="{_BOUNDARY}"\n'
        "\n"
        f"{body}"
        f"--{_BOUNDARY}--\n"
    )


def gpu_user_data_base64(*, hugepages_2mi_pages: int = 0) -> str:
    """What ``LaunchTemplateData.UserData`` takes: the text above, base64-encoded (EC2 API reference)."""
    return base64.b64encode(gpu_user_data(hugepages_2mi_pages=hugepages_2mi_pages).encode("utf-8")).decode("ascii")


# Kubernetes resource quantities (apimachinery resource.Quantity): a decimal number, then a binary
# suffix (Ki..Ei), a decimal suffix (n, u, m, k, M, G, T, P, E) or a decimal exponent (e3, E6).
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?\d+)?$")
_SUFFIX = {
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
}


def parse_quantity(value: object) -> int:
    """A Kubernetes quantity (``"28Ti"``, ``"450Gi"``, ``"30000000000k"``, ``"1e12"``) as a whole number.

    Fractions round down (bytes). Anything unreadable raises ValueError: a node whose disk size we
    cannot read must not pass a size check by accident.
    """
    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {value!r}")
    if isinstance(value, int):
        return value
    match = _QUANTITY.match(str(value).strip()) if isinstance(value, str | float) else None
    if match is None:
        raise ValueError(f"not a Kubernetes quantity: {value!r}")
    number, suffix = match.groups()
    try:
        amount = Decimal(number)
        if suffix and suffix[0] in "eE" and suffix not in _SUFFIX:
            amount *= Decimal(10) ** int(suffix[1:])
        elif suffix:
            amount *= _SUFFIX[suffix]
    except InvalidOperation as exc:
        raise ValueError(f"not a Kubernetes quantity: {value!r}") from exc
    return int(amount)


def ephemeral_storage_bytes(node: Mapping[str, object]) -> int:
    """``status.capacity["ephemeral-storage"]`` of a Node object in bytes; 0 when absent or unreadable."""
    status = node.get("status")
    capacity = status.get("capacity") if isinstance(status, Mapping) else None
    raw = capacity.get("ephemeral-storage") if isinstance(capacity, Mapping) else None
    if raw is None:
        return 0
    try:
        return max(parse_quantity(raw), 0)
    except ValueError:
        return 0


def _gb(nbytes: int) -> str:
    return f"{nbytes / 1e9:,.1f} GB"


def check_node_room(
    needs: Mapping[str, int],
    capacity: Mapping[str, int],
    *,
    margin_bytes: int,
    what: str = "weights",
    kind: str = "eks",
) -> None:
    """Refuse, before anything is copied, every node whose disk cannot hold its share plus the margin.

    ``needs`` maps a Kubernetes node name to the bytes it will receive (its share of the weights;
    0 when they live elsewhere), ``capacity`` maps it to its ``ephemeral-storage`` capacity (0 or
    absent: unknown, refused). ``margin_bytes`` covers what else the array holds (compile caches,
    container images, logs). One PermanentError names every short node, what it needs and has.
    ``kind`` ("eks" or "hyperpod") says who puts the kubelet's storage on the NVMe, for the fix.
    """
    short = []
    for node in sorted(needs):
        need = needs[node] + margin_bytes
        have = capacity.get(node, 0)
        if have < need:
            short.append(
                f"{node} needs {need:,} bytes ({_gb(needs[node])} of {what} + {_gb(margin_bytes)} for compile "
                f"caches and images) but its ephemeral-storage is {have:,} bytes ({_gb(have)})"
            )
    if short:
        who = (
            "The HyperPod lifecycle script must mount the instance-store NVMe "
            f"at {HYPERPOD_NVME_MOUNT} and move the kubelet's directory onto it"
            if kind == "hyperpod"
            else "The launch template's user data must set up the instance-store NVMe as RAID0 "
            f"(mounted at {RAID0_MOUNT})"
        )
        raise PermanentError(
            "GPU nodes without room on local disk: "
            + "; ".join(short)
            + f". {who}; on an instance type without enough local NVMe, stage the weights "
            "on FSx (weights.node_target: fsx) or choose a larger instance type"
        )
