"""When a layout uses EFA, and what it then needs on each node: devices and 2 MiB huge pages (pure).

EFA carries the traffic *between* nodes (NCCL through aws-ofi-nccl/libfabric). A layout whose replica
fits on one node (``nodes_per_replica == 1``, e.g. TP8 on one p6-b300) talks over NVLink only, so it
neither requests EFA devices nor huge pages, and bring-up does not wait for them: an EFA device plugin
that under-reports must not fail bring-up on a paid block for a feature nobody uses (docs/serving.md §5.2).

A multi-node layout requests every EFA device of the node and the huge pages libfabric's EFA provider
registers its buffers in. The EKS user guide ("Run machine learning training on Amazon EKS with Elastic
Fabric Adapter") says instances with the EFA driver "pre-allocate 5128 2MiB Huge Pages" and its NCCL
test requests ``hugepages-2Mi: 5120Mi``. capserve does not rely on the AMI doing it: the GPU nodes' boot
configuration sets ``vm.nr_hugepages`` itself (EKS: the launch template's user data,
``capserve.core.cluster.nvme.gpu_user_data``; HyperPod: the lifecycle script,
``capserve.core.cluster.hyperpod.on_create_script``), and
readiness checks the kubelet reports them (Kubernetes docs, "Manage HugePages": nodes must pre-allocate
huge pages to report them as ``hugepages-<size>`` capacity).
"""

from __future__ import annotations

from dataclasses import dataclass

from capserve.core.catalog.hardware import InstanceType

# The EKS EFA guide's figure for what the EFA driver pre-allocates.
EFA_HUGEPAGES_2MI_PAGES = 5128
HUGEPAGE_2MI_MIB = 2
# What the vLLM pod requests (the EKS EFA guide's NCCL test asks for 5120Mi); the boot config's pages cover it.
EFA_POD_HUGEPAGES_MIB = 5120


@dataclass(frozen=True)
class EfaNeeds:
    """What one GPU node must have for the layout: zero everywhere when the layout does not use EFA."""

    devices: int  # vpc.amazonaws.com/efa the pod requests and readiness requires
    hugepages_2mi_pages: int  # vm.nr_hugepages the node's boot configuration sets
    hugepages_mib: int  # hugepages-2Mi the pod requests and readiness requires

    @property
    def used(self) -> bool:
        return self.devices > 0


NO_EFA = EfaNeeds(devices=0, hugepages_2mi_pages=0, hugepages_mib=0)


def efa_needs(
    instance: InstanceType, nodes_per_replica: int, *, hugepages_mib: int = EFA_POD_HUGEPAGES_MIB
) -> EfaNeeds:
    """EFA devices and huge pages for ``nodes_per_replica`` nodes of ``instance`` per model copy."""
    if nodes_per_replica < 1:
        raise ValueError("nodes_per_replica must be at least 1")
    if nodes_per_replica == 1 or not instance.efa_card_indices:
        return NO_EFA
    if hugepages_mib > EFA_HUGEPAGES_2MI_PAGES * HUGEPAGE_2MI_MIB:
        raise ValueError(
            f"{hugepages_mib} MiB of hugepages-2Mi is more than the {EFA_HUGEPAGES_2MI_PAGES} pages the GPU "
            "nodes allocate at boot"
        )
    return EfaNeeds(
        devices=len(instance.efa_card_indices),
        hugepages_2mi_pages=EFA_HUGEPAGES_2MI_PAGES,
        hugepages_mib=hugepages_mib,
    )
