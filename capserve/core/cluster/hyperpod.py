"""SageMaker HyperPod requests: a cluster orchestrated by our EKS cluster, on the training plan, and
what must exist before it is created (docs/hyperpod.md).

Sources: SageMaker API reference ``CreateCluster`` / ``ClusterInstanceGroupSpecification``
(``TrainingPlanArn``, ``OnStartDeepHealthChecks``, ``LifeCycleConfig``), HyperPod developer guide
("Using training plans with HyperPod", "Deep health checks", "Lifecycle scripts": the S3 bucket
name must start with ``sagemaker-`` for the managed execution policy to read it; "Installing
packages on the Amazon EKS cluster using Helm": the dependencies chart goes on first).

Before CreateCluster (all pure here, done by ``capserve.tasks.cluster.hyperpod``):
- the lifecycle script ``data/hyperpod/on_create.sh`` is uploaded to the campaign's lifecycle bucket
  (``lifecycle_bucket``: its name starts with ``sagemaker-``), which teardown deletes with the campaign;
- the HyperPod dependencies (``dependencies``: the chart's resiliency parts, vendored rendered in
  ``data/hyperpod/dependencies.yaml``) are applied to the EKS cluster.
"""

from __future__ import annotations

import copy
import enum
from functools import cache
from importlib import resources
from typing import Any

import yaml

from capserve.core.cluster.eks import GPU_TAINT, node_labels
from capserve.core.cluster.naming import COMPONENT_TAG, ClusterNames, campaign_tags, tag_list
from capserve.core.cluster.nvme import hugepages_commands
from capserve.core.cluster.settings import BringUpSettings
from capserve.core.lease import Lease
from capserve.core.tags import CAMPAIGN_TAG

# OnStartDeepHealthChecks: GPU/CPU stress (DCGM diagnostics level 4 with extra memory tests) and EFA/NCCL
# connectivity, run before a node is handed over (SageMaker developer guide, "Deep health checks"). They spend
# plan time (TimeFigures.deep_health_checks_s), so only a layout that spans nodes, whose collectives cross
# EFA, asks for them (deep_health_checks).
DEEP_HEALTH_CHECKS = ("InstanceStress", "InstanceConnectivity")


def deep_health_checks(spans_nodes: bool) -> tuple[str, ...]:
    """The instance group's ``OnStartDeepHealthChecks``: both checks for a layout across nodes, none on one node."""
    return DEEP_HEALTH_CHECKS if spans_nodes else ()


class HyperPodStatus(enum.StrEnum):
    """``ClusterStatus`` of DescribeCluster (botocore sagemaker model, shape ClusterStatus)."""

    CREATING = "Creating"
    UPDATING = "Updating"
    SYSTEM_UPDATING = "SystemUpdating"
    ROLLING_BACK = "RollingBack"
    IN_SERVICE = "InService"
    FAILED = "Failed"
    DELETING = "Deleting"

    @property
    def is_terminal(self) -> bool:
        """No further change without a new request: usable, or failed/going away."""
        return self in {HyperPodStatus.IN_SERVICE, HyperPodStatus.FAILED, HyperPodStatus.DELETING}


def sagemaker_instance_type(instance_type: str) -> str:
    """HyperPod spells EC2 types with an ``ml.`` prefix."""
    return instance_type if instance_type.startswith("ml.") else f"ml.{instance_type}"


# The GPU types of capserve's catalog that a HyperPod instance group may have: the SageMaker API reference's
# ``ClusterInstanceType`` enumeration (https://docs.aws.amazon.com/sagemaker/latest/APIReference/
# API_ClusterInstanceGroupSpecification.html, InstanceType), without the ``ml.`` prefix.
# tests/unit/test_rehearsal.py checks it against botocore's service model.
HYPERPOD_GPU_TYPES = frozenset({
    "p4d.24xlarge", "p4de.24xlarge", "p5.4xlarge", "p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge",
    "p6-b200.48xlarge", "p6-b300.48xlarge", "p6e-gb200.36xlarge",
})


LIFECYCLE_COMPONENT = "hyperpod-lifecycle-scripts"
LIFECYCLE_PREFIX = "lifecycle"
HYPERPOD_NAMESPACE = "aws-hyperpod"  # the chart's; "cannot be modified" (SageMaker guide, Helm install)
_IMAGE_PLACEHOLDER = "HEALTH_MONITORING_AGENT_IMAGE"
# Cluster-scoped kinds of the vendored manifests: the chart sets metadata.namespace on one of them
# (the health-monitoring-agent ClusterRoleBinding), which helm's client drops for cluster-scoped objects.
_CLUSTER_SCOPED = frozenset({"Namespace", "ClusterRole", "ClusterRoleBinding"})


def lifecycle_bucket(campaign_id: str, account_id: str) -> str:
    """The campaign's lifecycle-script bucket: ``sagemaker-<campaign>-<account>``.

    It must start with ``sagemaker-`` (ClusterLifeCycleConfig.SourceS3Uri: that is what
    AmazonSageMakerClusterInstanceRolePolicy lets the execution role read); the account makes the
    global name unique. At most 10 + 40 + 1 + 12 = 63 characters, S3's limit (S3 user guide,
    "Bucket naming rules"); the campaign id is a DNS label, so the name is one too.
    """
    return f"sagemaker-{campaign_id}-{account_id}"


def lifecycle_uri(bucket: str) -> str:
    """``SourceS3Uri``: the folder holding the scripts (OnCreate names the entrypoint inside it)."""
    return f"s3://{bucket}/{LIFECYCLE_PREFIX}/"


def split_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/some/folder/`` → (``bucket``, ``some/folder/``)."""
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return bucket, key


def script_key(uri: str, script: str) -> str:
    """The S3 key of the entrypoint script ``script`` under ``SourceS3Uri`` ``uri``."""
    _, folder = split_s3_uri(uri)
    return f"{folder.rstrip('/')}/{script}".lstrip("/")


def lifecycle_bucket_tags(campaign_id: str, bucket: str) -> list[dict[str, str]]:
    """What teardown and the reaper look for: the campaign, and that it is this kind of bucket."""
    return tag_list(campaign_tags(campaign_id, LIFECYCLE_COMPONENT, bucket))


def is_lifecycle_bucket_of(tags: dict[str, str], campaign_id: str) -> bool:
    return tags.get(CAMPAIGN_TAG) == campaign_id and tags.get(COMPONENT_TAG) == LIFECYCLE_COMPONENT


HUGEPAGES_MARKER = "#CAPSERVE_HUGEPAGES"


def on_create_script(*, hugepages_2mi_pages: int = 0) -> bytes:
    """capserve's own lifecycle script (what it does: its header, and docs/hyperpod.md §2).

    ``hugepages_2mi_pages`` > 0 (a layout that spans nodes: ``capserve.core.cluster.efa``) renders the lines
    that pre-allocate them, the same lines the EKS nodes' user data runs (``nvme.hugepages_commands``);
    HyperPod has no launch template, and its lifecycle script runs before the node joins the cluster.
    Deterministic, so a re-run uploads nothing when the layout did not change.
    """
    if hugepages_2mi_pages < 0:
        raise ValueError("hugepages_2mi_pages cannot be negative")
    text = resources.files("capserve.core.cluster").joinpath("data/hyperpod/on_create.sh").read_text(encoding="utf-8")
    if text.count(HUGEPAGES_MARKER + "\n") != 1:
        raise ValueError(f"data/hyperpod/on_create.sh must hold the line {HUGEPAGES_MARKER} exactly once")
    if hugepages_2mi_pages:
        block = (
            "# 2 MiB huge pages for EFA (libfabric): the layout spans nodes.\n"
            + hugepages_commands(hugepages_2mi_pages)
            + f'echo "huge pages: $(cat /proc/sys/vm/nr_hugepages) of {hugepages_2mi_pages} 2 MiB pages allocated"\n'
            + "systemctl is-active --quiet kubelet && echo \"kubelet already running: it reports the pages "
            "only once restarted\"\n"
        )
    else:
        block = "# No huge pages: the layout fits on one node (no EFA traffic).\n"
    return text.replace(HUGEPAGES_MARKER + "\n", block).encode("utf-8")


@cache
def _vendored(name: str) -> str:
    return resources.files("capserve.core.cluster").joinpath(f"data/hyperpod/{name}").read_text(encoding="utf-8")


def health_monitoring_agent_image(region: str) -> str:
    """The chart's image URI for ``region`` (its region → ECR account map; unknown regions use us-east-1)."""
    images = yaml.safe_load(_vendored("health-monitoring-agent-images.yaml"))
    accounts: dict[str, str] = images["accounts"]
    if region not in accounts:
        region = images["fallback_region"]
    return f"{accounts[region]}.dkr.ecr.{region}.amazonaws.com/hyperpod-health-monitoring-agent:{images['tag']}"


def dependencies(region: str, campaign_id: str) -> list[dict[str, Any]]:
    """The HyperPod dependencies to apply to the EKS cluster before CreateCluster (vendored, rendered).

    Each object keeps the chart's content; capserve adds only its campaign label (so the reaper can
    tell whose they are) and the region's health-monitoring-agent image.
    """
    image = health_monitoring_agent_image(region)
    out = []
    for doc in yaml.safe_load_all(_vendored("dependencies.yaml")):
        if not doc:
            continue
        obj = copy.deepcopy(doc)
        metadata = obj.setdefault("metadata", {})
        if obj["kind"] in _CLUSTER_SCOPED:
            metadata.pop("namespace", None)
        metadata.setdefault("labels", {})[CAMPAIGN_TAG] = campaign_id
        for container in ((obj.get("spec") or {}).get("template") or {}).get("spec", {}).get("containers", []):
            if container.get("image") == _IMAGE_PLACEHOLDER:
                container["image"] = image
        out.append(obj)
    return out


def cluster_security_groups(campaign_group: str, eks_cluster_group: str | None) -> list[str]:
    """``VpcConfig.SecurityGroupIds``: the campaign's group and the EKS cluster security group.

    The HyperPod nodes must talk to the control plane and the system nodes (CoreDNS), which EKS puts
    in the cluster security group; that group admits only its own members (EKS user guide, "View
    Amazon EKS security group requirements for clusters").
    """
    groups = [campaign_group]
    if eks_cluster_group and eks_cluster_group != campaign_group:
        groups.append(eks_cluster_group)
    return groups


def cluster_request(
    names: ClusterNames,
    lease: Lease,
    settings: BringUpSettings,
    *,
    eks_cluster_arn: str,
    execution_role_arn: str,
    subnet_id: str,
    security_group_ids: list[str],
    lifecycle_uri: str,
    spans_nodes: bool,
) -> dict[str, Any]:
    checks = deep_health_checks(spans_nodes)
    return {
        "ClusterName": names.hyperpod_cluster,
        "InstanceGroups": [
            {
                "InstanceGroupName": names.hyperpod_instance_group,
                "InstanceType": sagemaker_instance_type(lease.instance_type),
                "InstanceCount": lease.instance_count,
                "LifeCycleConfig": {"SourceS3Uri": lifecycle_uri, "OnCreate": settings.hyperpod_on_create_script},
                "ExecutionRole": execution_role_arn,
                "ThreadsPerCore": settings.hyperpod_threads_per_core,
                "InstanceStorageConfigs": [{"EbsVolumeConfig": {"VolumeSizeInGB": settings.hyperpod_root_volume_gb}}],
                **({"OnStartDeepHealthChecks": list(checks)} if checks else {}),
                # On-demand (a rehearsal): no plan, SageMaker's on-demand pool (HyperPod guide, "Capacity requests").
                **({} if lease.on_demand else {"TrainingPlanArn": lease.reservation_id}),
                # The same labels and taint as an EKS node group's, so later stages select nodes alike.
                "KubernetesConfig": {
                    "Labels": node_labels(names.campaign_id),
                    "Taints": [{"Key": GPU_TAINT["key"], "Value": GPU_TAINT["value"], "Effect": "NoSchedule"}],
                },
            }
        ],
        "VpcConfig": {"SecurityGroupIds": list(security_group_ids), "Subnets": [subnet_id]},
        "Orchestrator": {"Eks": {"ClusterArn": eks_cluster_arn}},
        # Replace nodes that fail health checks instead of leaving them cordoned.
        "NodeRecovery": "Automatic",
        "Tags": tag_list(campaign_tags(names.campaign_id, "hyperpod-cluster", names.hyperpod_cluster)),
    }
