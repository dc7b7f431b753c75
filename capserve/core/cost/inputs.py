"""What the ledger reads: the fee, the block, the timeline of what ran, the throughput measured, the rest.

Every field comes from something the campaign already knows (the lease, the report's stages, the
evaluation, bring-up's resources); the wiring fills a ``CostInputs`` and calls ``build_ledger``.
Times are on the campaign's clock.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, model_validator

from capserve.core.cost.causes import Cause
from capserve.core.cost.resources import ResourceUsage

# AWS begins terminating Capacity Block instances 30 minutes before the block ends, and training plan
# instances likewise (docs/cost.md, "The last 30 minutes").
AWS_TERMINATION_LEAD = timedelta(minutes=30)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BlockWindow(_Strict):
    """The paid window: from the block's start to its end, and the two instants inside it that matter."""

    start: AwareDatetime = Field(description="When the reservation starts (billing starts).")
    end: AwareDatetime = Field(description="When the reservation ends.")
    aws_terminates_at: AwareDatetime = Field(description="When AWS starts terminating instances (end − 30 min).")
    drain_at: AwareDatetime = Field(
        description="The campaign's drain point: serving stops here (end − 45 min default)."
    )

    @classmethod
    def for_block(cls, start: datetime, end: datetime, *, drain_before_end: timedelta) -> BlockWindow:
        """A window with AWS's termination at end − 30 min and the drain at ``end − drain_before_end``."""
        return cls(start=start, end=end, aws_terminates_at=end - AWS_TERMINATION_LEAD, drain_at=end - drain_before_end)

    @model_validator(mode="after")
    def _ordered(self) -> BlockWindow:
        if not self.start < self.end:
            raise ValueError(f"the block ends ({self.end.isoformat()}) before it starts ({self.start.isoformat()})")
        if not self.start <= self.aws_terminates_at <= self.end:
            raise ValueError("aws_terminates_at must lie inside the block (AWS terminates at end − 30 min)")
        if not self.start <= self.drain_at <= self.aws_terminates_at:
            raise ValueError(
                f"drain_at ({self.drain_at.isoformat()}) must lie between the block's start and AWS's termination "
                f"({self.aws_terminates_at.isoformat()}): drain before AWS terminates the instances"
            )
        return self


class Interval(_Strict):
    """Something that ran (or waited) from ``start`` to ``end``, and why its GPU time was not serving."""

    cause: Cause = Field(description="The stage or reason this interval stands for.")
    start: AwareDatetime = Field(description="When it began.")
    end: AwareDatetime = Field(description="When it ended.")
    label: str = Field("", max_length=200, description="What a person reads in the timeline (e.g. 'rollout r2').")
    failed: bool = Field(False, description="True when this stage failed: its minutes count as failures_and_rollbacks.")

    @property
    def effective_cause(self) -> Cause:
        return Cause.FAILURES_AND_ROLLBACKS if self.failed else self.cause

    @model_validator(mode="after")
    def _ordered(self) -> Interval:
        if self.end < self.start:
            what = self.label or self.cause.value
            raise ValueError(
                f"interval {what!r} ends ({self.end.isoformat()}) before it starts ({self.start.isoformat()})"
            )
        return self


class ThroughputPoint(_Strict):
    """One load level the evaluation measured."""

    concurrency: int = Field(ge=1, le=1_000_000, description="Streams in flight.")
    output_tokens_per_s: float = Field(ge=0, le=1e9, description="Output tokens per second the endpoint delivered.")
    passed_gates: bool = Field(description="True when this level was judged and passed every gate.")


class ScheduledRunMark(_Strict):
    """A scheduled run drawn on the timeline (bring-up at start, drain, teardown); costs nothing itself."""

    name: str = Field(min_length=1, max_length=200, description="Run name, e.g. 'teardown-kimi'.")
    stage: Literal["prepare_cluster", "bring_up", "drain", "teardown"] = Field(description="Which stage it runs.")
    scheduled_at: AwareDatetime = Field(description="When it was scheduled for.")
    fired_at: AwareDatetime | None = Field(None, description="When it actually started, if it did.")


class CostInputs(_Strict):
    """Everything the ledger needs for one campaign."""

    campaign: str = Field(min_length=1, max_length=64, description="The campaign id.")
    currency: Literal["USD"] = Field("USD", description="Currency of the fee (AWS's CurrencyCode).")
    upfront_fee: float = Field(
        ge=0, le=1e9, description="What AWS charged for the reservation; 0 when adopted or when nothing was bought."
    )
    adopted: bool = Field(
        False, description="True when an existing reservation was adopted: its fee was paid outside this campaign."
    )
    region: str = Field(pattern=r"^[a-z]{2}(-gov)?-[a-z]+-\d$", description="Region of the reservation and resources.")
    window: BlockWindow | None = Field(None, description="The paid window; None when the campaign never got capacity.")
    instance_type: str | None = Field(None, max_length=64, description="GPU instance type of the reservation.")
    instance_count: int = Field(0, ge=0, le=256, description="Instances reserved.")
    gpus_per_instance: int = Field(0, ge=0, le=64, description="GPUs per instance (from the catalog).")
    intervals: list[Interval] = Field(
        default_factory=list, max_length=1000, description="What ran when; may overlap and may lie outside the block."
    )
    throughput: list[ThroughputPoint] = Field(
        default_factory=list, max_length=100, description="Output tokens/s per load level, with the gate outcome."
    )
    resources: list[ResourceUsage] = Field(
        default_factory=list, max_length=100, description="Other resources the campaign ran, and for how long."
    )
    scheduled_runs: list[ScheduledRunMark] = Field(
        default_factory=list, max_length=50, description="Scheduled runs, drawn on the timeline."
    )
    utilisation_target: float = Field(0.8, ge=0, le=1, description="The spec's target for serving ÷ paid GPU-hours.")
    serving_started_by: str = Field(
        "rollout ready → drain point",
        min_length=1,
        max_length=300,
        description="The event that started the serving interval (rollout ready; before the rollout stage existed, "
        "the evaluated endpoint being ready), and what ended it.",
    )
    notes: list[str] = Field(
        default_factory=list,
        max_length=20,
        description="What the wiring must tell a reader about how the timeline was read.",
    )
    projected_after: AwareDatetime | None = Field(
        None,
        description="When the serving run wrote its ledger, if serving is counted past it to the drain point: what "
        "lies after it was a projection then.",
    )
    drained_at: AwareDatetime | None = Field(
        None, description="When the campaign's drain run ended (from the record), once it has: no projection is left."
    )

    @model_validator(mode="before")
    @classmethod
    def _drop_clock_rate(cls, data: object) -> object:
        """Read inputs a record kept with the clock's rate beside them (a clock's rate is no fact of the block)."""
        if isinstance(data, dict) and "simulated_rate" in data:
            return {key: value for key, value in data.items() if key != "simulated_rate"}
        return data

    @property
    def gpus(self) -> int:
        return self.instance_count * self.gpus_per_instance

    def serving_notes(self) -> list[str]:
        """What a reader must know of the serving interval's end: projected to the drain point, or past it."""
        if self.projected_after is None or self.window is None:
            return []
        if self.drained_at is not None:
            return [
                f"Serving is counted until the drain point, {self.window.drain_at:%Y-%m-%d %H:%M} UTC; the drain run "
                f"ended at {self.drained_at:%Y-%m-%d %H:%M} UTC (the campaign record)."
            ]
        return [
            f"Serving after {self.projected_after:%Y-%m-%d %H:%M} UTC is projected: the report was written then, and "
            "the endpoint is expected to serve until the drain point."
        ]

    @model_validator(mode="after")
    def _capacity_consistent(self) -> CostInputs:
        if self.window is None:
            if self.upfront_fee:
                raise ValueError("upfront_fee is set but there is no window: a fee always comes with a block")
            return self
        if self.gpus == 0:
            raise ValueError(
                "a window needs instance_count and gpus_per_instance (from the lease and the catalog) above 0"
            )
        if self.adopted and self.upfront_fee:
            raise ValueError("an adopted reservation was paid outside this campaign: its upfront_fee here is 0")
        return self
