"""A campaign's flow-run logs from the Prefect API (``capserve logs``): the runs named or tagged with the campaign,
their stage subflows included, and the log lines Prefect stored for them, oldest first."""

from __future__ import annotations

import logging
from datetime import datetime
from uuid import UUID

from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    FlowRunFilter,
    FlowRunFilterName,
    FlowRunFilterTags,
    LogFilter,
    LogFilterFlowRunId,
    LogFilterTimestamp,
)
from prefect.client.schemas.sorting import LogSort
from pydantic import BaseModel, ConfigDict, Field

from capserve.core.schedule import campaign_tag

PAGE = 200  # the API's largest page of logs and of flow runs (PREFECT_API_DEFAULT_LIMIT)


class LogLine(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: UUID = Field(description="The log's id (lines at one timestamp are told apart by it).")
    at: datetime = Field(description="When it was logged (wall time).")
    run: str = Field(max_length=512, description="The flow run's name.")
    level: str = Field(max_length=16, description="INFO, WARNING, …")
    message: str = Field(description="The message, as Prefect stored it (already redacted by the run).")


def campaign_runs(campaign_id: str) -> dict[UUID, str]:
    """Flow run id → name for every run of ``campaign_id`` (``campaign-<id>`` or tagged ``capserve.io/campaign``),
    subflows included: the stage runs log what each stage did."""
    tag = campaign_tag(campaign_id)
    with get_client(sync_client=True) as client:
        named = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(name=FlowRunFilterName(like_=f"campaign-{campaign_id}")), limit=PAGE)
        tagged = client.read_flow_runs(flow_run_filter=FlowRunFilter(tags=FlowRunFilterTags(all_=[tag])), limit=PAGE)
    return {r.id: r.name for r in [*named, *tagged] if r.name == f"campaign-{campaign_id}" or tag in (r.tags or [])}


def run_logs(runs: dict[UUID, str], after: datetime | None = None) -> list[LogLine]:
    """Every log line of ``runs`` at or after ``after``, oldest first (read a page at a time)."""
    if not runs:
        return []
    where = LogFilter(flow_run_id=LogFilterFlowRunId(any_=list(runs)),
                      timestamp=LogFilterTimestamp(after_=after) if after is not None else None)
    lines: list[LogLine] = []
    with get_client(sync_client=True) as client:
        while True:
            page = client.read_logs(log_filter=where, limit=PAGE, offset=len(lines), sort=LogSort.TIMESTAMP_ASC)
            lines += [
                LogLine(id=log.id, at=log.timestamp, run=runs.get(log.flow_run_id, "?") if log.flow_run_id else "?",
                        level=logging.getLevelName(log.level), message=log.message)
                for log in page
            ]
            if len(page) < PAGE:
                return lines
