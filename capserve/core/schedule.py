"""The teardown scheduled the moment capacity is bought: when it fires, and whether it could be scheduled."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field


class TeardownSchedule(BaseModel):
    """report.json ``"teardown_schedule"``: the one-off teardown run (or why there is none)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    deployment: str = Field(min_length=1, max_length=200, description="The teardown deployment ('flow/name').")
    scheduled_at: AwareDatetime = Field(description="Hard teardown: the lease's end − the spec's margin.")
    flow_run_id: str | None = Field(None, max_length=64, description="The scheduled run; None when none could be.")
    note: str = Field(max_length=1000, description="'scheduled', or why it was not.")
    drain_at: AwareDatetime = Field(description="When serving stops (the lease's end − the drain margin).")
    lease_end: AwareDatetime = Field(description="The reservation's end (AWS terminates instances 30 min before).")

    def report_section(self) -> dict[str, Any]:
        return {
            "scheduled_at": self.scheduled_at.isoformat(),
            "deployment": self.deployment,
            "flow_run_id": self.flow_run_id,
            "note": self.note,
        }

    def markdown(self) -> str:
        return (
            f"Drain at **{_iso(self.drain_at)}**, hard teardown at **{_iso(self.scheduled_at)}** (AWS terminates "
            f"instances at {_iso(self.lease_end)} − 30 min)."
        )


def _iso(moment: datetime) -> str:
    return moment.isoformat()
