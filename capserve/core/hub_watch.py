"""The Hub watcher's decisions: which campaigns to watch, and whether their branch has moved (docs/events.md §3).

The sha a campaign serves stays the truth: the watcher only says that the branch the spec named now points
elsewhere; an automation decides what to do about it.
"""

from __future__ import annotations

import re
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from capserve.core.record import CampaignRecord
from capserve.core.stages import Stage, StageStatus

_SHA = re.compile(r"^[0-9a-f]{40}$")


class WatchTarget(BaseModel):
    """One running campaign's branch, and the sha it serves."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    campaign_id: str = Field(min_length=1, max_length=64, description="The campaign.")
    repo: str = Field(min_length=3, max_length=200, description="Hub repo 'owner/name'.")
    branch: str = Field(min_length=1, max_length=100, description="The branch (or tag) the spec named.")
    pinned: str = Field(pattern=_SHA.pattern, description="The commit the campaign serves.")
    region: str | None = Field(None, max_length=32, description="The lease's region.")
    reservation_id: str | None = Field(None, max_length=2048, description="The lease's reservation.")


def published_marker_key(campaign_id: str, sha: str) -> str:
    """The records-bucket object that says "revision-published was sent for (campaign, sha)"."""
    return f"capserve/campaigns/{campaign_id}/published/{sha}"


def watch_target(record: CampaignRecord, now: datetime) -> tuple[WatchTarget | None, str]:
    """The campaign's watch target, or None and why it is not watched."""
    spec = record.load_spec()
    if spec is None:
        return None, "no spec in the record"
    if record.lease is None or record.lease.end <= now:
        return None, "no lease, or the lease is over"
    teardown = record.stage(Stage.TEARDOWN)
    if teardown is not None and teardown.status is StageStatus.COMPLETED:
        return None, "torn down"
    branch = spec.model.revision
    if _SHA.match(branch):
        return None, f"pinned to commit {branch}: a commit never moves"
    weights = record.stage(Stage.STAGE_WEIGHTS)
    staged = weights.outputs if weights is not None else {}
    repo, staged_sha = staged.get("repo"), staged.get("revision_sha")
    pinned = record.last_good_rollout.config.revision_sha if record.last_good_rollout else staged_sha
    if not isinstance(repo, str) or not isinstance(pinned, str) or not _SHA.match(pinned):
        return None, "no weights staged yet"
    target = WatchTarget(
        campaign_id=record.campaign_id, repo=repo, branch=branch, pinned=pinned, region=record.lease.region,
        reservation_id=record.lease.reservation_id,
    )
    return target, "running"


def has_moved(target: WatchTarget, head: str) -> bool:
    """True when the branch's head is not the commit the campaign serves."""
    return head != target.pinned
