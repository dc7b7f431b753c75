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


# --- The interface layout, from EC2's own description of the instance type ---------------------------------------
#
# EC2 user guide, "Maximize network bandwidth on Amazon EC2 instances with multiple network cards"
# (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html): the primary interface (card 0,
# device 0) is an ENA interface ("You can't use an EFA-only network interface as the primary network
# interface"); when card 0 supports EFA, an EFA-only interface at card 0, device 1; on every other card, an
# EFA-only interface at device 0. Which card takes which type is ``NetworkInfo.NetworkCards[].InterfaceTypes``
# of DescribeInstanceTypes (p6-b300: card 0 lists only ``interface``), and ``NetworkInfo.EfaInfo
# .MaximumEfaInterfaces`` caps the EFA interfaces (EC2 API reference, NetworkCardInfo, EfaInfo).

ENA = "interface"
EFA_ONLY = "efa-only"
EFA_TYPES = frozenset({"efa", EFA_ONLY})


@dataclass(frozen=True)
class NetworkFacts:
    """What DescribeInstanceTypes says about an instance type's network cards (or the catalog, as a fallback)."""

    instance_type: str
    maximum_network_cards: int
    maximum_efa_interfaces: int
    card_types: tuple[tuple[int, frozenset[str]], ...]  # (NetworkCardIndex, InterfaceTypes) in index order

    def types_on(self, card: int) -> frozenset[str]:
        return next((types for index, types in self.card_types if index == card), frozenset())


@dataclass(frozen=True)
class InterfaceSlot:
    """One interface of the launch template: where it sits and what it is."""

    card: int
    device: int
    interface_type: str


def described_network_facts(described: dict[str, object]) -> NetworkFacts:
    """The facts from one ``InstanceTypes[]`` entry of DescribeInstanceTypes."""
    network = described.get("NetworkInfo")
    if not isinstance(network, dict):
        raise ValueError(f"DescribeInstanceTypes gave no NetworkInfo for {described.get('InstanceType')}")
    cards = network.get("NetworkCards") or []
    efa = network.get("EfaInfo") or {}
    card_types = tuple(
        sorted((int(card["NetworkCardIndex"]), frozenset(card.get("InterfaceTypes") or [ENA])) for card in cards)
    )
    return NetworkFacts(
        instance_type=str(described.get("InstanceType")),
        maximum_network_cards=int(network.get("MaximumNetworkCards") or len(card_types) or 1),
        maximum_efa_interfaces=int(efa.get("MaximumEfaInterfaces") or 0) if network.get("EfaSupported") else 0,
        card_types=card_types,
    )


def catalog_network_facts(instance: InstanceType) -> NetworkFacts:
    """The same facts from the catalog (what the plan uses before any AWS call)."""
    return NetworkFacts(
        instance_type=instance.name,
        maximum_network_cards=len(instance.network_cards),
        maximum_efa_interfaces=len(instance.efa_card_indices),
        card_types=tuple(
            (card.index, frozenset({ENA, "efa", EFA_ONLY}) if card.efa else frozenset({ENA}))
            for card in instance.network_cards
        ),
    )


def interface_layout(facts: NetworkFacts, *, uses_efa: bool) -> tuple[InterfaceSlot, ...]:
    """The layout the EC2 user guide recommends; only the card-0 ENA interface when the layout uses no EFA."""
    slots = [InterfaceSlot(card=0, device=0, interface_type=ENA)]
    if not uses_efa:
        return tuple(slots)
    for card, types in facts.card_types:
        if len(slots) - 1 >= facts.maximum_efa_interfaces or card >= facts.maximum_network_cards:
            break
        if EFA_ONLY in types:
            slots.append(InterfaceSlot(card=card, device=1 if card == 0 else 0, interface_type=EFA_ONLY))
    return tuple(slots)


def layout_problems(facts: NetworkFacts, interfaces: list[dict[str, object]]) -> list[str]:
    """Why EC2 refuses to launch ``interfaces`` (a launch template's ``NetworkInterfaces``) on this type.

    The rules (sources above, and the EC2 API reference's InstanceNetworkInterfaceSpecification): a primary
    interface at card 0, device 0, which is not EFA-only; each card below ``MaximumNetworkCards``; each type one
    the card lists in ``InterfaceTypes`` (p6-b300's card 0 takes no EFA: aws-parallelcluster issue 7143); at most
    ``MaximumEfaInterfaces`` EFA interfaces; one interface per (card, device).
    """
    problems: list[str] = []
    seen: set[tuple[int, int]] = set()
    efa = 0
    for interface in interfaces:
        card, device = int(str(interface.get("NetworkCardIndex") or 0)), int(str(interface.get("DeviceIndex") or 0))
        kind = str(interface.get("InterfaceType") or ENA)
        where = f"network card {card}, device {device}"
        if (card, device) in seen:
            problems.append(f"{where}: two interfaces at the same place")
        seen.add((card, device))
        if card >= facts.maximum_network_cards:
            problems.append(f"{where}: {facts.instance_type} has {facts.maximum_network_cards} network card(s)")
        elif kind not in facts.types_on(card):
            problems.append(
                f"{where}: {facts.instance_type}'s card {card} takes {', '.join(sorted(facts.types_on(card)))}, "
                f"not {kind}"
            )
        if (card, device) == (0, 0) and kind == EFA_ONLY:
            problems.append(f"{where}: an EFA-only interface cannot be the primary network interface")
        efa += kind in EFA_TYPES
    if (0, 0) not in seen:
        problems.append("no primary network interface (network card 0, device 0)")
    if efa > facts.maximum_efa_interfaces:
        problems.append(
            f"{efa} EFA interfaces, but {facts.instance_type} takes at most {facts.maximum_efa_interfaces}"
        )
    return problems


def layout_shortfall(facts: NetworkFacts, instance: InstanceType, nodes_per_replica: int) -> str | None:
    """Why the launch template of a plan across nodes would not give its pods the EFA devices they request,
    judged before anything is bought from what DescribeInstanceTypes says now (None: it would)."""
    needs = efa_needs(instance, nodes_per_replica)
    if not needs.used:
        return None
    interfaces = [
        {"NetworkCardIndex": s.card, "DeviceIndex": s.device, "InterfaceType": s.interface_type}
        for s in interface_layout(facts, uses_efa=True)
    ]
    problems = layout_problems(facts, interfaces)
    efa = sum(1 for i in interfaces if i["InterfaceType"] in EFA_TYPES)
    if efa < needs.devices:
        problems.append(
            f"EC2 describes {facts.instance_type} with {efa} EFA interface(s) (EfaInfo.MaximumEfaInterfaces "
            f"{facts.maximum_efa_interfaces}), but each pod of the plan requests {needs.devices} EFA devices"
        )
    if not problems:
        return None
    return (
        f"capacity.instance_type: the network interfaces of {facts.instance_type} for a layout across nodes: "
        f"{'; '.join(problems)}. Choose another instance type or a layout on one node"
    )
