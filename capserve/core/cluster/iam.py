"""IAM roles bring-up needs: the EKS cluster role, the GPU node role, the HyperPod execution role.

Trust policies and AWS-managed policy names come from the EKS user guide ("Amazon EKS cluster IAM
role", "Amazon EKS node IAM role"; the node role also gets AmazonSSMManagedInstanceCore, so a node that
does not join can be inspected with Session Manager) and the SageMaker HyperPod guide ("IAM role for
SageMaker HyperPod").
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from capserve.core.cluster.naming import ClusterNames, campaign_tags, tag_list


class RoleSpec(BaseModel):
    """One role: who may assume it, and which AWS-managed policies it carries."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=64, description="IAM role name.")
    component: str = Field(min_length=1, max_length=64, description="What the role is for (the component tag).")
    service: str = Field(min_length=1, max_length=128, description="Service principal allowed to assume the role.")
    managed_policies: tuple[str, ...] = Field(
        min_length=1, max_length=10, description="Names of AWS-managed policies to attach."
    )

    def policy_arns(self, partition: str) -> list[str]:
        return [f"arn:{partition}:iam::aws:policy/{policy}" for policy in self.managed_policies]


def eks_roles(names: ClusterNames) -> list[RoleSpec]:
    return [
        RoleSpec(
            name=names.cluster_role,
            component="eks-cluster-role",
            service="eks.amazonaws.com",
            managed_policies=("AmazonEKSClusterPolicy",),
        ),
        RoleSpec(
            name=names.node_role,
            component="eks-node-role",
            service="ec2.amazonaws.com",
            managed_policies=(
                "AmazonEKSWorkerNodePolicy",
                "AmazonEKS_CNI_Policy",
                "AmazonEC2ContainerRegistryReadOnly",
                # No S3 policy here: the staging and compile-cache Jobs read the weights with the node's role, and
                # it may read only those (WEIGHTS_READ_POLICY, inline, on the campaign's bucket and prefix;
                # docs/iam/README.md §4), not every bucket of the account as AmazonS3ReadOnlyAccess would.
                # Systems Manager (Session Manager): a GPU node that fails to join has no public address
                # and no SSH key; this is the way in to read its nodeadm and kubelet logs. The EKS AL2023
                # AMIs ship amazon-ssm-agent (awslabs/amazon-eks-ami install-worker.sh); the agent needs
                # this policy on the instance role (Systems Manager user guide, "Configure instance
                # permissions required for Systems Manager"). docs/aws-network.md, "Access".
                "AmazonSSMManagedInstanceCore",
            ),
        ),
    ]


def hyperpod_role(names: ClusterNames) -> RoleSpec:
    return RoleSpec(
        name=names.hyperpod_role,
        component="hyperpod-execution-role",
        service="sagemaker.amazonaws.com",
        managed_policies=("AmazonSageMakerClusterInstanceRolePolicy",),
    )


def roles_for(kind: str, names: ClusterNames) -> list[RoleSpec]:
    """EKS needs its two roles in both cases (HyperPod's orchestrator is an EKS cluster)."""
    roles = eks_roles(names)
    if kind == "hyperpod":
        roles.append(hyperpod_role(names))
    return roles


def trust_policy(service: str) -> str:
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}],
        },
        sort_keys=True,
    )


def create_role_request(role: RoleSpec, campaign_id: str) -> dict[str, Any]:
    return {
        "RoleName": role.name,
        "AssumeRolePolicyDocument": trust_policy(role.service),
        "Description": f"capserve {role.component} for campaign {campaign_id}",
        "Tags": tag_list(campaign_tags(campaign_id, role.component, role.name)),
    }


COMPILE_CACHE_POLICY = "capserve-compile-cache"


def compile_cache_policy(partition: str, bucket: str, prefix: str) -> str:
    """Inline policy of the node role: write the compile caches beside the weights, nothing else.

    The node role can already read the weights and the caches (``weights_read_policy``, for the staging and the
    cache restore); the save Jobs also need to upload under ``<prefix>/compile-cache/`` (docs/serving.md §4).
    """
    parts = [p for p in prefix.split("/") if p] + ["compile-cache"]
    resource = f"arn:{partition}:s3:::{bucket}/{'/'.join(parts)}/*"
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": ["s3:PutObject"], "Resource": [resource]}],
        },
        sort_keys=True,
    )


# Inline policies of the HyperPod execution role (docs/hyperpod.md §5). AmazonSageMakerClusterInstanceRolePolicy
# lets it read only buckets named sagemaker-* (its DataRetrievalFromS3BucketPermissions statement), and the
# staging and compile-cache Jobs on HyperPod nodes run as this role (the instance's role, through IMDS).
HYPERPOD_EKS_POLICY = "capserve-hyperpod-eks"
WEIGHTS_READ_POLICY = "capserve-weights-read"

# What the SageMaker developer guide ("IAM role for SageMaker HyperPod", the Amazon EKS orchestrator
# section) lists for the execution role of an EKS-orchestrated cluster: the VPC CNI's network-interface
# calls, ECR image pulls and EKS Pod Identity.
HYPERPOD_EKS_ACTIONS: tuple[str, ...] = (
    "ec2:AssignPrivateIpAddresses",
    "ec2:CreateNetworkInterface",
    "ec2:CreateNetworkInterfacePermission",
    "ec2:DeleteNetworkInterface",
    "ec2:DeleteNetworkInterfacePermission",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeVpcs",
    "ec2:DescribeDhcpOptions",
    "ec2:DescribeSubnets",
    "ec2:DescribeSecurityGroups",
    "ec2:DetachNetworkInterface",
    "ec2:ModifyNetworkInterfaceAttribute",
    "ec2:UnassignPrivateIpAddresses",
    "ecr:BatchGetImage",
    "ecr:GetAuthorizationToken",
    "ecr:GetDownloadUrlForLayer",
    "eks-auth:AssumeRoleForPodIdentity",
)


def _prefix_parts(prefix: str) -> list[str]:
    return [p for p in prefix.split("/") if p]


def hyperpod_eks_policy(partition: str) -> str:
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {"Effect": "Allow", "Action": list(HYPERPOD_EKS_ACTIONS), "Resource": ["*"]},
                {
                    "Effect": "Allow",
                    "Action": ["ec2:CreateTags"],
                    "Resource": [f"arn:{partition}:ec2:*:*:network-interface/*"],
                },
            ],
        },
        sort_keys=True,
    )


def weights_read_policy(partition: str, bucket: str, prefix: str) -> str:
    """Read the weights (and the compile caches beside them) under ``<prefix>/`` of ``bucket``, nothing else.

    ListBucket is on the bucket (S3 authorizes it there); without it a missing key answers 403 instead of
    404 and ``aws s3 sync`` cannot list. Narrower still: an ``s3:prefix`` condition on the statement.
    """
    parts = _prefix_parts(prefix)
    objects = f"arn:{partition}:s3:::{bucket}/{'/'.join(parts)}/*" if parts else f"arn:{partition}:s3:::{bucket}/*"
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": [objects]},
                {"Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": [f"arn:{partition}:s3:::{bucket}"]},
            ],
        },
        sort_keys=True,
    )


def hyperpod_inline_policies(
    partition: str, *, weights_bucket: str | None, weights_prefix: str, compile_cache: bool
) -> dict[str, str]:
    """Name → document of every inline policy the HyperPod execution role carries."""
    policies = {HYPERPOD_EKS_POLICY: hyperpod_eks_policy(partition)}
    if weights_bucket:
        policies[WEIGHTS_READ_POLICY] = weights_read_policy(partition, weights_bucket, weights_prefix)
        if compile_cache:
            policies[COMPILE_CACHE_POLICY] = compile_cache_policy(partition, weights_bucket, weights_prefix)
    return policies
