"""When a redeploy may run, judged from the campaign's record (pure).

Apart from ``capserve.core.redeploy`` because the record holds that module's ``RedeployEntry``: these rules read
the record, so in one module the two would import each other.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from capserve.core.record import CampaignRecord
from capserve.core.redeploy import swap_time
from capserve.core.rollout.start_history import StartHistory
from capserve.core.stages import Stage, StageStatus


def refusal(
    record: CampaignRecord, *, now: datetime, has_cluster: bool | None = None, past: StartHistory | None = None
) -> str | None:
    """Why the campaign cannot be redeployed now (None: it can). ``has_cluster``: what AWS says, once asked;
    ``past``: the measured starts of what serves, once read."""
    who = f"campaign {record.campaign_id}"
    spec = record.load_spec()
    if spec is None or record.lease is None:
        return f"{who} has no spec or no lease in its record: run the campaign first (`capserve up`)"
    drain_at = spec.teardown.drain_at(record.lease.end)
    if now >= drain_at:
        return (
            f"{who} is inside its drain window (reservation {record.lease.reservation_id} ends "
            f"{record.lease.end.isoformat()}; drain from {drain_at.isoformat()}, teardown.drain_before_end_minutes = "
            f"{spec.teardown.drain_before_end_minutes}): nothing is redeployed this close to the end"
        )
    for stage, what in ((Stage.TEARDOWN, "torn down"), (Stage.DRAIN, "drained")):
        entry = record.stage(stage)
        if entry is not None and entry.status is StageStatus.COMPLETED:
            return f"{who} has no cluster to redeploy on: it was {what}; run the campaign again to serve"
    brought_up = record.stage(Stage.BRING_UP)
    if brought_up is None or brought_up.status is not StageStatus.COMPLETED or has_cluster is False:
        return f"{who} has no cluster to redeploy on: run the campaign (`capserve up`) to bring one up first"
    good = record.last_good_rollout
    if good is None:
        return f"{who} records no good rollout to roll back to: let the campaign roll out and evaluate first"
    # A swap still under way at the drain point would end the block with nothing evaluated serving.
    swap = swap_time(good.config, past=past)
    if now + timedelta(seconds=swap.total_s) > drain_at:
        left = (drain_at - now).total_seconds() / 60
        return (
            f"{who} has {left:.0f} min left before its drain point ({drain_at.isoformat()}) and a redeploy takes "
            f"{swap.describe()}: it would not finish before the drain; the revision waits for the next block"
        )
    return None


def already_handled(record: CampaignRecord, sha: str) -> str | None:
    """Why a redeploy to ``sha`` has nothing to do (None: it has): it serves already, or it was tried."""
    good = record.last_good_rollout
    if good is not None and good.config.revision_sha == sha:
        return f"campaign {record.campaign_id} already serves revision {sha}"
    tried = [e for e in record.redeploys if e.to_sha == sha]
    if tried:
        return (
            f"campaign {record.campaign_id} already tried revision {sha} ({tried[-1].outcome} at "
            f"{tried[-1].ended_at.isoformat()}): publish a new commit to redeploy"
        )
    return None
