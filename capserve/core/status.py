"""``capserve status``: what a campaign's record says, what Prefect ran, and what exists in AWS and Kubernetes.

Pure: the tasks (``capserve.tasks.status``) look, read-only; this module shapes what they found into one
typed answer (``CampaignStatus``: printed as tables, or as JSON with ``--json``). Each part says when it
could not be looked at and why, so "nothing found" is never confused with "could not ask".
"""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from capserve.core.record import CampaignRecord
from capserve.core.stages import Stage, StageStatus


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class StageRow(_Strict):
    stage: Stage = Field(description="The stage.")
    status: str = Field(max_length=32, description="How it last ended, per the record.")
    started_at: AwareDatetime | None = Field(None, description="When it started.")
    ended_at: AwareDatetime | None = Field(None, description="When it ended.")
    inputs_digest: str = Field("", max_length=64, description="Digest of its inputs ('' when not recorded).")
    detail: str = Field("", max_length=4000, description="What happened.")


class RunRow(_Strict):
    name: str = Field(max_length=512, description="Flow run name.")
    flow: str = Field("", max_length=512, description="Flow name, when known.")
    state: str = Field(max_length=64, description="State name (Completed, Failed, Scheduled, …).")
    start: AwareDatetime | None = Field(None, description="Start (or scheduled start) time.")


class ResourceRow(_Strict):
    kind: str = Field(max_length=64, description="What it is (eks-cluster, node, Deployment, reservation, …).")
    name: str = Field(max_length=1024, description="Its name or id.")
    where: str = Field("", max_length=256, description="Region or namespace.")
    state: str = Field("", max_length=256, description="Its state, or why it is kept.")


class Part(_Strict):
    """One place looked at: what was found, or why it could not be looked at."""

    looked: bool = Field(description="False: the place could not be asked (``why`` says why).")
    why: str = Field("", max_length=2000, description="Why it was not looked at, or a note on what was.")
    rows: tuple[ResourceRow, ...] | tuple[RunRow, ...] = Field((), max_length=10_000, description="What was found.")


class CampaignStatus(_Strict):
    campaign_id: str = Field(min_length=1, max_length=64, description="The campaign.")
    record_uri: str = Field(max_length=2048, description="Where its record lives.")
    record_found: bool = Field(description="Whether a record exists there.")
    region: str | None = Field(None, max_length=32, description="The lease's region, when recorded.")
    lease: str = Field("", max_length=512, description="The lease in one line ('' when none is recorded).")
    stages: tuple[StageRow, ...] = Field((), max_length=64, description="Each recorded stage, in campaign order.")
    kept: tuple[ResourceRow, ...] = Field((), max_length=256, description="What teardown kept, and why.")
    prefect: Part = Field(description="The campaign's Prefect flow runs.")
    aws: Part = Field(description="What exists in AWS with the campaign's tag.")
    kubernetes: Part = Field(description="Nodes and labelled workloads of the campaign's cluster.")

    @property
    def exists_anywhere(self) -> bool:
        """Whether anything of the campaign was found (a record, a run, a resource)."""
        return self.record_found or bool(self.prefect.rows or self.aws.rows or self.kubernetes.rows)


def stage_rows(record: CampaignRecord | None) -> tuple[StageRow, ...]:
    """The record's stages in campaign order."""
    if record is None:
        return ()
    return tuple(
        StageRow(
            stage=stage,
            status=entry.status.value,
            started_at=entry.started_at,
            ended_at=entry.ended_at,
            inputs_digest=entry.inputs_digest or "",
            detail=entry.detail,
        )
        for stage in Stage
        if (entry := record.stage(stage)) is not None
    )


def lease_line(record: CampaignRecord | None) -> str:
    if record is None or record.lease is None:
        return ""
    lease = record.lease
    how = "adopted" if lease.adopted else f"bought for ${lease.upfront_fee:,.2f}"
    return (
        f"{lease.reservation_id} in {lease.availability_zone}: {lease.instance_count} × {lease.instance_type}, "
        f"{lease.start.isoformat()} → {lease.end.isoformat()} ({how})"
    )


def kept_rows(record: CampaignRecord | None) -> tuple[ResourceRow, ...]:
    if record is None:
        return ()
    return tuple(_kept_row(k.resource, k.why) for k in record.kept)


def _kept_row(resource: str, why: str) -> ResourceRow:
    kind, _, name = resource.partition("/")
    return ResourceRow(kind=kind, name=name or resource, state=f"kept: {why}"[:256])


def resource_row(label: str, where: str, state: str = "") -> ResourceRow:
    """A row from a teardown label ('kind/name (id)')."""
    kind, _, name = label.partition("/")
    return ResourceRow(kind=kind, name=name or label, where=where, state=state)


def short_digest(digest: str) -> str:
    return digest[:12]


class CampaignLine(_Strict):
    """One campaign in ``capserve status`` without a name: what its record says now."""

    campaign_id: str = Field(max_length=64, description="The campaign.")
    home_region: str = Field(max_length=32, description="Where its record lives.")
    block: str = Field(max_length=256, description="Its block: zone, start → end (UTC), or that none is bought.")
    state: str = Field(max_length=256, description="Where it is, from its stages and the block's times.")
    spent_usd: float = Field(ge=0, description="Paid so far: the block's upfront fee (0 for an adopted block).")


def campaign_line(record: CampaignRecord, home_region: str, now: datetime) -> CampaignLine:
    """``record`` as one line of the campaign list, judged at ``now`` (the campaign's clock)."""
    lease = record.lease
    block = "none bought" if lease is None else (
        f"{lease.availability_zone} {lease.start:%Y-%m-%d %H:%M} → {lease.end:%Y-%m-%d %H:%M} UTC")
    return CampaignLine(campaign_id=record.campaign_id, home_region=home_region, block=block,
                        state=_state(record, now), spent_usd=lease.upfront_fee if lease is not None else 0.0)


def _state(record: CampaignRecord, now: datetime) -> str:
    ended = record.stage(Stage.TEARDOWN)
    if ended is not None and ended.status is StageStatus.COMPLETED:
        return "torn down"
    running = [stage for stage, entry in record.stages.items() if entry.status is StageStatus.RUNNING]
    if running:
        return f"running: {running[-1].value}"
    failed = [stage for stage, entry in record.stages.items() if entry.status is StageStatus.FAILED]
    if failed:
        return f"failed: {failed[-1].value}"
    lease = record.lease
    if lease is None:
        return "no block yet"
    if now < lease.start:
        return f"waiting for the block (starts in {_span(lease.start - now)})"
    if now < lease.end:
        serving = record.last_good_rollout is not None
        return f"{'serving' if serving else 'in its block'} ({_span(lease.end - now)} left)"
    return "block over, not torn down"


def _span(delta: timedelta) -> str:
    minutes = max(0, int(delta.total_seconds() // 60))
    return f"{minutes // 60}h{minutes % 60:02d}m"
