"""The teardown stage: back to nothing left running.

Deletes everything that carries this campaign's tag (and only that), in order: workloads → node groups /
HyperPod cluster → leftover instances → launch templates → EKS cluster → IAM roles → network. Each delete
tolerates only its NotFound codes; a second run finds nothing and reports it all as already gone.
Reservations are never deleted (a Capacity Block cannot be cancelled; AWS ends it), and neither is the
weights bucket (verified checkpoints, shared across campaigns): both are reported as kept.

Every teardown, whichever run does it (the campaign's last stage, the scheduled teardown, the orphan teardown,
the reaper, ``capserve down``), sends one ``capserve.teardown.done`` or ``.incomplete`` event saying what was
deleted and why (docs/events.md §1): ``run_teardown`` is the one path they share.

Teardown never relies on flow hooks (docs/prefect.md §2, docs/design.md §9): the campaign runs it as its last
stage, a one-off run is scheduled at the hard teardown point, and the reaper reconciles on a cron.
"""

from __future__ import annotations

from prefect import flow, get_run_logger

from capserve.core.aws_events import rule_name
from capserve.core.cluster.naming import ClusterNames
from capserve.core.errors import CapserveError
from capserve.core.events import CampaignRefs, teardown_finished
from capserve.core.schedule import campaign_tag
from capserve.core.spec import CampaignSpec
from capserve.core.teardown.inventory import ClusterKind, Inventory
from capserve.core.teardown.plan import label, plan_teardown
from capserve.core.teardown.result import KeptResource, TeardownIncompleteError, TeardownReason, TeardownResult
from capserve.core.teardown.settings import TeardownSettings
from capserve.tasks.aws_events import delete_capacity_events
from capserve.tasks.events import emit
from capserve.tasks.reporting import publish_teardown
from capserve.tasks.scheduling import tag_this_run
from capserve.tasks.settings import settings_for
from capserve.tasks.teardown.execute import execute_plan
from capserve.tasks.teardown.inventory import inventory_campaign
from capserve.tasks.the_clock import clock

RESERVATION_KEPT = (
    "reservations cannot be cancelled or deleted: AWS ends it at its end date (its instances are "
    "terminated 30 minutes before); the campaign record notes it as ended"
)
WEIGHTS_KEPT = "verified checkpoints are shared across campaigns: teardown never deletes the weights bucket"


@flow(name="teardown", flow_run_name="teardown-{spec.name}", validate_parameters=True)
def teardown(
    spec: CampaignSpec,
    region: str,
    *,
    reason: TeardownReason,
    dry_run: bool = False,
    settings: TeardownSettings | None = None,
    refs: CampaignRefs | None = None,
) -> TeardownResult:
    """Delete everything of ``spec``'s campaign in ``region``; ``dry_run`` lists it and deletes nothing.

    ``refs``: what the teardown event points at (the reservation, cluster and model revision, as far as the
    caller knows them; default: the campaign and the region).

    Raises ``TeardownIncompleteError`` (its ``.result`` says what was done and what is still there) when a
    wait runs out; any delete failing with other than its NotFound codes raises, naming the resource.
    """
    weights = KeptResource(resource=label("s3-bucket", spec.weights.s3_bucket), why=WEIGHTS_KEPT)
    tag_this_run(campaign_tag(spec.campaign_id))  # `capserve down` starts it on its own: tagged like the campaign's
    return run_teardown(
        spec.campaign_id,
        region,
        reason=reason,
        dry_run=dry_run,
        kind=spec.cluster.kind,
        existing_cluster=spec.cluster.existing_cluster_name,
        kept=[weights],
        settings=settings or settings_for(spec).teardown,
        refs=refs,
    )


def run_teardown(
    campaign_id: str,
    region: str,
    *,
    reason: TeardownReason,
    dry_run: bool,
    kind: ClusterKind | None,
    existing_cluster: str | None = None,
    kept: list[KeptResource] | None = None,
    settings: TeardownSettings,
    inventory: Inventory | None = None,
    refs: CampaignRefs | None = None,
) -> TeardownResult:
    """Inventory → plan → execute, inside the calling flow (teardown, or the reaper for each campaign); the
    teardown event (about ``refs``, default the campaign in ``region``) is sent before any error is raised."""
    about = refs or CampaignRefs(campaign_id=campaign_id, region=region)
    logger = get_run_logger()
    ClusterNames(campaign_id=campaign_id)  # validates the id before anything is looked up
    found = inventory or inventory_campaign(
        campaign_id, region, kind=kind, existing_cluster=existing_cluster, settings=settings
    )
    plan = plan_teardown(found, settings)
    all_kept = [
        *found.kept,
        *(KeptResource(resource=label("reservation", r), why=RESERVATION_KEPT) for r in found.reservation_ids),
        *(kept or []),
    ]
    logger.info(
        "teardown of %s in %s (%s%s): %d resources to delete",
        campaign_id, region, reason, ", dry run" if dry_run else "", len(plan.resources()),
    )
    if dry_run:
        listed = TeardownResult(
            campaign_id=campaign_id, region=region, reason=reason, dry_run=True, deleted=tuple(plan.resources()),
            already_gone=found.missing, kept=tuple(all_kept), finished_at=clock().now(),
        )
        publish_teardown(campaign_id, listed.markdown())
        emit(teardown_finished(about, listed, complete=True))
        return listed
    outcome = execute_plan(plan, settings, found.workload_cluster)
    rule = stop_capacity_events(campaign_id, region, all_kept)
    result = TeardownResult(
        campaign_id=campaign_id, region=region, reason=reason, dry_run=False, deleted=(*outcome.deleted, *rule),
        already_gone=(*found.missing, *outcome.already_gone), kept=tuple(all_kept), remaining=outcome.remaining,
        finished_at=clock().now(),
    )
    publish_teardown(campaign_id, result.markdown())  # what was deleted, for the UI, before any error
    emit(teardown_finished(about, result, complete=not result.remaining))
    if result.remaining:
        raise TeardownIncompleteError(
            f"teardown of campaign {campaign_id} in {region} stopped: still there when the wait ran out: "
            f"{'; '.join(result.remaining)}. Re-run teardown (it continues where this one stopped)",
            result,
        )
    logger.info("teardown of %s: %d deleted, %d already gone", campaign_id, len(result.deleted),
                len(result.already_gone))
    return result


def stop_capacity_events(campaign_id: str, region: str, kept: list[KeptResource]) -> tuple[str, ...]:
    """Delete the campaign's Capacity Block event rule (docs/events.md §2): ``('events-rule/<name>',)`` when it
    was deleted, ``()`` when there was none. It costs nothing, so a rule that cannot be deleted is kept and
    listed with why instead of failing the teardown."""
    name = label("events-rule", rule_name(campaign_id))
    try:
        return (name,) if delete_capacity_events(campaign_id, region) else ()
    except CapserveError as exc:
        kept.append(KeptResource(resource=name, why=f"could not delete it: {exc}"[:1000]))
        return ()
