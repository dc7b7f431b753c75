"""The rehearsal: the campaign's own stages on on-demand capacity, start to teardown, and the record a purchase
may require (docs/rehearsal.md; the plan is ``capserve.core.rehearsal``).

    plan ─► stage_weights ─► stage_image ─► bring_up ─► weights_to_nodes ─► rollout ─► evaluate ─► teardown (always)

No acquire: the lease is on-demand (``capserve.core.rehearsal.on_demand_lease``), so the node group differs from
the campaign's only by ``capacityType`` ON_DEMAND and a launch template without the Capacity Block market options
(``capserve.core.cluster.eks``). Every other stage is the campaign's own function (``capserve.flows.campaign``),
run by the campaign's runner, except the two that schedule the lease's window runs (bring-up and teardown): an
on-demand lease has no window to schedule. The rehearsal runs under its own campaign id, so its teardown (and
the reaper, once its short lease is over) deletes only what it made.

Then, whatever happened: the rehearsal record (each check with its time, the verdict, the cost) goes into the
report and into S3 beside the campaign record, where the campaign's acquire stage looks for it.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from capserve.campaign.announce import about, announce, now, recorded
from capserve.campaign.context import CampaignContext, RunOptions, need
from capserve.campaign.runner import Step, run_campaign, run_stage
from capserve.core.capacity.states import ReservationState
from capserve.core.cluster.result import ClusterResult
from capserve.core.cost.prices import load_price_table
from capserve.core.errors import SpecError
from capserve.core.events import cluster_ready, teardown_finished
from capserve.core.rehearsal import (
    InstanceChoice,
    RehearsalCheck,
    RehearsalRecord,
    choose_instance_type,
    on_demand_lease,
    rehearsal_cost,
    rehearsal_digest,
    rehearsal_proof,
    rehearsal_refusal,
    rehearsal_result,
    rehearsal_spec,
)
from capserve.core.report import CampaignReport
from capserve.core.settings import Settings
from capserve.core.spec import CampaignSpec
from capserve.core.stages import Stage, StageStatus
from capserve.core.teardown.result import TeardownIncompleteError, TeardownReason, TeardownResult
from capserve.flows.bring_up import bring_up
from capserve.flows.campaign import (
    evaluate_stage,
    plan_stage,
    rollout_stage,
    stage_image_stage,
    stage_weights_stage,
    weights_to_nodes_stage,
)
from capserve.flows.teardown import teardown
from capserve.tasks.record_store import save_rehearsal
from capserve.tasks.rehearsal import rehearsal_zone
from capserve.tasks.reporting import write_report_files
from capserve.tasks.run_log import run_logger
from capserve.tasks.settings import hub_endpoint_from_environment, settings_for
from capserve.tasks.slots import campaign_slot
from capserve.tasks.the_clock import clock


def rehearsal_bring_up_stage(ctx: CampaignContext) -> ClusterResult:
    """The campaign's bring-up on the on-demand lease (no window runs to reschedule: nothing was bought)."""
    plan = ctx.report.plan
    cluster = bring_up(
        ctx.spec, need(ctx.lease, Stage.ACQUIRE), ctx.settings.bring_up,
        nodes_per_replica=plan.parallel.nodes_per_replica if plan else None,
    )
    announce(ctx, cluster_ready(about(ctx), cluster, occurred=now()))
    return cluster


def rehearsal_teardown_stage(ctx: CampaignContext, reason: TeardownReason) -> TeardownResult:
    """The campaign's teardown of everything the rehearsal tagged, in its region."""
    lease = need(ctx.lease, Stage.ACQUIRE)
    try:
        done = teardown(ctx.spec, lease.region, reason=reason, settings=ctx.settings.teardown, refs=about(ctx))
    except TeardownIncompleteError as exc:
        ctx.report.add(exc.result)
        recorded(ctx, teardown_finished(about(ctx), exc.result, complete=False))
        raise
    recorded(ctx, teardown_finished(about(ctx), done, complete=True))
    return done


REHEARSAL: tuple[Step, ...] = (
    Step(Stage.PLAN, plan_stage),
    Step(Stage.STAGE_WEIGHTS, stage_weights_stage),
    Step(Stage.STAGE_IMAGE, stage_image_stage),
    Step(Stage.BRING_UP, rehearsal_bring_up_stage),
    Step(Stage.WEIGHTS_TO_NODES, weights_to_nodes_stage),
    Step(Stage.ROLLOUT, rollout_stage),
    Step(Stage.EVALUATE, evaluate_stage),
)


@flow(name="rehearse", flow_run_name="rehearse-{spec.name}")
def rehearse(
    spec: CampaignSpec,
    out_dir: Path = Path("out/rehearse"),
    staging_dir: Path | None = None,
    hub_endpoint: str | None = None,
    settings: Settings | None = None,
) -> CampaignReport:
    """Rehearse ``spec`` (the campaign's spec) on on-demand capacity; the report (with its ``rehearsal`` section)
    is written to ``out_dir`` and the record to S3 beside the campaign record."""
    refusal = rehearsal_refusal(spec)
    if refusal is not None:
        raise SpecError(refusal)
    base = settings_for(spec, settings)
    prices = load_price_table()
    choice = choose_instance_type(spec, prices)
    rehearsal = rehearsal_spec(spec, choice.instance_type)
    run_logger(__name__).info("rehearsing campaign %s as %s on %s (%s)", spec.campaign_id, rehearsal.campaign_id,
                   choice.instance_type, choice.why)
    options = RunOptions(
        out_dir=out_dir, staging_dir=staging_dir or out_dir / "staging",
        hub_endpoint=hub_endpoint or hub_endpoint_from_environment(), teardown_when_done=True,
    )
    ctx = CampaignContext.start(rehearsal, base, options)
    # The permission check (iam:SimulatePrincipalPolicy over every action the spec's features call) is part of
    # plan_stage's preflight, the rehearsal's first step as it is the campaign's (docs/iam/README.md).
    region = rehearsal.capacity.regions[0]
    ctx.lease = on_demand_lease(
        rehearsal, availability_zone=rehearsal_zone(region, choice.instance_type), now=clock().now()
    )
    ctx.reservation_state = ReservationState.ACTIVE  # on-demand capacity is usable at once
    error: BaseException | None = None
    with campaign_slot(rehearsal.campaign_id, ctx.settings.slots):
        try:
            run_campaign(ctx, REHEARSAL, rehearsal_teardown_stage)
        except BaseException as exc:
            error = exc
            raise
        finally:
            _tear_down_if_left(ctx)
            _record(ctx, spec, choice, vpc_cidr=base.bring_up.vpc_cidr, quietly=error is not None)
    return ctx.report


def _tear_down_if_left(ctx: CampaignContext) -> None:
    """Teardown always ends a rehearsal: also after an interruption, which the campaign's rules leave to the
    scheduled teardown (an on-demand rehearsal has none) and to the reaper."""
    if ctx.report.status_of(Stage.TEARDOWN) is not None:
        return
    if not any(line.name.leaves_resources for line in ctx.report.stages):
        return
    try:
        run_stage(ctx, Step(Stage.TEARDOWN, lambda context: rehearsal_teardown_stage(context, "failed-stage")))
    except Exception:  # noqa: BLE001 - the teardown's failure is logged with what to run; the stage's own error is what the rehearsal raises
        run_logger(__name__).exception("the rehearsal's teardown did not finish: run `capserve down` on %s",
                            ctx.spec.campaign_id)


def _record(
    ctx: CampaignContext, spec: CampaignSpec, choice: InstanceChoice, *, vpc_cidr: str, quietly: bool
) -> None:
    """The rehearsal record into the report (written again) and into S3. ``quietly``: while the rehearsal's own
    error is on its way out, a failure here is logged, not raised (it must not hide that error)."""
    try:
        record = rehearsal_record(ctx, spec, choice, vpc_cidr=vpc_cidr)
        ctx.report.cost = None  # a block's ledger (paid vs serving hours) means nothing here: the record prices it
        ctx.report.rehearsal = record
        write_report_files(ctx.report, ctx.options.out_dir)
        uri = save_rehearsal(ctx.locations.records, record)
        why = record.why or "every check passed"
        run_logger(__name__).info("rehearsal %s: %s (record %s)", record.result, why, uri)
    except Exception:
        run_logger(__name__).exception("could not write the rehearsal record of campaign %s", spec.campaign_id)
        if not quietly:
            raise


def rehearsal_record(
    ctx: CampaignContext, spec: CampaignSpec, choice: InstanceChoice, *, vpc_cidr: str
) -> RehearsalRecord:
    checks = [
        RehearsalCheck(
            name=line.name.value, status=line.status, started_at=line.started_at, ended_at=line.ended_at,
            seconds=(line.ended_at - line.started_at).total_seconds() if line.ended_at else None,
            detail=line.detail or "",
        )
        for line in ctx.report.stages
    ]
    verdict = ctx.report.evaluation.verdict if ctx.report.evaluation is not None else None
    result, why = rehearsal_result(checks, verdict)
    gpu_lines = [line for line in ctx.report.stages
                 if line.name.leaves_resources and line.status is not StageStatus.SKIPPED]
    minutes = 0.0
    if gpu_lines:
        last = max((line.ended_at or line.started_at) for line in gpu_lines)
        minutes = (last - gpu_lines[0].started_at).total_seconds() / 60
    lease = need(ctx.lease, Stage.ACQUIRE)
    return RehearsalRecord(
        campaign_id=spec.campaign_id,
        rehearsal_id=ctx.spec.campaign_id,
        digest=rehearsal_digest(spec, vpc_cidr=vpc_cidr),
        proves=rehearsal_proof(spec, vpc_cidr=vpc_cidr),
        rehearsed_at=clock().now(),
        result=result,
        checks=tuple(checks),
        verdict=verdict,
        region=lease.region,
        model=ctx.spec.model.repo or ctx.spec.model.catalog or "?",
        cost=rehearsal_cost(choice, lease.instance_count, minutes, table_date=str(load_price_table().date)),
        why=why,
    )

