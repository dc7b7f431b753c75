"""One shape for every way to buy GPU capacity: an EC2 Capacity Block offering or a training plan offering.

The normalisers read the plain dicts boto3 returns (no SDK import): EC2 reports ``UpfrontFee`` as a
decimal string, SageMaker nests the capacity in ``ReservedCapacityOfferings`` and prefixes instance
types with ``ml.``.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

PurchasableProvider = Literal["ec2-capacity-block", "sagemaker-training-plan"]

SAGEMAKER_PREFIX = "ml."


class Offer(BaseModel):
    """A reservation that could be bought: where, when, how much."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    provider: PurchasableProvider = Field(description="Which API sells it.")
    region: str = Field(min_length=1, max_length=32, description="AWS region of the offering.")
    availability_zone: str = Field(min_length=1, max_length=32, description="The one zone the capacity lives in.")
    zone_type: str | None = Field(
        None,
        max_length=32,
        description="The offering's ZoneType (availability-zone, local-zone, …); None when the API does not say "
        "(training plans): the zone's own type then decides (capserve.core.capacity.zones).",
    )
    offering_id: str = Field(
        min_length=1, max_length=512, description="CapacityBlockOfferingId or TrainingPlanOfferingId."
    )
    start: AwareDatetime = Field(description="When the capacity becomes usable.")
    end: AwareDatetime = Field(description="When the reservation ends (Capacity Blocks: 11:30 UTC).")
    instance_type: str = Field(min_length=1, max_length=64, description="EC2 instance type, without 'ml.'.")
    instance_count: int = Field(ge=1, le=256, description="Instances in the offering.")
    upfront_fee: float = Field(ge=0, le=1e9, description="Price, charged in full at purchase.")
    currency: Literal["USD"] = Field("USD", description="Currency of upfront_fee.")

    @property
    def duration_hours(self) -> float:
        return (self.end - self.start).total_seconds() / 3600

    def fee_per_gpu_hour(self, gpus_per_instance: int) -> float:
        """Upfront fee spread over every GPU-hour of the reservation."""
        gpu_hours = self.duration_hours * self.instance_count * gpus_per_instance
        return self.upfront_fee / gpu_hours if gpu_hours > 0 else float("inf")

    def label(self) -> str:
        return f"{self.region}/{self.availability_zone} {self.start:%Y-%m-%d %H:%M}Z ${self.upfront_fee:,.2f}"


def _fee(raw: Mapping[str, Any], what: str) -> float:
    currency = raw.get("CurrencyCode", "USD")
    if currency != "USD":
        # Budgets and thresholds in the spec are USD; comparing across currencies would be wrong.
        raise ValueError(f"{what}: currency {currency!r} is not USD; capserve budgets are in USD")
    return float(raw["UpfrontFee"])


def _aware(value: Any) -> datetime:
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise ValueError(f"expected a timezone-aware datetime, got {value!r}")
    return value


def offer_from_capacity_block(region: str, raw: Mapping[str, Any]) -> Offer:
    """Normalise one entry of ``DescribeCapacityBlockOfferings.CapacityBlockOfferings``."""
    return Offer(
        provider="ec2-capacity-block",
        region=region,
        availability_zone=raw["AvailabilityZone"],
        zone_type=raw.get("ZoneType"),
        offering_id=raw["CapacityBlockOfferingId"],
        start=_aware(raw["StartDate"]),
        end=_aware(raw["EndDate"]),
        instance_type=raw["InstanceType"],
        instance_count=int(raw["InstanceCount"]),
        upfront_fee=_fee(raw, raw["CapacityBlockOfferingId"]),
    )


def offers_from_training_plan(region: str, raw: Mapping[str, Any]) -> list[Offer]:
    """Normalise one ``TrainingPlanOffering``.

    A training plan offering may bundle several reserved-capacity segments; capserve serves one
    model on one homogeneous group, so only single-segment offerings are usable and others are skipped
    by returning nothing (the ranking then reports the region as having no usable offers).
    """
    segments = raw.get("ReservedCapacityOfferings") or []
    if len(segments) != 1:
        return []
    segment = segments[0]
    return [
        Offer(
            provider="sagemaker-training-plan",
            region=region,
            availability_zone=segment["AvailabilityZone"],
            offering_id=raw["TrainingPlanOfferingId"],
            start=_aware(segment["StartTime"]),
            end=_aware(segment["EndTime"]),
            instance_type=str(segment["InstanceType"]).removeprefix(SAGEMAKER_PREFIX),
            instance_count=int(segment["InstanceCount"]),
            upfront_fee=_fee(raw, raw["TrainingPlanOfferingId"]),
        )
    ]
