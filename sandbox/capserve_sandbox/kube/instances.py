"""What a node of a given EC2 instance type reports to Kubernetes: capacity and allocatable.

Sources (docs/sandbox-kubelet.md, "Nodes"):
- vCPUs, memory, network interfaces and IPv4 addresses per interface: EC2 DescribeInstanceTypes as
  snapshotted in moto 5.2.5 (``moto/ec2/resources/instance_types.json.gz``); GPU types take GPU and
  EFA counts from ``capserve.core.catalog``. ``tests/sandbox/test_nodes.py`` checks the table below
  against moto's file.
- max pods: the Amazon VPC CNI formula EKS AMIs use (awslabs/amazon-eks-ami ``eni-max-pods.txt``):
  interfaces on network card 0 × (IPv4 addresses per interface − 1) + 2.
- reservations: AL2023 nodeadm's defaults (awslabs/amazon-eks-ami ``nodeadm/internal/kubelet/config.go``):
  kube-reserved CPU 6% of the first core, 1% of the second, 0.5% of the next two, 0.25% of the rest;
  memory 255 MiB + 11 MiB per pod; ephemeral-storage 1 GiB; eviction-hard memory.available 100 MiB
  and nodefs.available 10%.
- huge pages: what the node's boot configuration allocates (``vm.nr_hugepages`` in the launch
  template's user data, read by ``capserve_sandbox.aws_ext.nodeadm.hugepages_2mi``), none otherwise:
  the kubelet reports only pages the kernel pre-allocated (Kubernetes docs, "Manage HugePages"). The
  EKS EFA guide says EFA-driver instances pre-allocate 5,128 pages, but whether the AL2023 NVIDIA AMI
  does so is not documented, so the sandbox does not assume it (capserve sets them itself).
- ephemeral-storage: the root EBS volume (AL2023 EKS AMIs: 20 GiB unless the launch template maps a
  bigger one), or the instance-store NVMe array when nodeadm's ``localStorage.strategy`` is RAID0
  (RAID10: half of it), which bind-mounts /var/lib/kubelet onto the array.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from capserve.core.catalog.hardware import INSTANCE_TYPES

_MIB = 2**20
_GIB = 2**30
DEFAULT_ROOT_GIB = 20


@dataclass(frozen=True)
class CpuType:
    vcpus: int
    memory_mib: int
    card0_interfaces: int
    ipv4_per_interface: int


# System-node types (moto 5.2.5 instance_types.json.gz: VCpuInfo.DefaultVCpus, MemoryInfo.SizeInMiB,
# NetworkInfo.NetworkCards[0].MaximumNetworkInterfaces, NetworkInfo.Ipv4AddressesPerInterface).
CPU_TYPES: dict[str, CpuType] = {
    **{
        f"{family}.{size}": CpuType(vcpus, vcpus * 4096, interfaces, addresses)
        for family in ("m7i", "m6i", "m5")
        for size, vcpus, interfaces, addresses in (
            ("large", 2, 3, 10),
            ("xlarge", 4, 4, 15),
            ("2xlarge", 8, 4, 15),
            ("4xlarge", 16, 8, 30),
        )
    },
    # EKS's default node group type when none is given (moto's too).
    "t3.medium": CpuType(2, 4096, 3, 6),
    "t3.large": CpuType(2, 8192, 3, 12),
}

# GPU types: what the catalog does not carry (same moto file: InstanceStorageInfo.Disks[].Count).
NVME_DISKS: dict[str, int] = {name: 8 for name in INSTANCE_TYPES} | {"p5.4xlarge": 1}
# ... and NetworkCards[0].MaximumNetworkInterfaces, Ipv4AddressesPerInterface.
GPU_NETWORK: dict[str, tuple[int, int]] = {
    "p6-b300.48xlarge": (4, 50),
    "p6-b200.48xlarge": (4, 50),
    "p5en.48xlarge": (4, 50),
    "p5e.48xlarge": (2, 50),
    "p5.48xlarge": (2, 50),
    "p5.4xlarge": (4, 30),
}


@dataclass(frozen=True)
class NodeShape:
    """Capacity and allocatable of one node, as its kubelet reports them (device-plugin resources apart)."""

    instance_type: str
    vcpus: int
    memory_bytes: int
    max_pods: int
    gpus: int
    efa: int
    nvme_bytes: int
    nvme_disks: int
    ephemeral_bytes: int
    hugepages_2mi: int

    def capacity(self) -> dict[str, str]:
        return {
            "cpu": str(self.vcpus),
            "memory": f"{self.memory_bytes // 1024}Ki",
            "pods": str(self.max_pods),
            "ephemeral-storage": f"{self.ephemeral_bytes // 1024}Ki",
            "hugepages-1Gi": "0",
            "hugepages-2Mi": f"{self.hugepages_2mi * 2}Mi",
        }

    def allocatable(self) -> dict[str, str]:
        cpu_m = self.vcpus * 1000 - cpu_reserved_millicores(self.vcpus)
        memory = (
            self.memory_bytes
            - (255 + 11 * self.max_pods) * _MIB  # kube-reserved
            - 100 * _MIB  # eviction-hard memory.available
            - self.hugepages_2mi * 2 * _MIB  # pre-allocated huge pages are not pod memory
        )
        ephemeral = self.ephemeral_bytes - _GIB - self.ephemeral_bytes // 10
        cpu = f"{cpu_m // 1000}" if cpu_m % 1000 == 0 else f"{int(cpu_m)}m"
        return {
            "cpu": cpu,
            "memory": f"{memory // 1024}Ki",
            "pods": str(self.max_pods),
            "ephemeral-storage": str(ephemeral),
            "hugepages-1Gi": "0",
            "hugepages-2Mi": f"{self.hugepages_2mi * 2}Mi",
        }


def cpu_reserved_millicores(vcpus: int) -> int:
    """nodeadm's kube-reserved CPU (rounded down to whole millicores, as it does)."""
    reserved = 0.0
    for core in range(vcpus):
        reserved += 60 if core == 0 else 10 if core == 1 else 5 if core < 4 else 2.5
    return int(reserved)


def max_pods(card0_interfaces: int, ipv4_per_interface: int) -> int:
    return card0_interfaces * (ipv4_per_interface - 1) + 2


def known_instance_type(name: str) -> bool:
    return name in CPU_TYPES or name in INSTANCE_TYPES


def node_shape(
    instance_type: str,
    *,
    local_storage: str | None = None,
    root_volume_gib: int = DEFAULT_ROOT_GIB,
    gpus: int | None = None,
    efa: int | None = None,
    hugepages_2mi: int = 0,
) -> NodeShape:
    """The shape of one node. ``local_storage``: nodeadm's localStorage.strategy ("RAID0", "RAID10", "Mount");
    ``hugepages_2mi``: the 2 MiB huge pages its boot configuration allocates."""
    if instance_type in CPU_TYPES:
        cpu_type = CPU_TYPES[instance_type]
        vcpus, memory, nvme = cpu_type.vcpus, cpu_type.memory_mib * _MIB, 0
        pods = max_pods(cpu_type.card0_interfaces, cpu_type.ipv4_per_interface)
        device_gpus, device_efa = 0, 0
    elif instance_type in INSTANCE_TYPES:
        gpu_type = INSTANCE_TYPES[instance_type]
        vcpus, memory, nvme = gpu_type.vcpus, gpu_type.memory_bytes, gpu_type.local_nvme_bytes
        pods = max_pods(*GPU_NETWORK[instance_type])
        device_gpus, device_efa = gpu_type.gpus_per_node, len(gpu_type.efa_card_indices)
    else:
        known = ", ".join(sorted([*CPU_TYPES, *INSTANCE_TYPES]))
        raise ValueError(f"the sandbox has no node shape for instance type {instance_type!r} (known: {known})")
    gpus = device_gpus if gpus is None else gpus
    efa = device_efa if efa is None else efa
    if local_storage in ("RAID0", "RAID10") and nvme:
        ephemeral = nvme if local_storage == "RAID0" else nvme // 2
    else:
        ephemeral = root_volume_gib * _GIB
    return NodeShape(
        instance_type=instance_type,
        vcpus=vcpus,
        memory_bytes=memory,
        max_pods=pods,
        gpus=gpus,
        efa=efa,
        nvme_bytes=nvme,
        nvme_disks=NVME_DISKS.get(instance_type, 0),
        ephemeral_bytes=ephemeral,
        hugepages_2mi=hugepages_2mi,
    )


def describe(shape: NodeShape) -> dict[str, Any]:
    return {"instance_type": shape.instance_type, "capacity": shape.capacity(), "allocatable": shape.allocatable()}
