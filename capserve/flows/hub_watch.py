"""The Hub watcher (a scheduled deployment): tell Prefect when a running campaign's branch moves on the Hub.

For each campaign record in the region's records bucket that is still running, it resolves the branch the
spec named and, when the head is not the commit the campaign serves, emits
``capserve.model.revision-published`` once per (campaign, head) (docs/events.md §3). It stages and deploys
nothing: the pinned sha stays the truth until an automation acts on the event.
"""

from __future__ import annotations

from datetime import datetime

from prefect import flow, get_run_logger
from prefect.client.schemas.objects import State

from capserve.campaign.announce import now as utc_now
from capserve.core.events import CampaignRefs, revision_published
from capserve.core.hub_watch import has_moved, watch_target
from capserve.tasks.events import emit
from capserve.tasks.hub_watch import list_campaign_records, mark_announced, was_announced
from capserve.tasks.locations import locate_records
from capserve.tasks.maintenance import skipped_without_aws
from capserve.tasks.settings import hub_endpoint_from_environment, settings_from_environment
from capserve.tasks.the_clock import clock
from capserve.tasks.weights.hub import hub_connection, resolve_revision


@flow(name="hub-watcher", validate_parameters=True)
def watch_hub(
    regions: list[str], hub_endpoint: str | None = None, waypoint: datetime | None = None
) -> list[str] | State:
    """Check every running campaign whose records live in one of ``regions`` (their home regions); returns
    ``campaign@sha`` for each revision announced by this run. ``waypoint``: the time on the campaign's clock a
    one-off watch was scheduled for (the clock may hold there until the watch has begun). On a worker
    without AWS credentials (no record can be read): Completed, "skipped"."""
    skipped = skipped_without_aws("hub watcher", "capserve-hub-watcher", [])
    if skipped is not None:
        return skipped
    began = clock().begin_at(waypoint) if waypoint is not None else None
    with clock().working():
        return _watch(regions, hub_endpoint, began)


def _watch(regions: list[str], hub_endpoint: str | None, began: datetime | None) -> list[str]:
    logger = get_run_logger()
    settings = settings_from_environment()
    conn = hub_connection(hub_endpoint or hub_endpoint_from_environment(), None, settings.weights.hub_timeout_seconds)
    at = began or clock().now()
    announced: list[str] = []
    for region in dict.fromkeys(regions):
        location = locate_records(region, settings.records)
        for record in list_campaign_records(location):
            target, why = watch_target(record, at)
            if target is None:
                logger.info("hub watcher: %s not watched (%s)", record.campaign_id, why)
                continue
            head = resolve_revision(conn, target.repo, target.branch)
            if not has_moved(target, head) or was_announced(location, target.campaign_id, head):
                continue
            refs = CampaignRefs(
                campaign_id=target.campaign_id, region=target.region, reservation_id=target.reservation_id
            )
            emit(revision_published(
                refs, repo=target.repo, branch=target.branch, pinned=target.pinned, head=head, occurred=utc_now(),
                home_region=region,
            ))
            mark_announced(location, target.campaign_id, head)
            logger.info("hub watcher: %s@%s moved %s → %s", target.repo, target.branch, target.pinned[:12],
                        head[:12])
            announced.append(f"{target.campaign_id}@{head}")
    return announced
