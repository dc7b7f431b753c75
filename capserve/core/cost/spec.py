"""The campaign spec's ``cost`` section: the utilisation the campaign aims for, and a throughput estimate.

Kept here (not in ``capserve/core/spec.py``) so the cost package imports nothing of the spec;
``CampaignSpec.cost`` is this model.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, model_validator


class CostSpec(BaseModel):
    """What the cost ledger compares against, and what planning before buying assumes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    utilisation_target: StrictFloat = Field(
        0.8,
        ge=0,
        le=1,
        description="Serving GPU-hours ÷ paid GPU-hours the campaign aims for; the report says whether it was met.",
    )
    expected_output_tokens_per_s: StrictFloat | None = Field(
        None,
        gt=0,
        le=1e8,
        description="Output tokens/s the endpoint is expected to sustain within the gates, for the cost per million "
        "tokens shown before buying. Needs throughput_source.",
    )
    throughput_source: str | None = Field(
        None,
        min_length=1,
        max_length=300,
        description="Where expected_output_tokens_per_s comes from (a previous campaign's report, a benchmark).",
    )

    @model_validator(mode="after")
    def _sourced(self) -> CostSpec:
        if (self.expected_output_tokens_per_s is None) != (self.throughput_source is None):
            raise ValueError(
                "give expected_output_tokens_per_s and throughput_source together: an estimate without its source "
                "cannot be weighed"
            )
        return self
