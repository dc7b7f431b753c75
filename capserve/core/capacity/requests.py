"""Request builders for the capacity APIs: plain dicts, sent as-is by ``capserve.tasks.capacity``.

Every builder is checked against botocore's service model in tests/aws (the sandbox parses requests
with it), so a renamed or missing parameter fails a test, not a purchase.
"""

from __future__ import annotations

from typing import Any

from capserve.core.capacity.offers import SAGEMAKER_PREFIX, Offer
from capserve.core.spec import CapacitySpec
from capserve.core.tags import CAMPAIGN_TAG

# Written at purchase time so that a run that died between "bought" and "recorded" can still show
# what was paid when it adopts the reservation (DescribeCapacityReservations has no fee field).
OFFERING_TAG = "capserve.io/offering-id"
FEE_TAG = "capserve.io/upfront-fee-usd"

# The platform of a Linux GPU node (EKS AL2023 / Bottlerocket AMIs); PurchaseCapacityBlock requires it.
INSTANCE_PLATFORM = "Linux/UNIX"

# A training plan name is at most 63 characters, [a-zA-Z0-9](-*[a-zA-Z0-9]){0,62} (SageMaker API
# reference, CreateTrainingPlan). Campaign ids are DNS labels of at most 40, so this always fits.
TRAINING_PLAN_PREFIX = "capserve-"


def _window(capacity: CapacitySpec) -> tuple[Any, Any, int]:
    if capacity.earliest_start is None or capacity.latest_end is None or capacity.duration_hours is None:
        raise ValueError(f"provider {capacity.provider!r} needs earliest_start, latest_end and duration_hours")
    return capacity.earliest_start, capacity.latest_end, capacity.duration_hours


def purchase_tags(campaign_id: str, offer: Offer) -> list[dict[str, str]]:
    return [
        {"Key": CAMPAIGN_TAG, "Value": campaign_id},
        {"Key": OFFERING_TAG, "Value": offer.offering_id},
        {"Key": FEE_TAG, "Value": f"{offer.upfront_fee:.2f}"},
    ]


def capacity_block_offerings_request(capacity: CapacitySpec, *, next_token: str | None = None) -> dict[str, Any]:
    """DescribeCapacityBlockOfferings for the spec's type, count, duration and date range."""
    start, end, hours = _window(capacity)
    request: dict[str, Any] = {
        "InstanceType": capacity.instance_type,
        "InstanceCount": capacity.instance_count,
        "CapacityDurationHours": hours,
        "StartDateRange": start,
        "EndDateRange": end,
    }
    if next_token:
        request["NextToken"] = next_token
    return request


def purchase_capacity_block_request(offer: Offer, campaign_id: str, *, dry_run: bool = False) -> dict[str, Any]:
    """PurchaseCapacityBlock, tagged with the campaign: the tag is how a later run finds it (no ClientToken exists)."""
    if offer.provider != "ec2-capacity-block":
        raise ValueError(f"offer {offer.offering_id} is a {offer.provider} offer, not a Capacity Block")
    return {
        "CapacityBlockOfferingId": offer.offering_id,
        "InstancePlatform": INSTANCE_PLATFORM,
        "TagSpecifications": [{"ResourceType": "capacity-reservation", "Tags": purchase_tags(campaign_id, offer)}],
        "DryRun": dry_run,
    }


def reservations_by_campaign_request(campaign_id: str, *, next_token: str | None = None) -> dict[str, Any]:
    """DescribeCapacityReservations filtered on the campaign tag (every state, so expired ones are seen too)."""
    request: dict[str, Any] = {"Filters": [{"Name": f"tag:{CAMPAIGN_TAG}", "Values": [campaign_id]}]}
    if next_token:
        request["NextToken"] = next_token
    return request


def reservation_by_id_request(reservation_id: str) -> dict[str, Any]:
    return {"CapacityReservationIds": [reservation_id]}


def training_plan_offerings_request(capacity: CapacitySpec) -> dict[str, Any]:
    """SearchTrainingPlanOfferings for HyperPod (the only target capserve serves on)."""
    start, end, hours = _window(capacity)
    return {
        "InstanceType": SAGEMAKER_PREFIX + capacity.instance_type,
        "InstanceCount": capacity.instance_count,
        "StartTimeAfter": start,
        "EndTimeBefore": end,
        "DurationHours": hours,
        "TargetResources": ["hyperpod-cluster"],
    }


def training_plan_name(campaign_id: str) -> str:
    """Deterministic: a second CreateTrainingPlan for the same campaign is refused by AWS, never a second plan."""
    return TRAINING_PLAN_PREFIX + campaign_id


def create_training_plan_request(offer: Offer, campaign_id: str) -> dict[str, Any]:
    if offer.provider != "sagemaker-training-plan":
        raise ValueError(f"offer {offer.offering_id} is a {offer.provider} offer, not a training plan")
    return {
        "TrainingPlanName": training_plan_name(campaign_id),
        "TrainingPlanOfferingId": offer.offering_id,
        "Tags": purchase_tags(campaign_id, offer),
    }


def describe_training_plan_request(name: str) -> dict[str, Any]:
    return {"TrainingPlanName": name}


def training_plan_name_from_arn(arn: str) -> str:
    """``arn:aws:sagemaker:<region>:<account>:training-plan/<name>`` → ``<name>``."""
    _, _, name = arn.rpartition("training-plan/")
    if not name:
        raise ValueError(f"{arn!r} is not a training plan ARN")
    return name


def region_from_arn(arn: str) -> str:
    parts = arn.split(":")
    if len(parts) < 6 or not parts[3]:
        raise ValueError(f"{arn!r} is not a regional ARN")
    return parts[3]
