"""Timeouts, poll intervals and limits of the acquire stage, in one bounded place."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class CapacitySettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    poll_initial_seconds: float = Field(
        10, gt=0, le=600, description="First wait between reservation state checks; doubles up to poll_max_seconds."
    )
    poll_max_seconds: float = Field(
        300, gt=0, le=3600,
        description="Longest wait between state checks (DescribeCapacityReservations is rate limited).",
    )
    poll_jitter: float = Field(
        0.25, ge=0, le=1, description="Each wait is shortened by up to this fraction, at random."
    )
    payment_timeout_seconds: float = Field(
        1800, gt=0, le=86_400, description="How long a purchase may stay payment-pending before we give up waiting."
    )
    activation_grace_seconds: float = Field(
        1800, ge=0, le=86_400, description="How long past its start a scheduled reservation may take to turn active."
    )
    max_activation_wait_seconds: float = Field(
        6 * 3600, ge=0, le=14 * 86_400,
        description="Wait for 'active' only if the start is at most this far away; else return the scheduled lease.",
    )
    approval_timeout_seconds: int = Field(
        24 * 3600, ge=1, le=14 * 86_400,
        description="How long a purchase waits for a person before stopping, nothing bought.",
    )
    offer_searches: int = Field(
        3, ge=1, le=10,
        description="Searches for an offer when the chosen one is gone at purchase (bought by another account or "
        "campaign, or withdrawn): each new choice is checked, and approved when it needs approval, as the first.",
    )
    purchase_slot_timeout_seconds: float = Field(
        600, gt=0, le=3600, description="How long to wait for the campaign's purchase slot (another run may hold it)."
    )
    purchase_slot_lease_seconds: int = Field(
        300, ge=60, le=3600, description="Prefect frees a purchase slot held by a dead process after this long."
    )

    @model_validator(mode="after")
    def _ordered(self) -> CapacitySettings:
        if self.poll_initial_seconds > self.poll_max_seconds:
            raise ValueError("poll_initial_seconds must not exceed poll_max_seconds")
        return self
