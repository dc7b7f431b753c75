"""Reservation states with behaviour, and the one normalised view of a reservation.

EC2 capacity reservations (Capacity Blocks): ``payment-pending`` → ``scheduled`` → ``active`` →
``expired``, or ``payment-failed`` (EC2 API reference, CapacityReservation.State; EC2 user guide,
capacity-blocks-using.html). SageMaker training plans report Pending | Scheduled | Active | Expired
| Failed (SageMaker API reference, DescribeTrainingPlan); they map onto the same enum.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from capserve.core.capacity.offers import SAGEMAKER_PREFIX, PurchasableProvider
from capserve.core.capacity.requests import FEE_TAG, OFFERING_TAG
from capserve.core.tags import CAMPAIGN_TAG


class ReservationState(StrEnum):
    PAYMENT_PENDING = "payment-pending"
    PAYMENT_FAILED = "payment-failed"
    PENDING = "pending"
    ASSESSING = "assessing"
    DELAYED = "delayed"
    SCHEDULED = "scheduled"
    ACTIVE = "active"
    EXPIRED = "expired"
    CANCELLING = "cancelling"
    CANCELLED = "cancelled"
    FAILED = "failed"
    UNSUPPORTED = "unsupported"
    UNAVAILABLE = "unavailable"

    @property
    def is_usable(self) -> bool:
        """Instances can be launched into it now."""
        return self is ReservationState.ACTIVE

    @property
    def is_terminal(self) -> bool:
        """It will never become usable (again): waiting on it is pointless."""
        return self in _TERMINAL

    @property
    def is_confirmed(self) -> bool:
        """Paid for and on its way (or there): AWS will deliver it without anything more from us."""
        return self in (ReservationState.SCHEDULED, ReservationState.ACTIVE)

    def failure_hint(self) -> str:
        return _HINTS.get(self, "")


_TERMINAL = frozenset(
    {
        ReservationState.PAYMENT_FAILED,
        ReservationState.EXPIRED,
        ReservationState.CANCELLING,
        ReservationState.CANCELLED,
        ReservationState.FAILED,
        ReservationState.UNSUPPORTED,
    }
)

_HINTS = {
    ReservationState.PAYMENT_FAILED: (
        "AWS could not charge the upfront fee: check the account's payment method, then re-run"
    ),
    ReservationState.EXPIRED: "the reservation is over: buy a new one (remove reservation_id or start a new campaign)",
    ReservationState.CANCELLING: "the reservation is being cancelled: buy a new one",
    ReservationState.CANCELLED: "the reservation was cancelled: buy a new one",
    ReservationState.FAILED: "AWS failed the reservation: buy a new one or contact AWS support",
    ReservationState.UNSUPPORTED: (
        "AWS does not support this reservation configuration: choose another instance type or region"
    ),
}

_TRAINING_PLAN_STATES = {
    "Pending": ReservationState.PAYMENT_PENDING,
    "Scheduled": ReservationState.SCHEDULED,
    "Active": ReservationState.ACTIVE,
    "Expired": ReservationState.EXPIRED,
    "Failed": ReservationState.FAILED,
}


def state_from_training_plan(status: str) -> ReservationState:
    try:
        return _TRAINING_PLAN_STATES[status]
    except KeyError:
        known = ", ".join(_TRAINING_PLAN_STATES)
        raise ValueError(f"unknown training plan status {status!r}; known: {known}") from None


class Reservation(BaseModel):
    """What AWS says about a reservation we own or were given, in one shape for both providers."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    provider: PurchasableProvider = Field(description="Which API it came from.")
    region: str = Field(min_length=1, max_length=32, description="AWS region.")
    reservation_id: str = Field(min_length=1, max_length=2048, description="cr-… id or training plan ARN.")
    availability_zone: str = Field(min_length=1, max_length=32, description="The AZ of the capacity.")
    state: ReservationState = Field(description="State as AWS reports it.")
    instance_type: str = Field(min_length=1, max_length=64, description="EC2 instance type, without 'ml.'.")
    instance_count: int = Field(ge=0, le=256, description="Instances reserved.")
    start: AwareDatetime = Field(description="Start of the reservation window.")
    end: AwareDatetime = Field(description="End of the reservation window.")
    tags: dict[str, str] = Field(default_factory=dict, max_length=50, description="Resource tags (AWS allows 50).")
    upfront_fee: float | None = Field(None, ge=0, description="Fee, when AWS or our purchase tag reports it.")

    @property
    def campaign_id(self) -> str | None:
        return self.tags.get(CAMPAIGN_TAG)

    @property
    def offering_id(self) -> str | None:
        return self.tags.get(OFFERING_TAG)


def _tags(raw: Any) -> dict[str, str]:
    return {str(tag["Key"]): str(tag.get("Value", "")) for tag in raw or []}


def _tag_fee(tags: Mapping[str, str]) -> float | None:
    try:
        return float(tags[FEE_TAG]) if FEE_TAG in tags else None
    except ValueError:
        return None


def _when(value: Any, what: str) -> datetime:
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise ValueError(f"{what}: expected a timezone-aware datetime, got {value!r}")
    return value


def reservation_from_ec2(region: str, raw: Mapping[str, Any]) -> Reservation:
    """Normalise one ``DescribeCapacityReservations.CapacityReservations`` entry."""
    rid = raw["CapacityReservationId"]
    tags = _tags(raw.get("Tags"))
    return Reservation(
        provider="ec2-capacity-block",
        region=region,
        reservation_id=rid,
        availability_zone=raw["AvailabilityZone"],
        state=ReservationState(raw["State"]),
        instance_type=raw["InstanceType"],
        instance_count=int(raw["TotalInstanceCount"]),
        start=_when(raw.get("StartDate"), f"{rid} StartDate"),
        end=_when(raw.get("EndDate"), f"{rid} EndDate"),
        tags=tags,
        upfront_fee=_tag_fee(tags),
    )


def reservation_from_training_plan(region: str, raw: Mapping[str, Any], tags: Mapping[str, str]) -> Reservation:
    """Normalise ``DescribeTrainingPlan`` (its tags come from ``ListTags``)."""
    arn = raw["TrainingPlanArn"]
    summaries = raw.get("ReservedCapacitySummaries") or []
    azs = sorted({s["AvailabilityZone"] for s in summaries if s.get("AvailabilityZone")})
    types = sorted({str(s["InstanceType"]).removeprefix(SAGEMAKER_PREFIX) for s in summaries if s.get("InstanceType")})
    fee = raw.get("UpfrontFee")
    return Reservation(
        provider="sagemaker-training-plan",
        region=region,
        reservation_id=arn,
        availability_zone=",".join(azs) or "unknown",
        state=state_from_training_plan(raw["Status"]),
        instance_type=",".join(types) or "unknown",
        instance_count=int(raw.get("TotalInstanceCount") or 0),
        start=_when(raw.get("StartTime"), f"{arn} StartTime"),
        end=_when(raw.get("EndTime"), f"{arn} EndTime"),
        tags=dict(tags),
        upfront_fee=float(fee) if fee not in (None, "") else _tag_fee(tags),
    )
