"""The lease: what the acquire stage obtained, and what every later stage plans around."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from capserve.core.spec import Provider, TeardownSpec

# A rehearsal's capacity (capserve.core.rehearsal): on-demand instances, no reservation, nothing bought.
ON_DEMAND: Literal["on-demand"] = "on-demand"
ON_DEMAND_RESERVATION = "none (on-demand)"


class Lease(BaseModel):
    """A reservation window on specific capacity. ``end`` is the hard end: AWS kills instances at end − 30 min."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    provider: Provider | Literal["on-demand"] = Field(
        description="How the capacity was obtained; 'on-demand' for a rehearsal (no reservation, nothing bought)."
    )
    region: str = Field(min_length=1, description="AWS region of the reservation.")
    availability_zone: str = Field(min_length=1, description="The one AZ the reservation lives in.")
    reservation_id: str = Field(min_length=1, description="Capacity reservation id (cr-…) or training plan ARN.")
    start: AwareDatetime = Field(description="When the capacity becomes usable.")
    end: AwareDatetime = Field(description="When the reservation ends.")
    instance_type: str = Field(min_length=1, description="EC2 instance type (without SageMaker's 'ml.' prefix).")
    instance_count: int = Field(ge=1, le=256, description="Instances reserved.")
    upfront_fee: float = Field(ge=0, description="What was paid (0 when an existing reservation was adopted).")
    currency: Literal["USD"] = Field("USD", description="Currency of upfront_fee.")
    adopted: bool = Field(False, description="True when an existing reservation was found and adopted, not bought.")

    @property
    def on_demand(self) -> bool:
        """A rehearsal's on-demand capacity: its nodes launch with no Capacity Block market options or reservation."""
        return self.provider == ON_DEMAND

    def drain_at(self, teardown: TeardownSpec) -> datetime:
        return teardown.drain_at(self.end)

    def teardown_at(self, teardown: TeardownSpec) -> datetime:
        return teardown.teardown_at(self.end)

    def report_section(self) -> dict[str, object]:
        return {
            "provider": self.provider,
            "region": self.region,
            "availability_zone": self.availability_zone,
            "reservation_id": self.reservation_id,
            "start": self.start.isoformat(),
            "end": self.end.isoformat(),
            "instance_type": self.instance_type,
            "instance_count": self.instance_count,
            "upfront_fee": self.upfront_fee,
            "currency": self.currency,
        }
