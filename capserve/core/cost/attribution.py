"""Give every minute of the paid block exactly one cause.

Instants become whole minutes counted from the block's start, rounded to the nearest minute (half a
minute rounds up), so every figure the ledger reports is a whole number of minutes and
paid = serving + Σ lost holds exactly. Intervals are clipped to the block: time outside it is not paid
GPU time (it is counted separately, for the reader). Overlaps go to the cause with the higher
precedence (``capserve/core/cost/causes.py``); minutes no interval claims become
``waiting_for_bring_up`` before the first recorded minute and ``idle`` after it. The drain margin and
AWS's termination window are added from the block window itself, whatever was recorded.
"""

from __future__ import annotations

import math
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from capserve.core.cost.causes import Cause
from capserve.core.cost.inputs import BlockWindow, Interval


class Segment(BaseModel):
    """A run of consecutive block minutes with one cause; minutes are counted from the block's start."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cause: Cause = Field(description="The cause that holds these minutes.")
    start_minute: int = Field(ge=0, le=10**7, description="First minute (inclusive), from the block's start.")
    end_minute: int = Field(ge=0, le=10**7, description="Last minute (exclusive).")

    @property
    def minutes(self) -> int:
        return self.end_minute - self.start_minute


class Attribution(BaseModel):
    """The block's minutes, each with one cause, and what was recorded outside the block."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    block_minutes: int = Field(ge=0, le=10**7, description="Minutes in the block.")
    segments: list[Segment] = Field(description="Consecutive, covering minute 0 to block_minutes exactly once.")
    outside_block_minutes: dict[Cause, int] = Field(
        description="Wall minutes recorded before the block's start or after its end, by cause (not paid GPU time)."
    )

    def minutes_by_cause(self) -> dict[Cause, int]:
        totals = dict.fromkeys(Cause, 0)
        for segment in self.segments:
            totals[segment.cause] += segment.minutes
        return totals


def minute_of(instant: datetime, origin: datetime) -> int:
    """Whole minutes from ``origin`` to ``instant``, to the nearest minute (a half minute rounds up)."""
    return math.floor((instant - origin).total_seconds() / 60 + 0.5)


_Claim = tuple[int, int, Cause]


def _sweep(claims: list[_Claim], lo: int, hi: int) -> list[tuple[int, int, Cause | None]]:
    """Split [lo, hi) at every claim boundary; each piece goes to the covering claim of highest precedence."""
    cuts = sorted({lo, hi, *(s for s, _, _ in claims if lo < s < hi), *(e for _, e, _ in claims if lo < e < hi)})
    pieces: list[tuple[int, int, Cause | None]] = []
    for a, b in zip(cuts, cuts[1:], strict=False):
        covering = [cause for s, e, cause in claims if s <= a and b <= e]
        pieces.append((a, b, max(covering, key=lambda c: c.precedence) if covering else None))
    return pieces


def attribute(window: BlockWindow, intervals: list[Interval]) -> Attribution:
    """One cause per block minute (module docstring has the rules)."""
    origin = window.start
    total = minute_of(window.end, origin)
    recorded: list[_Claim] = [
        (minute_of(i.start, origin), minute_of(i.end, origin), i.effective_cause) for i in intervals
    ]
    # A stage shorter than half a minute rounds to nothing, but it still happened: the unclaimed minutes
    # after it are idle (paid, nothing running), not a wait for bring-up.
    began = min((max(s, 0) for s, e, _ in recorded if s < total and e >= 0), default=total)
    recorded = [(s, e, c) for s, e, c in recorded if e > s]
    fixed: list[_Claim] = [
        (
            minute_of(window.drain_at, origin),
            minute_of(window.aws_terminates_at, origin),
            Cause.DRAIN_AND_TEARDOWN_MARGIN,
        ),
        (minute_of(window.aws_terminates_at, origin), total, Cause.AWS_TERMINATION),
    ]
    inside = [(max(s, 0), min(e, total), c) for s, e, c in recorded if s < total and e > 0]
    first_recorded = began

    segments: list[Segment] = []
    for a, b, cause in _sweep(inside + [c for c in fixed if c[1] > c[0]], 0, total):
        if cause is None:
            cause = Cause.WAITING_FOR_BRING_UP if a < first_recorded else Cause.IDLE
        if segments and segments[-1].cause is cause and segments[-1].end_minute == a:
            segments[-1] = Segment(cause=cause, start_minute=segments[-1].start_minute, end_minute=b)
        else:
            segments.append(Segment(cause=cause, start_minute=a, end_minute=b))

    outside = dict.fromkeys(Cause, 0)
    if recorded:
        earliest, latest = min(s for s, _, _ in recorded), max(e for _, e, _ in recorded)
        for lo, hi in ((earliest, 0), (total, latest)):
            if lo < hi:
                for a, b, cause in _sweep(recorded, lo, hi):
                    if cause is not None:
                        outside[cause] += b - a
    return Attribution(
        block_minutes=total, segments=segments, outside_block_minutes={c: m for c, m in outside.items() if m}
    )
