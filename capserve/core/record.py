"""The campaign record: the small durable document later stages and later runs read.

Kept outside the process (a JSON document in the campaign's S3 bucket, written with conditional
writes: see capserve/tasks/record_store.py) because Prefect Variables hold 5,000 characters with
last-writer-wins and cache records only prove a task returned once. The cloud's tags stay the
source of truth for what exists; the record says what a run decided and paid.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from capserve.core.lease import Lease
from capserve.core.stages import Stage, StageStatus

RECORD_SCHEMA_VERSION: Literal[1] = 1


def record_key(campaign_id: str) -> str:
    """Where a campaign's record lives in its bucket."""
    return f"capserve/campaigns/{campaign_id}/record.json"


class StageOutcome(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    status: StageStatus = Field(description="How the stage ended.")
    finished_at: AwareDatetime = Field(description="When it ended.")
    detail: str = Field("", max_length=2000, description="One line: what happened or why it stopped.")


class CampaignRecord(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1] = Field(RECORD_SCHEMA_VERSION, description="Bumped on incompatible changes.")
    campaign_id: str = Field(min_length=1, max_length=64, description="The campaign this record belongs to.")
    lease: Lease | None = Field(None, description="The capacity the acquire stage obtained.")
    offering_id: str | None = Field(None, max_length=512, description="The offering bought, when we bought it.")
    stages: dict[Stage, StageOutcome] = Field(
        default_factory=dict, max_length=64, description="Stage → how it last ended."
    )
    updated_at: AwareDatetime = Field(description="Last write.")

    @classmethod
    def new(cls, campaign_id: str, now: datetime) -> CampaignRecord:
        return cls(campaign_id=campaign_id, updated_at=now)

    def with_lease(self, lease: Lease, *, offering_id: str | None, now: datetime) -> CampaignRecord:
        return self.model_copy(update={"lease": lease, "offering_id": offering_id, "updated_at": now})

    def with_stage(self, stage: Stage, outcome: StageOutcome) -> CampaignRecord:
        return self.model_copy(update={"stages": {**self.stages, stage: outcome}, "updated_at": outcome.finished_at})
