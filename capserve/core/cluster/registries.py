"""The Amazon ECR registry EKS replicates its add-on images to, per region (pure).

From the EKS user guide, "View Amazon container image registries for Amazon EKS add-ons"
(awsdocs/amazon-eks-user-guide, `latest/ug/workloads/add-ons-images.adoc`): nodes pull add-on images
such as the EFA device plugin's from their own region's registry (the node role's
AmazonEC2ContainerRegistryReadOnly policy authenticates them, and an ECR interface endpoint keeps the
pull inside the VPC). Most regions use account 602401143452; opt-in regions have their own.
"""

from __future__ import annotations

EKS_ADDON_REGISTRIES: dict[str, str] = {
    "af-south-1": "877085696533.dkr.ecr.af-south-1.amazonaws.com",
    "ap-east-1": "800184023465.dkr.ecr.ap-east-1.amazonaws.com",
    "ap-northeast-1": "602401143452.dkr.ecr.ap-northeast-1.amazonaws.com",
    "ap-northeast-2": "602401143452.dkr.ecr.ap-northeast-2.amazonaws.com",
    "ap-northeast-3": "602401143452.dkr.ecr.ap-northeast-3.amazonaws.com",
    "ap-south-1": "602401143452.dkr.ecr.ap-south-1.amazonaws.com",
    "ap-south-2": "900889452093.dkr.ecr.ap-south-2.amazonaws.com",
    "ap-southeast-1": "602401143452.dkr.ecr.ap-southeast-1.amazonaws.com",
    "ap-southeast-2": "602401143452.dkr.ecr.ap-southeast-2.amazonaws.com",
    "ap-southeast-3": "296578399912.dkr.ecr.ap-southeast-3.amazonaws.com",
    "ap-southeast-4": "491585149902.dkr.ecr.ap-southeast-4.amazonaws.com",
    "ca-central-1": "602401143452.dkr.ecr.ca-central-1.amazonaws.com",
    "ca-west-1": "761377655185.dkr.ecr.ca-west-1.amazonaws.com",
    "cn-north-1": "918309763551.dkr.ecr.cn-north-1.amazonaws.com.cn",
    "cn-northwest-1": "961992271922.dkr.ecr.cn-northwest-1.amazonaws.com.cn",
    "eu-central-1": "602401143452.dkr.ecr.eu-central-1.amazonaws.com",
    "eu-central-2": "900612956339.dkr.ecr.eu-central-2.amazonaws.com",
    "eu-north-1": "602401143452.dkr.ecr.eu-north-1.amazonaws.com",
    "eu-south-1": "590381155156.dkr.ecr.eu-south-1.amazonaws.com",
    "eu-south-2": "455263428931.dkr.ecr.eu-south-2.amazonaws.com",
    "eu-west-1": "602401143452.dkr.ecr.eu-west-1.amazonaws.com",
    "eu-west-2": "602401143452.dkr.ecr.eu-west-2.amazonaws.com",
    "eu-west-3": "602401143452.dkr.ecr.eu-west-3.amazonaws.com",
    "il-central-1": "066635153087.dkr.ecr.il-central-1.amazonaws.com",
    "me-south-1": "558608220178.dkr.ecr.me-south-1.amazonaws.com",
    "me-central-1": "759879836304.dkr.ecr.me-central-1.amazonaws.com",
    "sa-east-1": "602401143452.dkr.ecr.sa-east-1.amazonaws.com",
    "us-east-1": "602401143452.dkr.ecr.us-east-1.amazonaws.com",
    "us-east-2": "602401143452.dkr.ecr.us-east-2.amazonaws.com",
    "us-gov-east-1": "151742754352.dkr.ecr.us-gov-east-1.amazonaws.com",
    "us-gov-west-1": "013241004608.dkr.ecr.us-gov-west-1.amazonaws.com",
    "us-west-1": "602401143452.dkr.ecr.us-west-1.amazonaws.com",
    "us-west-2": "602401143452.dkr.ecr.us-west-2.amazonaws.com",
}
# The registry the upstream charts default to (aws/eks-charts values.yaml), for a region the table lacks.
DEFAULT_REGION = "us-west-2"


def eks_addon_registry(region: str | None) -> str:
    """The registry host for ``region``; the charts' default (us-west-2, pulled across regions) when unknown."""
    return EKS_ADDON_REGISTRIES.get(region or DEFAULT_REGION, EKS_ADDON_REGISTRIES[DEFAULT_REGION])
