"""The acquire stage: find, approve and buy GPU capacity exactly once (or adopt what the campaign already has).

Order, and why:
0. a run started for a recorded lease (the scheduled serve run) adopts exactly that reservation or stops
   ("expired"): it never searches offers, so a run that fires after its block ended cannot buy another;
1. the campaign record, then AWS by the campaign tag: a run that died after buying (even before it
   recorded anything) adopts instead of buying again — PurchaseCapacityBlock has no idempotency token;
2. offers from every region, less those in zones where the cluster cannot be built (Local Zones, AZs EKS
   refuses), ranked by the spec's policy (the decision is data, shown in the report);
3. a person's approval when the fee is above the spec's threshold (suspend/pause frees or parks the
   run; an interactive CLI run asks on the terminal); rejected or timed out → stop, nothing bought;
   Before it (and before any purchase call), ``capacity.require_rehearsal`` refuses without a passing rehearsal
   of this spec recorded within ``capacity.rehearsal_valid_days`` (docs/rehearsal.md); the form shows it;
4. the purchase under a Prefect concurrency limit of one per campaign, after a second tag lookup
   inside the limit and a DryRun permission check;
5. the lease into the campaign record, then wait until AWS says ``active``; a purchase also keeps the stage's
   whole result (offers considered, the chosen one, the fee, the run that bought it) in the record, so that the
   report of the run that later adopts the lease (the scheduled serve run) still tells the purchase.
"""

from __future__ import annotations

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact
from prefect.context import FlowRunContext
from prefect.exceptions import FlowPauseTimeout
from prefect.flow_runs import pause_flow_run, suspend_flow_run
from prefect.input import RunInput
from prefect.runtime import flow_run

from capserve.campaign.run_names import stage_run_name
from capserve.core.approval import Approval
from capserve.core.campaign_cost import offer_forecasts
from capserve.core.capacity.adoption import adoption_problems, lease_from_reservation
from capserve.core.capacity.approval import ApprovalDecision, ApprovalRequest, needs_approval
from capserve.core.capacity.lease_check import lease_problems
from capserve.core.capacity.offers import Offer
from capserve.core.capacity.ranking import Ranking, rank_offers
from capserve.core.capacity.result import AcquireResult, Outcome
from capserve.core.capacity.settings import CapacitySettings
from capserve.core.capacity.states import Reservation
from capserve.core.catalog import get_instance_type
from capserve.core.cost.planning import CostForecast, forecast_table
from capserve.core.cost.prices import load_price_table
from capserve.core.errors import OfferGoneError, PermanentError
from capserve.core.lease import Lease
from capserve.core.record import RecordRef, StageEntry
from capserve.core.rehearsal import RehearsalRecord, rehearsal_digest, rehearsal_line, rehearsal_problem
from capserve.core.spec import CampaignSpec
from capserve.core.stages import Stage, StageStatus
from capserve.tasks.capacity.purchase import preflight_purchase, purchase
from capserve.tasks.capacity.reservations import (
    describe_reservation_by_id,
    find_campaign_reservations,
    wait_until_usable,
)
from capserve.tasks.capacity.search import search_offers, search_zones
from capserve.tasks.locations import record_ref
from capserve.tasks.record_store import load_rehearsal, save_approval, save_lease, save_purchase, save_stage
from capserve.tasks.settings import settings_for
from capserve.tasks.slots import leased_slot
from capserve.tasks.the_clock import clock


class PurchaseApproval(RunInput, ApprovalDecision):
    """The form a person fills in (Prefect UI, ``resume_flow_run``), typed by ApprovalDecision."""


def purchase_limit_name(campaign_id: str) -> str:
    return f"capserve-purchase-{campaign_id}"


@flow(name="acquire", flow_run_name=stage_run_name("acquire"))
def acquire(
    spec: CampaignSpec,
    *,
    interactive: bool = False,
    dry_run: bool = False,
    settings: CapacitySettings | None = None,
    record: RecordRef | None = None,
    bound: Lease | None = None,
) -> AcquireResult:
    """Obtain the campaign's capacity. ``dry_run``: search, rank and check permissions, buy nothing.

    ``record`` is where the campaign record lives (default: resolved from the environment's settings).
    ``bound``: the lease this run was started for; only that reservation is adopted, nothing is ever bought.
    """
    if settings is None or record is None:  # a standalone run (its own deployment): from the environment
        configured = settings_for(spec)
        settings = settings or configured.capacity
        record = record or record_ref(spec, configured.records)
    logger = get_run_logger()
    if bound is not None:
        return _adopt_bound(spec, bound, settings, record)
    adopted = _already_ours(spec)
    if adopted is not None:
        logger.info("campaign %s holds %s: adopting it, buying nothing", spec.campaign_id, adopted.reservation_id)
        return _finish(spec, adopted, None, settings, record, outcome="adopted", offering_id=adopted.offering_id)

    gone: list[str] = []  # offerings another buyer took between our search and our purchase
    while True:
        ranking = _search(spec, excluding=gone)
        offer = ranking.chosen
        if offer is None:
            raise PermanentError(f"campaign {spec.campaign_id}: {ranking.why_nothing()}")
        logger.info("chosen offer %s (%s)", offer.offering_id, offer.label())
        if dry_run:
            preflight_purchase(offer, spec.campaign_id)
            return _stopped(spec, ranking, "dry-run", f"dry run: would buy {offer.label()}; permissions check passed")
        try:
            return _check_and_buy(spec, offer, ranking, settings, record, interactive=interactive)
        except OfferGoneError as exc:
            gone.append(offer.offering_id)
            if len(gone) >= settings.offer_searches:
                raise PermanentError(
                    f"campaign {spec.campaign_id}: {len(gone)} chosen offerings were gone at purchase "
                    f"(capacity settings offer_searches={settings.offer_searches}); nothing was bought: {exc}"
                ) from exc
            logger.warning("%s; searching again (%d of %d)", exc, len(gone) + 1, settings.offer_searches)


def _search(spec: CampaignSpec, *, excluding: list[str]) -> Ranking:
    """Every region's offers, ranked, without the offerings known to be gone."""
    capacity = spec.capacity
    gpus = get_instance_type(capacity.instance_type).gpus_per_node
    offers = [offer for offer in search_offers(capacity) if offer.offering_id not in excluding]
    return rank_offers(offers, capacity, regions=capacity.regions, gpus_per_instance=gpus,
                       zones=search_zones(capacity))


def _check_and_buy(
    spec: CampaignSpec, offer: Offer, ranking: Ranking, settings: CapacitySettings, record: RecordRef, *,
    interactive: bool,
) -> AcquireResult:
    """The rehearsal requirement, the approval (each asked about this very offer), then the purchase."""
    capacity = spec.capacity
    approval = needs_approval(offer, capacity.approval_threshold_usd)
    rehearsed = _rehearsal(spec, record) if approval or capacity.require_rehearsal else None
    # Before approval and before any purchase call: a person is never asked about a purchase that would be refused.
    refusal = rehearsal_problem(spec, rehearsed, _rehearsal_digest(spec), now=clock().now())
    if refusal is not None:
        save_stage(record, Stage.ACQUIRE, StageEntry(status=StageStatus.STOPPED, ended_at=clock().now(),
                                                     detail=refusal))
        return _stopped(spec, ranking, "rehearsal-required", refusal)
    if approval:
        refused = _approval(spec, offer, ranking, settings, record, interactive=interactive, rehearsed=rehearsed)
        if refused is not None:
            return refused
    return _buy(spec, offer, ranking, settings, record)


def _rehearsal_digest(spec: CampaignSpec) -> str:
    """The digest a rehearsal of ``spec`` records (capserve.core.rehearsal), with the network's bring-up settings."""
    bring_up = settings_for(spec).bring_up
    return rehearsal_digest(spec, vpc_cidr=bring_up.vpc_cidr)


def _rehearsal(spec: CampaignSpec, record: RecordRef) -> RehearsalRecord | None:
    """The recorded rehearsal of this very spec (same digest), if any."""
    return load_rehearsal(record.location, spec.campaign_id, _rehearsal_digest(spec))


def _approval(
    spec: CampaignSpec, offer: Offer, ranking: Ranking, settings: CapacitySettings, record: RecordRef, *,
    interactive: bool, rehearsed: RehearsalRecord | None = None,
) -> AcquireResult | None:
    """Ask a person; None when they approved, else the stopped result (recorded, nothing bought)."""
    decision = _ask_for_approval(spec, offer, ranking, settings, interactive=interactive, rehearsed=rehearsed)
    now = clock().now()
    if decision is not None:
        save_approval(record, Approval(
            stage=Stage.ACQUIRE, subject=offer.offering_id, approved=decision.approved, approver=decision.approver,
            note=decision.note, decided_at=now,
        ))
        if decision.approved:
            return None
    outcome: Outcome = "approval-timed-out" if decision is None else "rejected"
    why = (
        f"nobody approved within {settings.approval_timeout_seconds} s"
        if decision is None
        else f"rejected by {decision.approver or 'the approver'}{': ' + decision.note if decision.note else ''}"
    )
    message = f"purchase of {offer.label()} {why}; nothing was bought"
    save_stage(record, Stage.ACQUIRE, StageEntry(status=StageStatus.STOPPED, ended_at=now, detail=message))
    return _stopped(spec, ranking, outcome, message)


def _buy(
    spec: CampaignSpec, offer: Offer, ranking: Ranking, settings: CapacitySettings, record: RecordRef
) -> AcquireResult:
    """The purchase, under the campaign's limit of one at a time, after a last look for what it already has."""
    campaign_id = spec.campaign_id
    with leased_slot(
        purchase_limit_name(campaign_id),
        settings.purchase_slot_lease_seconds,
        purpose=f"one purchase for campaign {campaign_id} at a time",
        timeout_seconds=settings.purchase_slot_timeout_seconds,
    ):
        # Another run may have bought while this one searched or waited for approval.
        adopted = _already_ours(spec)
        if adopted is not None:
            get_run_logger().info("another run bought %s meanwhile: adopting it", adopted.reservation_id)
            return _finish(spec, adopted, ranking, settings, record, outcome="adopted", offering_id=adopted.offering_id)
        preflight_purchase(offer, campaign_id)
        bought = purchase(offer, campaign_id)
    get_run_logger().info("bought %s for $%.2f", bought.reservation_id, offer.upfront_fee)
    return _finish(
        spec, bought, ranking, settings, record, outcome="bought", offering_id=offer.offering_id, fee=offer.upfront_fee
    )


def _adopt_bound(spec: CampaignSpec, bound: Lease, settings: CapacitySettings, record: RecordRef) -> AcquireResult:
    """The reservation this run was started for, if it can still be used; else stop without searching offers."""
    found = describe_reservation_by_id(bound.reservation_id, bound.region)
    # Judged against the recorded lease (the prepare run's rule too): gone, not ours, not deliverable, moved zone.
    problems = lease_problems(bound, found, campaign_id=spec.campaign_id, now=clock().now(), pending_ok=True)
    if found is None or problems:
        message = (
            f"this run was started for reservation {bound.reservation_id}, which it cannot use: "
            f"{'; '.join(problems)}. A run started for a recorded lease never buys: nothing was bought "
            f"(start the campaign {spec.campaign_id} again to buy a new block)"
        )
        get_run_logger().warning(message)
        result = AcquireResult(campaign_id=spec.campaign_id, outcome="expired", message=message)
        _publish(result)
        return result
    get_run_logger().info("run bound to %s: adopting it", found.reservation_id)
    return _finish(spec, found, None, settings, record, outcome="adopted", offering_id=found.offering_id)


def _already_ours(spec: CampaignSpec) -> Reservation | None:
    """A reservation this campaign may use without buying: the one named in the spec, or one tagged for it."""
    capacity, campaign_id = spec.capacity, spec.campaign_id
    now = clock().now()
    if capacity.provider == "existing-reservation":
        assert capacity.reservation_id is not None  # noqa: S101 - the spec's validator guarantees it
        found = describe_reservation_by_id(capacity.reservation_id, capacity.regions[0])
        if found is None:
            raise PermanentError(
                f"reservation {capacity.reservation_id} not found in {capacity.regions[0]}: check "
                "capacity.reservation_id and put its region first in capacity.regions"
            )
        _refuse_unless_adoptable(found, adoption_problems(found, capacity, now=now))
        return found
    owned = find_campaign_reservations(capacity, campaign_id)
    live = sorted((r for r in owned if not r.state.is_terminal and r.end > now), key=lambda r: (r.start, r.region))
    if len(live) > 1:
        get_run_logger().warning(
            "campaign %s holds %d live reservations (%s): adopting the earliest; the others still bill",
            campaign_id, len(live), ", ".join(r.reservation_id for r in live),
        )
    if not live:
        return None
    _refuse_unless_adoptable(live[0], adoption_problems(live[0], capacity, now=now, campaign_id=campaign_id))
    return live[0]


def _refuse_unless_adoptable(reservation: Reservation, problems: list[str]) -> None:
    if problems:
        raise PermanentError(f"cannot use {reservation.reservation_id}: " + "; ".join(problems))


def _finish(
    spec: CampaignSpec,
    reservation: Reservation,
    ranking: Ranking | None,
    settings: CapacitySettings,
    record: RecordRef,
    *,
    outcome: str,
    offering_id: str | None,
    fee: float | None = None,
) -> AcquireResult:
    """Record the lease (and a purchase whole), wait until AWS says it is usable, publish the artifact."""
    provider = spec.capacity.provider
    now, run = clock().now(), _this_run()
    lease: Lease = lease_from_reservation(reservation, provider=provider, adopted=outcome == "adopted", fee=fee)
    save_lease(record, lease, offering_id)
    current = wait_until_usable(reservation, settings)
    verb = "Bought"
    if outcome == "adopted":
        # Found by the campaign's tag: an earlier run of this campaign (or the run the lease scheduled) bought it.
        verb = "Adopted" if provider == "existing-reservation" else "Holds (bought by an earlier run of this campaign)"
    message = f"{verb} {lease.reservation_id} ({current.state.value}); it ends {lease.end.isoformat()}."
    result = AcquireResult(
        campaign_id=spec.campaign_id,
        outcome="adopted" if outcome == "adopted" else "bought",
        lease=lease,
        state=current.state,
        ranking=ranking,
        message=message,
        forecasts=tuple(_forecasts(spec, ranking)),
        bought_by=run if outcome == "bought" else None,
        bought_at=now if outcome == "bought" else None,
        adopted_by=run if outcome == "adopted" else None,
        approval=_approval_note(spec, fee) if outcome == "bought" else None,
    )
    if outcome == "bought":
        save_purchase(record, result)
    _publish(result)
    return result


def _approval_note(spec: CampaignSpec, fee: float | None) -> str:
    """Whether the purchase waited for a person (the same rule as ``needs_approval``: above the threshold)."""
    threshold = spec.capacity.approval_threshold_usd
    if fee is not None and fee > threshold:
        return f"approved by a person (fee above the ${threshold:,.2f} threshold; see Approvals)"
    return f"not needed (fee at or below the ${threshold:,.2f} threshold)"


def _this_run() -> str:
    """The flow run this stage runs in, by name (``campaign-k3-demo``, ``serve-k3-demo``), as the report names it."""
    return str(flow_run.get_name() or flow_run.get_flow_name() or "a run outside Prefect")


def _stopped(spec: CampaignSpec, ranking: Ranking, outcome: Outcome, message: str) -> AcquireResult:
    result = AcquireResult(
        campaign_id=spec.campaign_id,
        outcome=outcome,
        ranking=ranking,
        message=message,
        forecasts=tuple(_forecasts(spec, ranking)),
    )
    _publish(result)
    return result


def _forecasts(spec: CampaignSpec, ranking: Ranking | None) -> list[CostForecast]:
    """What the offers weighed would buy, best-ranked first (pure; priced from the packaged table)."""
    if ranking is None:
        return []
    ranked = sorted((c for c in ranking.considered if c.rank is not None), key=lambda c: c.rank or 0)
    return offer_forecasts(spec, [c.offer for c in ranked], load_price_table())


def _publish(result: AcquireResult) -> None:
    create_markdown_artifact(
        key=f"capacity-{result.campaign_id}", markdown=result.markdown(), description="acquire stage: lease and offers"
    )


def _ask_for_approval(
    spec: CampaignSpec, offer: Offer, ranking: Ranking, settings: CapacitySettings, *, interactive: bool,
    rehearsed: RehearsalRecord | None = None,
) -> ApprovalDecision | None:
    """A person's decision about ``offer``; None when nobody answered in time."""
    request = ApprovalRequest(
        campaign_id=spec.campaign_id,
        offer=offer,
        approval_threshold_usd=spec.capacity.approval_threshold_usd,
        max_upfront_fee_usd=spec.capacity.max_upfront_fee_usd,
        alternatives=len(ranking.considered) - 1,
        plan=f"serve {spec.model.catalog or spec.model.repo} on {offer.instance_count} × {offer.instance_type}",
        cost_forecast=forecast_table(_forecasts(spec, ranking)),
        rehearsal=rehearsal_line(rehearsed),
    )
    if interactive:
        return _ask_on_terminal(request)
    form = PurchaseApproval.with_initial_data(
        description=request.markdown(), approved=False, offering_id=offer.offering_id
    )
    key = f"approve-{offer.offering_id}"
    context = FlowRunContext.get()
    deployed = context is not None and context.flow_run is not None and context.flow_run.deployment_id is not None
    try:
        if deployed:
            # Frees the process while a person decides; the resumed run re-enters here with the answer
            # and does not redo finished tasks (docs/prefect.md §6).
            answer = suspend_flow_run(wait_for_input=form, timeout=settings.approval_timeout_seconds, key=key)
        else:
            # Without a deployment nothing could restart a suspended run: park this process instead.
            answer = pause_flow_run(wait_for_input=form, timeout=settings.approval_timeout_seconds, key=key)
    except FlowPauseTimeout:
        return None
    if answer is None:
        return None
    decision = ApprovalDecision.model_validate(answer.model_dump(include=set(ApprovalDecision.model_fields)))
    if decision.offering_id != offer.offering_id:
        raise PermanentError(
            f"the approval was for offering {decision.offering_id}, but {offer.offering_id} is the one on the table: "
            "re-run and approve the offer shown"
        )
    return decision


def _ask_on_terminal(request: ApprovalRequest) -> ApprovalDecision:
    from rich.console import Console
    from rich.markdown import Markdown
    from rich.prompt import Confirm, Prompt

    console = Console()
    console.print(Markdown(request.markdown()))
    approved = Confirm.ask("Buy it?", default=False, console=console)
    approver = Prompt.ask("Your name (for the record)", default="", console=console) if approved else ""
    return ApprovalDecision(approved=approved, offering_id=request.offer.offering_id, approver=approver)
