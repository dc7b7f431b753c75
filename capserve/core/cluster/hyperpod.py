"""SageMaker HyperPod requests: a cluster orchestrated by our EKS cluster, on the training plan.

Sources: SageMaker API reference ``CreateCluster`` / ``ClusterInstanceGroupSpecification``
(``TrainingPlanArn``, ``OnStartDeepHealthChecks``, ``LifeCycleConfig``), HyperPod developer guide
("Using training plans with HyperPod", "Deep health checks", "Lifecycle scripts": the S3 bucket
name must start with ``sagemaker-`` for the managed execution policy to read it).
"""

from __future__ import annotations

import enum
from typing import Any

from capserve.core.cluster.eks import GPU_TAINT, node_labels
from capserve.core.cluster.naming import ClusterNames, campaign_tags, tag_list
from capserve.core.cluster.settings import BringUpSettings
from capserve.core.lease import Lease

# Both checks: GPU/CPU stress and NCCL/EFA connectivity, run before a node is handed over.
DEEP_HEALTH_CHECKS = ("InstanceStress", "InstanceConnectivity")


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


def default_lifecycle_uri(account_id: str, region: str) -> str:
    return f"s3://sagemaker-capserve-{account_id}-{region}/lifecycle/"


def cluster_request(
    names: ClusterNames,
    lease: Lease,
    settings: BringUpSettings,
    *,
    eks_cluster_arn: str,
    execution_role_arn: str,
    subnet_id: str,
    security_group_id: str,
    lifecycle_uri: str,
) -> dict[str, Any]:
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
                "OnStartDeepHealthChecks": list(DEEP_HEALTH_CHECKS),
                "TrainingPlanArn": lease.reservation_id,
                # The same labels and taint as an EKS node group's, so later stages select nodes alike.
                "KubernetesConfig": {
                    "Labels": node_labels(names.campaign_id),
                    "Taints": [{"Key": GPU_TAINT["key"], "Value": GPU_TAINT["value"], "Effect": "NoSchedule"}],
                },
            }
        ],
        "VpcConfig": {"SecurityGroupIds": [security_group_id], "Subnets": [subnet_id]},
        "Orchestrator": {"Eks": {"ClusterArn": eks_cluster_arn}},
        # Replace nodes that fail health checks instead of leaving them cordoned.
        "NodeRecovery": "Automatic",
        "Tags": tag_list(campaign_tags(names.campaign_id, "hyperpod-cluster", names.hyperpod_cluster)),
    }
