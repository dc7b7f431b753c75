"""Lifecycle events from the campaign's stages: one call per fact, sent to Prefect and kept in the report.

A stage announces what it achieved in one line, e.g.
``announce(ctx, cluster_ready(about(ctx), cluster, occurred=now()))``; the builders are in
``capserve.core.events`` and the sending in ``capserve.tasks.events`` (docs/events.md §1).
"""

from __future__ import annotations

from datetime import datetime

from capserve.campaign.context import CampaignContext
from capserve.core.errors import CapserveError
from capserve.core.events import CampaignRefs, CapserveEvent
from capserve.tasks.aws_events import converge_capacity_events
from capserve.tasks.events import emit
from capserve.tasks.run_log import run_logger
from capserve.tasks.the_clock import clock


def about(ctx: CampaignContext) -> CampaignRefs:
    """What the campaign's events point at so far: its reservation, cluster and model revision."""
    lease, cluster, weights = ctx.lease, ctx.report.cluster, ctx.report.weights
    return CampaignRefs(
        campaign_id=ctx.spec.campaign_id,
        reservation_id=lease.reservation_id if lease else None,
        region=cluster.region if cluster else (lease.region if lease else None),
        cluster=cluster.name if cluster else None,
        repo=weights.repo if weights else None,
        revision_sha=weights.revision_sha if weights else None,
    )


def announce(ctx: CampaignContext, event: CapserveEvent) -> None:
    """Send ``event`` to Prefect and add it to the report's ``events``."""
    ctx.report.events.append(emit(event))


def recorded(ctx: CampaignContext, event: CapserveEvent) -> None:
    """Add to the report's ``events`` an event a subflow has already sent (the teardown sends its own, whichever
    run tears down): built from the same facts, it is the same event, id included."""
    ctx.report.events.append(event)


def now() -> datetime:
    return clock().now()


def watch_capacity_events(ctx: CampaignContext) -> None:
    """Route AWS's Capacity Block events about the lease to the forwarder's queue (docs/events.md §2).

    Best effort: a campaign whose rule cannot be made (say, no events:PutRule permission) still has its
    scheduled teardown, which comes before the warning, and the reaper. Training plans send no such events.
    """
    lease = ctx.lease
    if lease is None or not lease.reservation_id.startswith("cr-"):
        return
    try:
        converge_capacity_events(ctx.spec.campaign_id, lease.reservation_id, lease.region)
    except CapserveError as exc:
        run_logger(__name__).warning("no Capacity Block events for campaign %s: %s", ctx.spec.campaign_id, exc)

