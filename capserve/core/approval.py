"""A person's decision, recorded for good in the campaign record and shown in the report."""

from __future__ import annotations

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from capserve.core.stages import Stage


class Approval(BaseModel):
    """A person's decision recorded for good: who, when, about what, and why."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    stage: Stage = Field(description="The stage that asked.")
    subject: str = Field(min_length=1, max_length=512, description="What was decided on (e.g. the offering id).")
    approved: bool = Field(description="The answer.")
    approver: str = Field("", max_length=200, description="Who decided ('' when the form left it empty).")
    note: str = Field("", max_length=2000, description="Why.")
    decided_at: AwareDatetime = Field(description="When.")
