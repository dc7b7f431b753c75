"""When a re-run may skip a stage: its inputs are unchanged since it last completed (and its outputs still
verify, which ``capserve.campaign.reuse`` checks per stage with cheap read-only calls).

The inputs digest (``CampaignRecord.inputs_digest``) covers the spec sections a stage reads and the outputs
of the stages it builds on, so any change upstream shows. A skipped stage keeps its record entry as it was
(the time it really ran), so "unchanged since" stays the time the work was done.
"""

from __future__ import annotations

from capserve.core.record import StageEntry
from capserve.core.stages import StageStatus


def unchanged_since(previous: StageEntry | None, digest: str) -> str | None:
    """``"skipped: unchanged since <time>"`` when ``previous`` completed with the same inputs and recorded its
    outputs; None when the stage must run."""
    if previous is None or previous.status is not StageStatus.COMPLETED:
        return None
    if previous.inputs_digest != digest or not previous.outputs or previous.ended_at is None:
        return None
    return f"skipped: unchanged since {previous.ended_at.isoformat(timespec='seconds')}"
