"""The runs a lease schedules: the cluster's preparation before the block, serve at its start, drain at
end − 45 min, teardown at end − 35 min.

Each is given only the campaign id, its home region and the reservation id (``capserve.core.schedule``):
it reads the spec and the lease from the campaign record, so a run scheduled days ago survives a change of
the spec's schema. A run whose reservation is no longer the campaign's (the lease changed and this run
was not cancelled in time) ends Cancelled ("Stale") and does nothing.

Each run resolves its settings once: the environment's at its start (they say where the records are), with the
recorded spec's ``settings:`` block on top once the record is read (``_window_run``); what it calls gets them
from there and reads the environment no more.

- ``prepare_cluster_before_block`` builds the cluster's network, IAM, control plane, system nodes, GPU node group
  at size 0 and add-ons before the block (they need no GPU), so that only the GPU nodes' boot and the pods are left
  for the block's own minutes.
- ``serve`` runs the campaign again from its recorded spec: the prepare stages find their work done
  (the reservation is adopted, not bought again; verified weights are kept), and the serve stages run
  now that the block is active.
- ``drain`` stops the serving workload from taking traffic and marks the record.
- ``scheduled_teardown`` deletes everything of the campaign (the reservation itself ends with AWS).

``drain`` and ``scheduled_teardown`` are also what AWS's expiration warning starts (with the warned
reservation: a late warning about a block the campaign no longer holds does nothing), and
``teardown_orphan`` is what a crashed campaign run starts: it tears down only a campaign with no other live
run (docs/events.md §4).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal

from prefect import flow, get_run_logger
from prefect.client.schemas.objects import State
from prefect.runtime import flow_run
from prefect.states import Cancelled, Failed

from capserve.campaign.context import CampaignContext, RunOptions, need
from capserve.campaign.run_names import campaign_runs
from capserve.campaign.states import verdict_state
from capserve.core.act_lines import drain_line, prepared_line
from capserve.core.capacity.lease_check import lease_problems
from capserve.core.cluster.result import PreparedCluster
from capserve.core.drain import DrainResult
from capserve.core.errors import PermanentError
from capserve.core.events import CampaignRefs
from capserve.core.lease import Lease
from capserve.core.orphans import left_alone, live_runs, orphan_target
from capserve.core.record import CampaignRecord, RecordRef, StageEntry
from capserve.core.report import CampaignReport
from capserve.core.schedule import ScheduledStage, cluster_lead, planned_runs, stages_no_longer_needed
from capserve.core.settings import Settings
from capserve.core.spec import CampaignSpec
from capserve.core.stages import Stage, StageStatus
from capserve.core.teardown.result import TeardownResult
from capserve.core.teardown.settings import TeardownSettings
from capserve.flows.notify import notify
from capserve.tasks.capacity.reservations import describe_reservation_by_id
from capserve.tasks.drain import remove_services, scale_serving_to_zero
from capserve.tasks.locations import locate_records, record_ref
from capserve.tasks.orphans import read_crashed_run, runs_in_flight
from capserve.tasks.progress import tell
from capserve.tasks.record_store import change_record, load_record
from capserve.tasks.reporting import campaign_report_dir, write_campaign_report
from capserve.tasks.scheduling import cancelled_before_start, schedule_lease_runs
from capserve.tasks.settings import hub_endpoint_from_environment, settings_for, settings_from_environment
from capserve.tasks.slots import campaign_slot
from capserve.tasks.teardown.inventory import inventory_campaign
from capserve.tasks.teardown.workloads import connect
from capserve.tasks.the_clock import clock


@flow(name="prepare-cluster", flow_run_name="prepare-cluster-{campaign_id}")
def prepare_cluster_before_block(campaign_id: str, region: str, reservation_id: str) -> PreparedCluster | State:
    """Before the block (``cluster_lead`` ahead of bring-up): the cluster's network, IAM, control plane, system
    nodes, and on EKS the GPU node group at size 0 and the add-ons, none of which needs a GPU, so that the serve
    run at the block's start only scales the GPU node group and runs the pods.

    Does nothing (Cancelled "NotNeeded") once the block has started or the campaign's bring-up, drain or teardown
    has begun: the serve run builds what is missing itself, and nothing is made again after a teardown.
    Its first step asks AWS for the reservation: one that is gone, not the campaign's, not scheduled or active,
    or in another zone than recorded ends the run Failed ("ReservationUnusable") with nothing built.
    """
    acting = _window_run(campaign_id, region, reservation_id, ScheduledStage.PREPARE_CLUSTER, scheduled=True)
    if isinstance(acting, State):
        return acting
    from capserve.flows.bring_up import prepare_cluster

    record, ref, spec, settings = acting
    lease = need(record.lease, Stage.ACQUIRE)
    why = _preparation_not_needed(record, lease.start)  # first without the slot: a campaign run may hold it long
    if why:
        return Cancelled(name="NotNeeded", message=why)
    with clock().working(), campaign_runs(campaign_id), campaign_slot(campaign_id, settings.slots):
        record = load_record(ref) or record  # the slot may have been waited for: what did the last holder do?
        why = _preparation_not_needed(record, lease.start)
        if why:
            return Cancelled(name="NotNeeded", message=why)
        started = clock().now()
        unusable = _reservation_unusable(campaign_id, lease)  # first: nothing is built for a block AWS will not deliver
        if unusable:
            return _nothing_built(campaign_id, lease, spec, unusable)
        cluster, created = prepare_cluster(spec, lease, settings.bring_up,
                                           nodes_per_replica=record.planned_nodes_per_replica())
        prepared = PreparedCluster(
            run=f"prepare-cluster-{campaign_id}", cluster=cluster, started_at=started, ended_at=clock().now(),
            block_start=lease.start, created=created,
        )
        change_record(ref, [lambda rec: rec.with_prepared(prepared)])
    get_run_logger().info("campaign %s: %s", campaign_id, prepared.markdown().strip())
    tell(prepared_line(prepared))
    return prepared


def _reservation_unusable(campaign_id: str, lease: Lease) -> list[str]:
    """Why AWS's reservation cannot carry the recorded lease (docs/preflight.md §5); empty when it can."""
    if lease.on_demand:  # a rehearsal's capacity: nothing was reserved
        return []
    found = describe_reservation_by_id(lease.reservation_id, lease.region)
    return lease_problems(lease, found, campaign_id=campaign_id, now=clock().now())


def _nothing_built(campaign_id: str, lease: Lease, spec: CampaignSpec, problems: list[str]) -> State:
    """The prepare run's end when the reservation is unusable: a person is told why and what happens next."""
    subject = f"capserve: campaign {campaign_id}: reservation {lease.reservation_id} cannot be used; nothing was built"
    check = (
        f"aws sagemaker describe-training-plan --region {lease.region} --training-plan-name "
        f"{lease.reservation_id.rpartition('/')[2]}"
        if lease.provider == "sagemaker-training-plan"
        else f"aws ec2 describe-capacity-reservations --region {lease.region} --capacity-reservation-ids "
        f"{lease.reservation_id}"
    )
    body = (
        f"{'; '.join(problems)}. Check it with `{check}`. The serve run at {lease.start.isoformat()} asks AWS "
        "again and stops without buying; the teardown at "
        f"{lease.teardown_at(spec.teardown).isoformat()} removes anything an earlier run created. To serve on "
        f"another block, start the campaign {campaign_id} again"
    )
    notify(subject, body)
    return Failed(name="ReservationUnusable", message=f"{subject}: {body}")


def _preparation_not_needed(record: CampaignRecord, block_start: datetime) -> str:
    """Why the cluster's preparation must not run ('' when it must): a campaign whose bring-up, drain or teardown
    has begun (whatever became of it) is left to the runs doing that."""
    for stage in (Stage.TEARDOWN, Stage.DRAIN, Stage.BRING_UP):
        entry = record.stage(stage)
        if entry is not None and entry.status is not StageStatus.SKIPPED:  # skipped: left for the serve run
            return f"campaign {record.campaign_id} has begun {stage.value} ({entry.status.value}): nothing to prepare"
    if clock().now() >= block_start:
        return "the block has started: the serve run builds the whole cluster"
    return ""


@flow(name="serve", flow_run_name="serve-{campaign_id}")
def serve(campaign_id: str, region: str, reservation_id: str) -> CampaignReport | State:
    """Bring up, stage weights on the nodes and evaluate, at the block's start (the campaign's serve part)."""
    # Here, not at the top: a drain or teardown run (this module's other flows) needs none of the campaign's flows.
    from capserve.campaign.runner import run_campaign
    from capserve.flows.campaign import CAMPAIGN, teardown_stage

    base = settings_from_environment()
    cancelled = cancelled_before_start(flow_run.get_id())
    if cancelled:
        return Cancelled(name="Cancelled", message=cancelled)
    record, ref = campaign_record(campaign_id, region, base)
    stale = _stale(record, reservation_id)
    if stale:
        return Cancelled(name="Stale", message=stale)
    lease = need(record.lease, Stage.ACQUIRE)
    spec = recorded_spec(record)
    _stamp_fired(ref, record, spec, ScheduledStage.BRING_UP)  # first: the clock may hold at the start for it
    if lease.end <= clock().now():
        # A run that fires after its block (a worker down for a day): nothing to serve on, and nothing to buy.
        return Cancelled(name="Expired", message=(
            f"reservation {reservation_id} ended at {lease.end.isoformat()}: nothing to serve on; nothing was "
            f"bought (start the campaign {campaign_id} again to buy a new block)"
        ))
    out_dir = campaign_report_dir(campaign_id)  # this worker's folder for the campaign's report
    options = RunOptions(out_dir=out_dir, staging_dir=out_dir / "staging", hub_endpoint=hub_endpoint_from_environment(),
                         bound_lease=lease, teardown_when_done=record.teardown_when_done)
    ctx = CampaignContext.start(spec, settings_for(spec, base), options)
    with clock().working(), campaign_slot(campaign_id, ctx.settings.slots):
        run_campaign(ctx, CAMPAIGN, teardown_stage)
    return verdict_state(ctx.report)


@flow(name="drain", flow_run_name="drain-{campaign_id}")
def drain(
    campaign_id: str,
    region: str,
    reservation_id: str | None = None,
    reason: Literal["scheduled", "expiration-warning", "manual"] = "scheduled",
) -> DrainResult | State:
    """Stop taking traffic (Services removed, serving workloads at zero replicas); the cluster stays.

    The scheduled run and the automation on AWS's expiration warning (docs/events.md §4) name the reservation:
    a run for a lease the campaign no longer holds does nothing. Without one it drains whatever the campaign holds.
    """
    acting = _window_run(campaign_id, region, reservation_id, ScheduledStage.DRAIN, scheduled=reason == "scheduled")
    if isinstance(acting, State):
        return acting
    _, ref, spec, settings = acting
    with clock().working(), campaign_runs(campaign_id):
        return _drain(campaign_id, region, ref, spec, settings.teardown, reason)


def _drain(
    campaign_id: str, region: str, ref: RecordRef, spec: CampaignSpec, settings: TeardownSettings, reason: str
) -> DrainResult:
    started = clock().now()
    found = inventory_campaign(campaign_id, region, kind=spec.cluster.kind,
                               existing_cluster=spec.cluster.existing_cluster_name, settings=settings)
    if found.workload_cluster is None or found.workload_cluster.endpoint is None:
        result = DrainResult(campaign_id=campaign_id, note="no cluster of the campaign was found",
                             finished_at=clock().now())
    else:
        dyn = connect(found.workload_cluster, region)
        removed = remove_services(dyn, campaign_id)
        scaled = scale_serving_to_zero(dyn, campaign_id)
        result = DrainResult(campaign_id=campaign_id, services_removed=tuple(removed),
                             scaled_to_zero=tuple(scaled), finished_at=clock().now())
    entry = StageEntry(status=StageStatus.COMPLETED, started_at=started, ended_at=result.finished_at,
                       outputs=result.report_section(), detail=f"{reason}: {result.markdown()}"[:4000])
    change_record(ref, [lambda rec: rec.with_stage(Stage.DRAIN, entry)])
    get_run_logger().info("drain of %s: %s", campaign_id, result.markdown())
    tell(drain_line(result))
    return result


@flow(name="scheduled-teardown", flow_run_name="teardown-{campaign_id}")
def scheduled_teardown(
    campaign_id: str,
    region: str,
    reservation_id: str | None = None,
    reason: Literal["drain-deadline", "expiration-warning"] = "drain-deadline",
) -> TeardownResult | State:
    """The hard teardown before AWS ends the block: everything of the campaign, from its recorded spec.

    The scheduled run and the automation on AWS's expiration warning (docs/events.md §4) name the reservation:
    a run for a lease the campaign no longer holds does nothing. Without one it tears down whatever the campaign
    holds.
    """
    found = _window_run(campaign_id, region, reservation_id, ScheduledStage.TEARDOWN,
                        scheduled=reason == "drain-deadline")
    if isinstance(found, State):
        return found
    from capserve.flows.teardown import teardown

    record, ref, spec, settings = found
    with clock().working(), campaign_runs(campaign_id):
        done = teardown(spec, region, reason=reason, settings=settings.teardown, refs=record_refs(record, region))
        record = change_record(ref, [lambda rec: rec.with_kept(done.kept, now=clock().now())])
        _finish_report(record, spec, done)
    return done


def _window_run(
    campaign_id: str, region: str, reservation_id: str | None, stage: ScheduledStage, *, scheduled: bool
) -> tuple[CampaignRecord, RecordRef, CampaignSpec, Settings] | State:
    """The campaign a prepare, drain or teardown run acts on, with the run's settings (the environment's, then the
    recorded spec's on top), or Cancelled ("Stale") when the reservation it names is no longer the campaign's; the
    lease's own scheduled run stamps when it fired."""
    cancelled = cancelled_before_start(flow_run.get_id()) if scheduled else ""
    if cancelled:
        return Cancelled(name="Cancelled", message=cancelled)
    base = settings_from_environment()  # where the records are
    record, ref = campaign_record(campaign_id, region, base)
    stale = _stale(record, reservation_id) if reservation_id is not None else ""
    if stale:
        return Cancelled(name="Stale", message=stale)
    spec = recorded_spec(record)
    if scheduled and reservation_id is not None:
        _stamp_fired(ref, record, spec, stage)
    return record, ref, spec, settings_for(spec, base)


def _stamp_fired(ref: RecordRef, record: CampaignRecord, spec: CampaignSpec, stage: ScheduledStage) -> None:
    """When this run began on the campaign's clock, for the report's schedule.

    The clock may hold at the run's due instant until the run has begun (``begin_at``: it waits for the
    clock when it is early), so a run a busy machine starts late is not late on the block.
    """
    waypoint = _waypoint(record, spec, stage)
    fired = clock().begin_at(waypoint) if waypoint is not None else clock().now()
    change_record(ref, [lambda rec: rec.with_fired(stage.value, now=fired)])


def _waypoint(record: CampaignRecord, spec: CampaignSpec, stage: ScheduledStage) -> datetime | None:
    """The time on the campaign's clock the lease's run of ``stage`` is scheduled for (``schedule_window``'s)."""
    if record.lease is None:
        return None
    lead = timedelta(minutes=spec.teardown.bring_up_lead_minutes)
    planned = planned_runs(
        record.campaign_id, record.lease, spec.teardown, bring_up_lead=lead, prepare_lead=cluster_lead(spec)
    )
    return next((run.scheduled_at for run in planned if run.stage is stage), None)


def _finish_report(record: CampaignRecord, spec: CampaignSpec, done: TeardownResult) -> None:
    """The last scheduled run renders the campaign's report from the record, on whichever worker it runs: the
    redeploys while it served, the block's ledger, its teardown, and when each scheduled run fired."""
    if record.lease is None or record.report is None:
        return
    schedule = schedule_lease_runs(
        record.campaign_id, record.lease, spec.teardown,
        bring_up_lead=timedelta(minutes=spec.teardown.bring_up_lead_minutes), prepare_lead=cluster_lead(spec),
        no_longer_needed=stages_no_longer_needed(torn_down=True, served=True), fired=record.fired,
    )
    # This run is still Running on the server as it writes; its teardown is done.
    runs = tuple(
        run.model_copy(update={"state": "Completed"}) if run.stage is ScheduledStage.TEARDOWN else run
        for run in schedule.runs
    )
    written = write_campaign_report(record, done, schedule.model_copy(update={"runs": runs}))
    get_run_logger().info("report of %s finished: %s", record.campaign_id, written)


@flow(name="teardown-orphan", flow_run_name="teardown-orphan-{flow_run_id}", validate_parameters=True)
def teardown_orphan(flow_run_id: str, soon_minutes: int = 30) -> TeardownResult | State:
    """Tear down the campaign of a crashed ``campaign`` or ``serve`` run, only when no other run of it is live.

    The target of the Crashed automation (docs/events.md §4). A run of the campaign that is Running, Pending or
    Scheduled within ``soon_minutes`` means someone (or something) still works on it: the teardown leaves it
    alone and ends Cancelled ("LeftAlone"), naming that run. Whatever it cannot tell for sure (a spec that no
    longer validates, no record, no lease) ends Cancelled ("Unsure") after a notification: nothing is deleted.
    """
    from capserve.flows.teardown import teardown

    logger = get_run_logger()
    crashed = read_crashed_run(flow_run_id)
    target = orphan_target(crashed.flow_name, crashed.parameters)
    if isinstance(target, str):
        return _unsure(crashed.name, target)
    live = live_runs(target.campaign_id, runs_in_flight(), now=clock().now(), soon=timedelta(minutes=soon_minutes))
    if live:
        message = left_alone(target.campaign_id, live)
        logger.info("orphan teardown after %s: %s", crashed.name, message)
        return Cancelled(name="LeftAlone", message=message)
    base = settings_from_environment()
    if target.home_region is not None:
        record, ref = campaign_record(target.campaign_id, target.home_region, base)
    else:
        assert target.spec is not None  # noqa: S101 - a campaign run's target always carries its spec
        ref = record_ref(target.spec, base.records)
        loaded = load_record(ref)
        if loaded is None:
            return _unsure(crashed.name, f"no record of campaign {target.campaign_id} at {ref.uri}")
        record = loaded
    if record.lease is None:
        return _unsure(crashed.name, f"campaign {target.campaign_id} records no lease: no region to tear down in")
    spec = recorded_spec(record)
    region = record.lease.region
    logger.warning("campaign %s: run %s crashed and no other run of it is live; tearing down in %s",
                   target.campaign_id, crashed.name, region)
    with campaign_runs(target.campaign_id):
        done = teardown(spec, region, reason="orphan", settings=settings_for(spec, base).teardown,
                        refs=record_refs(record, region))
    change_record(ref, [lambda rec: rec.with_kept(done.kept, now=clock().now())])
    return done


def _unsure(crashed: str, why: str) -> State:
    """Nothing is torn down: a person is told why and decides."""
    subject = f"capserve: run {crashed} crashed; its campaign was not torn down"
    notify(subject, f"{why}. Check the campaign and run `capserve down` if nothing of it should keep running.")
    return Cancelled(name="Unsure", message=f"{subject}: {why}")


def record_refs(record: CampaignRecord, region: str) -> CampaignRefs:
    """What a window run's events point at: the campaign, its reservation and the region it acts in."""
    return CampaignRefs(campaign_id=record.campaign_id, region=region,
                        reservation_id=record.lease.reservation_id if record.lease else None)


def campaign_record(campaign_id: str, region: str, settings: Settings) -> tuple[CampaignRecord, RecordRef]:
    location = locate_records(region, settings.records)
    ref = RecordRef(campaign_id=campaign_id, location=location, write_attempts=settings.records.write_attempts)
    record = load_record(ref)
    if record is None:
        raise PermanentError(
            f"no record of campaign {campaign_id!r} at {ref.uri}: check the campaign id and its home region "
            f"({region!r}), or start the campaign again"
        )
    return record, ref


def _stale(record: CampaignRecord, reservation_id: str) -> str:
    """Why this run must not act ('' when it must): it was scheduled for a lease the campaign no longer holds."""
    if record.lease is None or record.lease.reservation_id != reservation_id:
        held = record.lease.reservation_id if record.lease else "none"
        return f"scheduled for reservation {reservation_id}, but campaign {record.campaign_id} now holds {held}"
    return ""


def recorded_spec(record: CampaignRecord) -> CampaignSpec:
    spec = record.load_spec()
    if spec is None:
        raise PermanentError(f"the record of campaign {record.campaign_id} holds no spec: start the campaign again")
    return spec
