"""EKS requests: the control plane, the capacity-block launch template, the GPU and system node groups.

Sources: EKS user guide "Create a managed node group with Capacity Blocks for ML" (launch template with
``InstanceMarketOptions.MarketType=capacity-block`` and the reservation as ``CapacityReservationTarget``,
node group ``capacityType=CAPACITY_BLOCK``, no ``instanceTypes`` on the node group: the template names
the type); EKS user guide "Run machine learning training on Amazon EKS with Elastic Fabric Adapter"
(EFA interfaces declared in the launch template, no subnet in them: the node group supplies subnets; their
layout is ``capserve.core.cluster.efa.interface_layout``);
EKS API reference ``CreateNodegroup`` (``instanceTypes``, ``amiType``, ``capacityType``, ``labels``,
``taints``) for the system node group.
"""

from __future__ import annotations

from typing import Any

from capserve.core.catalog.hardware import InstanceType
from capserve.core.cluster.efa import NetworkFacts, catalog_network_facts, interface_layout
from capserve.core.cluster.naming import GPU_POOL, POOL_LABEL, SYSTEM_POOL, ClusterNames, campaign_tags, tag_list
from capserve.core.cluster.nvme import gpu_user_data_base64
from capserve.core.lease import Lease
from capserve.core.tags import CAMPAIGN_TAG

# The NVIDIA-accelerated AL2023 AMI family ships the driver, the container toolkit and the EFA
# installer (EKS user guide, "Amazon EKS optimized accelerated Amazon Linux AMIs").
GPU_AMI_TYPE = "AL2023_x86_64_NVIDIA"
# The standard AL2023 AMI for the CPU-only system nodes (EKS API reference, Nodegroup.amiType).
SYSTEM_AMI_TYPE = "AL2023_x86_64_STANDARD"

# The label the NVIDIA device plugin's published Helm chart requires on a GPU node (its default
# nodeAffinity, when Node Feature Discovery is not installed) and the EKS GPU blueprint sets; our
# GPU nodes carry it so that chart, too, finds them (docs/serving.md §5.2).
NVIDIA_GPU_PRESENT_LABEL = "nvidia.com/gpu.present"

# Keep ordinary pods off the GPU nodes; the vLLM pods tolerate this (k8s convention used by the
# NVIDIA device plugin docs and the EKS GPU guides).
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}


def cluster_request(
    names: ClusterNames,
    *,
    kubernetes_version: str,
    role_arn: str,
    subnet_ids: list[str],
    security_group_id: str,
) -> dict[str, Any]:
    return {
        "name": names.eks_cluster,
        "version": kubernetes_version,
        "roleArn": role_arn,
        "resourcesVpcConfig": {
            "subnetIds": subnet_ids,
            "securityGroupIds": [security_group_id],
            "endpointPublicAccess": True,
            "endpointPrivateAccess": True,
        },
        # Access entries (API mode) let the creator in without editing aws-auth, and HyperPod's EKS
        # orchestrator requires API or API_AND_CONFIG_MAP (HyperPod guide, "EKS cluster prerequisites").
        "accessConfig": {"authenticationMode": "API_AND_CONFIG_MAP", "bootstrapClusterCreatorAdminPermissions": True},
        "tags": campaign_tags(names.campaign_id, "eks-cluster", names.eks_cluster),
    }


def node_security_groups(security_group_id: str, cluster_security_group_id: str) -> list[str]:
    """The groups on every GPU interface: the campaign's (EFA's all-traffic self-rule) and EKS's cluster group.

    With groups named in a launch template "Amazon EKS doesn't add the cluster security group" (EKS user
    guide, "Customize managed nodes with launch templates"), and the cluster group admits only itself
    (EKS user guide, "View Amazon EKS security group requirements for clusters"): CoreDNS and the
    controllers on the system nodes carry only it, so without it a GPU pod has no DNS.
    """
    return list(dict.fromkeys([security_group_id, cluster_security_group_id]))


def network_interfaces(
    facts: NetworkFacts, security_group_id: str, *, cluster_security_group_id: str, uses_efa: bool
) -> list[dict[str, Any]]:
    """The interfaces of ``efa.interface_layout`` (EC2 user guide's layout from DescribeInstanceTypes' facts), each
    in the campaign and cluster groups; no subnet in them (the node group supplies it)."""
    groups = node_security_groups(security_group_id, cluster_security_group_id)
    return [
        {
            "NetworkCardIndex": slot.card,
            "DeviceIndex": slot.device,
            "InterfaceType": slot.interface_type,
            "Groups": list(groups),
            "DeleteOnTermination": True,
        }
        for slot in interface_layout(facts, uses_efa=uses_efa)
    ]


def capacity_block_market(lease: Lease) -> dict[str, Any]:
    """The template fields that put the nodes on the Capacity Block; none for a rehearsal's on-demand lease.

    An on-demand launch needs neither: without ``InstanceMarketOptions`` an instance is on-demand, and without a
    ``CapacityReservationSpecification`` it runs in any open reservation or none (EC2 API reference,
    ``RequestLaunchTemplateData``). Everything else in the template is the campaign's (docs/rehearsal.md).
    """
    if lease.on_demand:
        return {}
    return {
        "InstanceMarketOptions": {"MarketType": "capacity-block"},
        "CapacityReservationSpecification": {
            "CapacityReservationTarget": {"CapacityReservationId": lease.reservation_id}
        },
    }


def launch_template_data(
    names: ClusterNames,
    lease: Lease,
    instance: InstanceType,
    security_group_id: str,
    *,
    cluster_security_group_id: str,
    hugepages_2mi_pages: int = 0,
    uses_efa: bool = False,
    facts: NetworkFacts | None = None,
) -> dict[str, Any]:
    """The template's content; compared field by field on re-runs (a new reservation means a new version).

    ``hugepages_2mi_pages``: 2 MiB huge pages the nodes allocate at boot (multi-node EFA layouts,
    ``capserve.core.cluster.efa``); 0 for none. ``uses_efa``: the layout spans nodes, so every EFA card gets an
    interface; otherwise only the card-0 ENA one. ``facts``: DescribeInstanceTypes' (the catalog's when None).
    """
    instance_tags = campaign_tags(names.campaign_id, "gpu-node", names.nodegroup)
    return {
        "InstanceType": instance.name,
        **capacity_block_market(lease),
        "NetworkInterfaces": network_interfaces(
            facts or catalog_network_facts(instance), security_group_id,
            cluster_security_group_id=cluster_security_group_id, uses_efa=uses_efa,
        ),
        # nodeadm assembles the instance-store NVMe into one RAID0 array at /mnt/k8s-disks/0, where
        # the weights and compile caches live (docs/serving.md §5.3; capserve.core.cluster.nvme); and, for
        # multi-node layouts, the huge pages EFA uses (docs/serving.md §5.2).
        "UserData": gpu_user_data_base64(hugepages_2mi_pages=hugepages_2mi_pages),
        # IMDSv2 only; hop limit 2 so pods (one hop further) can still reach it (EKS best practices guide).
        "MetadataOptions": {"HttpTokens": "required", "HttpPutResponseHopLimit": 2},
        "TagSpecifications": [
            {"ResourceType": "instance", "Tags": tag_list(instance_tags)},
            {"ResourceType": "volume", "Tags": tag_list(instance_tags)},
        ],
    }


def launch_template_request(
    names: ClusterNames,
    lease: Lease,
    instance: InstanceType,
    security_group_id: str,
    *,
    cluster_security_group_id: str,
    hugepages_2mi_pages: int = 0,
    uses_efa: bool = False,
    facts: NetworkFacts | None = None,
) -> dict[str, Any]:
    tags = campaign_tags(names.campaign_id, "launch-template", names.launch_template)
    return {
        "LaunchTemplateName": names.launch_template,
        "VersionDescription": f"reservation {lease.reservation_id}",
        "LaunchTemplateData": launch_template_data(
            names, lease, instance, security_group_id, cluster_security_group_id=cluster_security_group_id,
            hugepages_2mi_pages=hugepages_2mi_pages, uses_efa=uses_efa, facts=facts,
        ),
        "TagSpecifications": [{"ResourceType": "launch-template", "Tags": tag_list(tags)}],
    }


# What decides where and how the nodes launch. Tags and metadata options are left out: EC2 may echo
# them back reordered, and a difference there is not worth a new template version.
MATERIAL_TEMPLATE_FIELDS = (
    "InstanceType",
    "InstanceMarketOptions",
    "CapacityReservationSpecification",
    "NetworkInterfaces",
    "UserData",
)


def _comparable(key: str, value: Any) -> Any:
    """A field as compared: interfaces by card and device, each interface's groups as a set (EC2 may echo
    them in another order; a version made before the cluster group was added has one group fewer)."""
    if key != "NetworkInterfaces" or not isinstance(value, list):
        return value
    interfaces = []
    for interface in value:
        entry = dict(interface)
        entry["Groups"] = sorted(str(g) for g in entry.get("Groups") or [])
        interfaces.append(entry)
    return sorted(interfaces, key=lambda i: (int(i.get("NetworkCardIndex") or 0), int(i.get("DeviceIndex") or 0)))


def launch_template_drift(current: dict[str, Any], wanted: dict[str, Any]) -> list[str]:
    """Material template fields whose content differs (the reservation, the interface layout and groups, the type)."""
    return [
        key
        for key in MATERIAL_TEMPLATE_FIELDS
        if _comparable(key, current.get(key)) != _comparable(key, wanted.get(key))
    ]


def launch_template_shape(lease: Lease, instance: InstanceType) -> dict[str, Any]:
    """What a launch template holds besides where and on what it launches (the type, one interface per card, the
    Capacity Block market and reservation, the tags): the part a rehearsal on another type proves for the
    campaign (``capserve.core.rehearsal``). The same for a Capacity Block lease and an on-demand one."""
    names = ClusterNames(campaign_id="shape")
    data = launch_template_data(names, lease, instance, "sg-shape", cluster_security_group_id="sg-cluster")
    placed = {"InstanceType", "NetworkInterfaces", "TagSpecifications", "InstanceMarketOptions",
              "CapacityReservationSpecification"}
    kept = {key: value for key, value in data.items() if key not in placed}
    return {"ami_type": GPU_AMI_TYPE, "gpu_taint": GPU_TAINT, "fields": sorted(kept), **kept}


def interface_security_groups(template_data: dict[str, Any]) -> list[str]:
    """Every security group on the template's interfaces, in first-seen order (the report's cluster section)."""
    groups: list[str] = []
    for interface in template_data.get("NetworkInterfaces") or []:
        groups += [str(g) for g in interface.get("Groups") or []]
    return list(dict.fromkeys(groups))


def node_labels(campaign_id: str) -> dict[str, str]:
    """The labels every GPU node carries (EKS node group or HyperPod instance group alike).

    ``capserve.io/pool=gpu`` and the campaign select our GPU nodes (readiness, device plugins, vLLM);
    ``nvidia.com/gpu.present=true`` is what the upstream NVIDIA device plugin chart looks for.
    """
    return {CAMPAIGN_TAG: campaign_id, POOL_LABEL: GPU_POOL, NVIDIA_GPU_PRESENT_LABEL: "true"}


def gpu_pool_selector(campaign_id: str) -> dict[str, str]:
    """The nodeSelector of everything that must run on this campaign's GPU nodes."""
    return {CAMPAIGN_TAG: campaign_id, POOL_LABEL: GPU_POOL}


def system_node_labels(campaign_id: str) -> dict[str, str]:
    """The labels every system node carries; also the controllers' nodeSelector."""
    return {CAMPAIGN_TAG: campaign_id, POOL_LABEL: SYSTEM_POOL}


def nodegroup_request(
    names: ClusterNames,
    lease: Lease,
    *,
    node_role_arn: str,
    subnet_id: str,
    launch_template_id: str,
    launch_template_version: str,
    before_block: bool = False,
) -> dict[str, Any]:
    """A managed node group for the reservation, in the reservation's subnet only.

    ``before_block``: made before the block starts, at ``desiredSize`` 0 (``gpu_scaling``): the EKS user guide lets
    a Capacity Block group exist before its reservation is active as long as it asks for no instance, and scaling
    it at the start leaves only the instances' boot and join on the block (docs/aws-capacity.md §1.5).
    """
    return {
        "clusterName": names.eks_cluster,
        "nodegroupName": names.nodegroup,
        "scalingConfig": gpu_scaling(lease, desired=0 if before_block else lease.instance_count),
        "subnets": [subnet_id],
        "amiType": GPU_AMI_TYPE,
        "nodeRole": node_role_arn,
        # A rehearsal's lease is on-demand: the one other difference from the campaign's node group.
        "capacityType": "ON_DEMAND" if lease.on_demand else "CAPACITY_BLOCK",
        "launchTemplate": {"id": launch_template_id, "version": launch_template_version},
        "labels": node_labels(names.campaign_id),
        "taints": [GPU_TAINT],
        "tags": campaign_tags(names.campaign_id, "nodegroup", names.nodegroup),
    }


def gpu_scaling(lease: Lease, *, desired: int) -> dict[str, int]:
    """The GPU node group's ``scalingConfig``: up to the reservation's count, ``desired`` of them now.

    ``minSize`` 0 always: EKS scales a Capacity Block group to zero before the block ends (EKS user guide,
    Capacity Blocks for managed node groups), and the group made before the block waits at zero.
    """
    return {"minSize": 0, "maxSize": lease.instance_count, "desiredSize": desired}


def system_nodegroup_request(
    names: ClusterNames,
    *,
    node_role_arn: str,
    subnet_ids: list[str],
    instance_type: str,
    node_count: int,
) -> dict[str, Any]:
    """Small on-demand CPU nodes, untainted, for CoreDNS and the add-on controllers.

    Every GPU node is tainted ``nvidia.com/gpu``; CoreDNS (created by EKS) and the LWS and FSx
    controllers tolerate only ``CriticalAddonsOnly``, so without these nodes they stay Pending and
    bring-up times out while the block bills. Fixed size (min = max = desired): nothing here scales.
    Spread over every campaign subnet (two AZs): the system nodes need no reservation's AZ.
    """
    return {
        "clusterName": names.eks_cluster,
        "nodegroupName": names.system_nodegroup,
        "scalingConfig": {"minSize": node_count, "maxSize": node_count, "desiredSize": node_count},
        "subnets": list(subnet_ids),
        "instanceTypes": [instance_type],
        "amiType": SYSTEM_AMI_TYPE,
        "capacityType": "ON_DEMAND",
        "nodeRole": node_role_arn,
        "labels": system_node_labels(names.campaign_id),
        "tags": campaign_tags(names.campaign_id, "system-nodegroup", names.system_nodegroup),
    }
