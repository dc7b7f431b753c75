"""What the cost plots draw, as data: the reservation's Gantt bars and marks, and the cost waterfall's steps.

Pure, so the figures can be checked without reading pixels; ``capserve/tasks/cost/plots.py`` draws them.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from capserve.core.cost.causes import Cause
from capserve.core.cost.ledger import CostLedger

PAID_ROW = "paid block"


class GanttBar(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    row: str = Field(description="Row label: 'paid block' (the attribution) or a recorded cause.")
    start: AwareDatetime = Field(description="Bar start.")
    end: AwareDatetime = Field(description="Bar end.")
    cause: Cause = Field(description="Colour key.")
    paid: bool = Field(description="False for the part of a recorded interval outside the block.")
    label: str = Field("", description="The interval's label, if any.")


class GanttMark(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    at: AwareDatetime = Field(description="Where the vertical line goes.")
    kind: Literal["block_start", "drain", "aws_termination", "block_end", "scheduled_run"] = Field(
        description="What the line marks."
    )
    label: str = Field(description="Text next to the line.")


def gantt(ledger: CostLedger) -> tuple[list[GanttBar], list[GanttMark]]:
    """The block's attribution as one row, each recorded cause as a row (unpaid parts marked), and the marks."""
    window = ledger.window
    if window is None:
        return [], []
    start, end = window.start, window.end
    bars = [
        GanttBar(
            row=PAID_ROW,
            start=start + timedelta(minutes=s.start_minute),
            end=start + timedelta(minutes=s.end_minute),
            cause=s.cause,
            paid=True,
        )
        for s in ledger.segments
    ]
    for interval in ledger.intervals:
        row = interval.effective_cause.value
        for lo, hi, paid in _split(interval.start, interval.end, start, end):
            bars.append(
                GanttBar(row=row, start=lo, end=hi, cause=interval.effective_cause, paid=paid, label=interval.label)
            )
    marks = [
        GanttMark(at=start, kind="block_start", label="block starts"),
        GanttMark(at=window.drain_at, kind="drain", label="drain"),
        GanttMark(at=window.aws_terminates_at, kind="aws_termination", label="AWS terminates"),
        GanttMark(at=end, kind="block_end", label="block ends"),
    ]
    marks += [GanttMark(at=r.scheduled_at, kind="scheduled_run", label=r.name) for r in ledger.scheduled_runs]
    return bars, marks


def _split(lo: datetime, hi: datetime, start: datetime, end: datetime) -> list[tuple[datetime, datetime, bool]]:
    """[lo, hi) cut at the block's edges, each piece marked paid (inside) or not."""
    pieces = [(lo, min(hi, start), False), (max(lo, start), min(hi, end), True), (max(lo, end), hi, False)]
    return [(a, b, paid) for a, b, paid in pieces if a < b]


class WaterfallStep(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    label: str = Field(description="Bar label.")
    base: float = Field(description="Where the bar starts.")
    height: float = Field(description="Bar height (positive).")
    kind: Literal["paid", "lost", "serving", "other"] = Field(description="Colour key.")
    cause: Cause | None = Field(None, description="The lost cause, for 'lost' steps.")


def waterfall(ledger: CostLedger) -> tuple[str, list[WaterfallStep]]:
    """Fee → each lost cause → serving, in USD (or in GPU-hours when no fee was paid: adopted).

    The steps close exactly: the serving bar's height is the paid bar's minus every loss.
    """
    if ledger.window is None:
        return "USD", []
    in_usd = ledger.upfront_fee > 0
    unit = "USD" if in_usd else "GPU-hours"
    paid = round(ledger.upfront_fee, 2) if in_usd else ledger.paid_gpu_hours
    steps = [WaterfallStep(label="upfront fee" if in_usd else "paid", base=0.0, height=paid, kind="paid")]
    level = paid
    for cause, minutes in ledger.lost_gpu_minutes.items():
        if minutes == 0:
            continue
        amount = ledger.lost_cost[cause] if in_usd else minutes / 60
        level -= amount
        steps.append(WaterfallStep(label=cause.value, base=level, height=amount, kind="lost", cause=cause))
    serving = ledger.serving_cost if in_usd else ledger.serving_gpu_hours
    steps.append(WaterfallStep(label="serving", base=0.0, height=serving, kind="serving"))
    if in_usd and ledger.other_resources_cost > 0:
        steps.append(
            WaterfallStep(label="other resources", base=0.0, height=round(ledger.other_resources_cost, 2), kind="other")
        )
    return unit, steps
