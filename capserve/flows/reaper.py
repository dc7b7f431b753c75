"""The reaper (a cron deployment): tear down every capserve campaign whose lease is over or unknown.

Expiry kills instances only: clusters, node groups, NAT gateways, load balancers and file systems stay
and bill (EC2 user guide, capacity-blocks-using.html). The reaper finds capserve-tagged EKS clusters,
node groups, HyperPod clusters and VPCs, reads each campaign's lease end from its reservations, and
tears down the campaigns whose lease is over; with no reservation left to read, only once the
campaign's oldest resource is older than the grace period. Dry run by default (docs/design.md §8: a
teardown of someone's cluster is planned, then applied).
"""

from __future__ import annotations

from prefect import flow, get_run_logger
from prefect.client.schemas.objects import State

from capserve.core.errors import CapserveError, PermanentError
from capserve.core.teardown.reaper import CampaignSighting, ReaperDecision, ReaperResult, decide
from capserve.core.teardown.settings import ReaperSettings
from capserve.flows.teardown import run_teardown
from capserve.tasks.maintenance import regions_of_records, skipped_without_aws
from capserve.tasks.reporting import publish_reaper
from capserve.tasks.settings import settings_from_environment
from capserve.tasks.teardown.inventory import inventory_campaign
from capserve.tasks.teardown.sightings import find_campaigns, lease_end
from capserve.tasks.the_clock import clock


@flow(name="reaper", validate_parameters=True)
def reaper(
    regions: list[str],
    *,
    dry_run: bool = True,
    settings: ReaperSettings | None = None,
) -> ReaperResult | State:
    """Judge every capserve campaign found in ``regions`` and in the regions its records' leases are in, at
    the campaign's clock's now (``capserve.tasks.the_clock``). On a worker without AWS credentials: Completed,
    "skipped".

    A campaign whose teardown fails does not stop the others; the flow raises at the end, naming each.
    """
    logger = get_run_logger()
    everything = settings_from_environment()
    settings = settings or everything.reaper
    now = clock().now()
    skipped = skipped_without_aws("reaper", REAPER_ARTIFACT, ReaperResult(regions=tuple(regions), dry_run=dry_run,
                                                                          now=now))
    if skipped is not None:
        return skipped
    regions = regions_of_records(regions, everything.records)
    decisions: list[ReaperDecision] = []
    failures: list[str] = []
    for region in regions:
        for campaign_id, resources in sorted(find_campaigns(region).items()):
            # A look without the Kubernetes side: a running campaign's cluster is not the reaper's business.
            look = settings.teardown.model_copy(update={"delete_workloads": False})
            found = inventory_campaign(campaign_id, region, kind=None, settings=look)
            end, source = lease_end(campaign_id, region, list(found.reservation_ids))
            sighting = CampaignSighting(
                campaign_id=campaign_id, region=region, resources=tuple(resources), lease_end=end,
                lease_source=source, oldest_created=found.oldest_created,
            )
            reap, why = decide(sighting, now, settings)
            logger.info("reaper: %s in %s: %s (%s)", campaign_id, region, "reap" if reap else "keep", why)
            result = None
            if reap:
                try:
                    result = run_teardown(
                        campaign_id, region, reason="reaper", dry_run=dry_run, kind=None,
                        settings=settings.teardown,
                    )
                except CapserveError as exc:
                    failures.append(f"{campaign_id} in {region}: {exc}")
                    why = f"{why}; teardown failed: {exc}"
            decisions.append(
                ReaperDecision(campaign_id=campaign_id, region=region, reap=reap, why=why[:1000], teardown=result)
            )
    outcome = ReaperResult(regions=tuple(regions), dry_run=dry_run, now=now, decisions=tuple(decisions))
    publish_reaper(outcome.markdown())
    if failures:
        raise ReaperError("reaper: teardown failed for " + " | ".join(failures), outcome)
    return outcome


REAPER_ARTIFACT = "capserve-reaper"


class ReaperError(PermanentError):
    """Some campaigns could not be torn down; ``result`` holds every decision (the others did run)."""

    def __init__(self, message: str, result: ReaperResult) -> None:
        super().__init__(message)
        self.result = result
