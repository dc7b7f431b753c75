"""Redeploy a running campaign on a new model revision (the target of the revision-published automation).

    refuse? ─► same sha again? ─► plan ─► stage_weights ─► stage_image ─► bring_up (finds the cluster)
        ─► weights_to_nodes ─► rollout (the rollout stage's strategy; one that never gets ready rolls back on its own)
        ─► evaluate ─► pass: promote │ otherwise: roll back to the last good revision

Like the window's runs (``capserve.flows.window``) it is given the campaign id and its home region and reads
the spec, the lease and the last good rollout from the campaign record. It refuses, with one message
naming why, a campaign inside its drain window (end − ``teardown.drain_before_end_minutes``), torn down,
drained or without a cluster (the record and AWS's tags are both asked), or with no good rollout to fall
back on. One redeploy per campaign at a time: deployment runs take the campaign's slot
(``capserve.tasks.slots``, shared with the campaign and serve runs), and once they hold it they read the
record again, so a second event for the same commit finds it served or tried and ends Completed
("Skipped") without doing anything.

Where the outcome goes: each redeploy appends a ``RedeployEntry`` (from, to, trigger, strategy, verdict,
outcome) to the campaign record, together with the moved last good rollout when it promotes. The record
is the carrier: every report a campaign run writes copies the record's redeploys into ``report.json``
``"redeploys"`` (``capserve.campaign.runner``). The redeploy also writes its own report (its stages, the
rollout and rollback, the evaluation and the record's redeploys so far) under ``out_dir``, and renders the
campaign's report from the record in this worker's folder for it (``capserve.tasks.reporting``).

A failure of the redeploy itself never tears the campaign down: before the rollout the old revision keeps
serving; a rollback that fails leaves the cluster to the scheduled teardown (the entry says "failed").
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

from prefect import flow, get_run_logger
from prefect.client.schemas.objects import State
from prefect.states import Completed

from capserve.campaign.announce import about, announce
from capserve.campaign.announce import now as utc_now
from capserve.campaign.context import CampaignContext, RunOptions, need
from capserve.campaign.run_names import campaign_runs
from capserve.campaign.runner import Step, run_stage
from capserve.core.errors import CapserveError, PermanentError
from capserve.core.events import rollout_event
from capserve.core.planner.plan import ServingPlan
from capserve.core.record import CampaignRecord, RecordRef, RolloutRecord
from capserve.core.redeploy import (
    Outcome,
    RedeployEntry,
    Verdict,
    down_phases,
    outcome_for,
    redeploys_markdown,
)
from capserve.core.redeploy_rules import already_handled, refusal
from capserve.core.report import CampaignReport
from capserve.core.rollout.start_history import StartHistory, history_uri, shape_key
from capserve.core.settings import Settings
from capserve.core.spec import CampaignSpec
from capserve.core.stages import Stage
from capserve.core.weights.assembly import model_repo
from capserve.flows.campaign import (
    cluster_on_lease,
    evaluate_stage,
    rollout_inputs,
    rollout_stage,
    stage_image_stage,
    stage_weights_stage,
    weights_to_nodes_stage,
)
from capserve.flows.rollout import roll_back
from capserve.flows.window import campaign_record, recorded_spec
from capserve.tasks.locations import locations_for
from capserve.tasks.manifests import recording
from capserve.tasks.planning import plan_campaign, resolve_model
from capserve.tasks.record_store import change_record, load_record
from capserve.tasks.reporting import (
    campaign_report_dir,
    publish_redeploy,
    write_campaign_report,
    write_report_files,
)
from capserve.tasks.rollout.start_history import read_start_history
from capserve.tasks.settings import hub_endpoint_from_environment, settings_for, settings_from_environment
from capserve.tasks.slots import campaign_slot
from capserve.tasks.teardown.inventory import inventory_campaign
from capserve.tasks.the_clock import clock
from capserve.tasks.weights.hub import hub_connection, resolve_revision


@flow(name="redeploy", flow_run_name="redeploy-{campaign_id}", validate_parameters=True)
def redeploy(
    campaign_id: str,
    revision: str,
    trigger: str = "manual",
    region: str | None = None,
    hub_endpoint: str | None = None,
    out_dir: Path | None = None,
) -> RedeployEntry | State:
    """Stage, roll out and evaluate ``revision`` (a commit, branch or tag of the campaign's repo) on the running
    campaign, then promote it or roll back. ``region``: the campaign's home region (where its record lives;
    default ``CAPSERVE_RECORDS__REGION``). The drain window is judged at the campaign's clock's now.
    """
    base = settings_from_environment()
    home = region or base.records.region
    if not home:
        raise PermanentError(
            f"redeploy of campaign {campaign_id}: no region given: pass region (the campaign's home region, the "
            "first of its capacity.regions) or set CAPSERVE_RECORDS__REGION"
        )
    record, ref = campaign_record(campaign_id, home, base)
    _refuse(record)
    # The clock may hold while the redeploy works; the stages' subflows are tagged with the campaign.
    with clock().working(), campaign_runs(campaign_id), campaign_slot(campaign_id):
        record = load_record(ref) or record  # the slot may have been waited for: what did the last holder do?
        spec = recorded_spec(record)
        hub = hub_endpoint or hub_endpoint_from_environment()
        sha = _pin(spec, revision, hub, base.weights.hub_timeout_seconds)
        done = already_handled(record, sha)
        if done is not None:
            get_run_logger().info("redeploy of %s to %s: nothing to do (%s)", campaign_id, sha, done)
            return Completed(name="Skipped", message=done)
        _refuse(record, cluster_spec=spec, past=_past_starts(record, spec, base))
        # Unless told otherwise, beside the campaign's report (on this worker's host), a folder per revision.
        folder = campaign_report_dir(campaign_id) / "redeploys"
        options = RunOptions(
            out_dir=out_dir or folder / sha[:12], staging_dir=(out_dir or folder) / "staging", hub_endpoint=hub
        )
        ctx = CampaignContext(
            spec=_at_revision(spec, sha),
            settings=settings_for(spec, base),
            options=options,
            report=CampaignReport(campaign=campaign_id),
            record=record,  # changes stay local (never start_saving): the outcome is written once, below
            lease=record.lease,
        )
        with recording(options.out_dir / "manifests"):  # what this redeploy applied, beside its report
            return _redeploy(ctx, ref, sha, trigger)


def _past_starts(record: CampaignRecord, spec: CampaignSpec, base: Settings) -> StartHistory | None:
    """The measured vLLM starts of what serves now (a new revision keeps its shape), or None: the model predicts."""
    good = record.last_good_rollout
    if good is None or good.config is None:
        return None
    weights = spec.weights
    uri = history_uri(weights.s3_bucket, weights.s3_prefix, shape_key(good.config, weights.node_target))
    try:
        return read_start_history(uri, locations_for(spec, base.records).weights.region)
    except Exception as exc:  # noqa: BLE001 - a prediction's source must not stop the redeploy
        get_run_logger().warning("the measured vLLM starts could not be read (%s): the time model predicts the swap",
                                 f"{type(exc).__name__}: {exc}"[:500])
        return None


def _refuse(
    record: CampaignRecord, *, cluster_spec: CampaignSpec | None = None,
    past: StartHistory | None = None,
) -> None:
    """Raise the reason the campaign cannot be redeployed now; with ``cluster_spec``, AWS is asked for its cluster."""
    has_cluster = None
    if cluster_spec is not None and record.lease is not None:
        found = inventory_campaign(
            record.campaign_id,
            record.lease.region,
            kind=cluster_spec.cluster.kind,
            existing_cluster=cluster_spec.cluster.existing_cluster_name,
        )
        has_cluster = found.workload_cluster is not None and found.workload_cluster.endpoint is not None
    why = refusal(record, now=clock().now(), has_cluster=has_cluster, past=past)
    if why is not None:
        raise PermanentError(f"redeploy refused: {why}")


def _pin(spec: CampaignSpec, revision: str, hub_endpoint: str | None, timeout_s: float) -> str:
    """The commit ``revision`` names now (a sha names itself): what "already tried" is judged on."""
    return resolve_revision(hub_connection(hub_endpoint, None, timeout_s), model_repo(spec.model), revision)


def _at_revision(spec: CampaignSpec, sha: str) -> CampaignSpec:
    """The campaign's spec with the model pinned to ``sha`` (the record's spec is left as the person wrote it)."""
    document = spec.model_dump(mode="json")
    document["model"]["revision"] = sha
    return CampaignSpec.model_validate(document)


def _redeploy(ctx: CampaignContext, ref: RecordRef, sha: str, trigger: str) -> RedeployEntry:
    previous = need(ctx.record.last_good_rollout, Stage.ROLLOUT)
    serving = previous.config.revision_sha
    entry = _Entry(from_sha=serving, to_sha=sha, trigger=trigger, serving=serving)
    try:
        run_stage(ctx, Step(Stage.PLAN, _plan), recorded=False)
        run_stage(ctx, Step(Stage.STAGE_WEIGHTS, stage_weights_stage), recorded=False)
        run_stage(ctx, Step(Stage.STAGE_IMAGE, stage_image_stage), recorded=False)
        run_stage(ctx, Step(Stage.BRING_UP, cluster_on_lease), recorded=False)  # it exists: checked before
        run_stage(ctx, Step(Stage.WEIGHTS_TO_NODES, weights_to_nodes_stage), recorded=False)
        entry.serving = None  # from here on, what serves depends on how the rollout ends
        entry.rollout_began = clock().now()
        run_stage(ctx, Step(Stage.ROLLOUT, rollout_stage), recorded=False)
    except CapserveError as exc:
        _finish(ctx, ref, entry.ended("failed", f"{type(exc).__name__}: {exc}"))
        raise
    rolled = need(ctx.report.rollout, Stage.ROLLOUT)
    entry.strategy = rolled.attempts[0].strategy
    if rolled.rolled_back:  # it never became ready: the rollout put the last good configuration back itself
        entry.serving = previous.config.revision_sha
        failure = "; ".join(a.failure or "" for a in rolled.failed)
        return _finish(ctx, ref, entry.ended("rolled-back", f"the rollout failed: {failure}"),
                       good=ctx.record.last_good_rollout)
    new = need(ctx.record.last_good_rollout, Stage.ROLLOUT)  # what the rollout recorded (locally, not yet in S3)
    entry.serving = sha
    entry.ready_at, entry.cache = rolled.ready_at, str(rolled.compile_cache.get("result") or "")
    entry.start_s = rolled.startup.measured.to_listening_s if rolled.startup is not None else None
    entry.verdict, why = _evaluate(ctx)
    if outcome_for(entry.verdict) == "promoted":
        return _finish(ctx, ref, entry.ended("promoted", ""), good=new)
    entry.rollback_began = clock().now()  # the new colour goes, whatever the strategy: down until the old is back
    try:
        back, good = roll_back(replace(rollout_inputs(ctx), last_good=previous), new.color or "blue", why)
    except CapserveError as exc:
        entry.serving = None
        _finish(ctx, ref, entry.ended("failed", f"{why}; the rollback failed too: {exc}"))
        raise
    # The report's rollout says what serves now (the last good one) and lists every attempt, the failed one first.
    ctx.report.rollout = back.model_copy(update={"attempts": (*rolled.attempts, *back.attempts)})
    announce(ctx, rollout_event(about(ctx), "rolled-back", revision=sha, strategy=back.strategy, occurred=utc_now(),
                                detail=why, rolled_back_to=previous.config.revision_sha))
    entry.serving = previous.config.revision_sha
    return _finish(ctx, ref, entry.ended("rolled-back", why), good=good)


@dataclass
class _Entry:
    """The redeploy's entry while it runs."""

    from_sha: str
    to_sha: str
    trigger: str
    serving: str | None
    strategy: str = ""
    verdict: Verdict = "not-evaluated"
    started_at: datetime = field(default_factory=lambda: clock().now())
    rollout_began: datetime | None = None
    rollback_began: datetime | None = None
    ready_at: datetime | None = None  # the new revision's pods all ready
    start_s: float | None = None  # its vLLM start, as its log measured it
    cache: str = ""  # what its compile cache did: hit (a warm start), miss, off, unknown

    def ended(self, outcome: Outcome, detail: str) -> RedeployEntry:
        ended_at, down_from = clock().now(), self._down_from()
        phases = down_phases(down_from, ended_at, ready_at=self.ready_at, start_s=self.start_s, cache=self.cache,
                             rollback_began=self.rollback_began)
        return RedeployEntry(
            from_sha=self.from_sha, to_sha=self.to_sha, trigger=self.trigger[:100], strategy=self.strategy,
            verdict=self.verdict, outcome=outcome, serving_sha=self.serving, started_at=self.started_at,
            ended_at=ended_at, down_from=down_from, detail=detail[:2000], phases=phases,
        )

    def _down_from(self) -> datetime | None:
        """When the endpoint stopped serving an evaluated revision: a recreate rollout deletes the old pods first
        (as does one that failed before saying its strategy); otherwise the old revision served until a rollback
        after a failed gate began (None: it served throughout)."""
        if self.rollout_began is not None and self.strategy in ("recreate", ""):
            return self.rollout_began
        return self.rollback_began


def _plan(ctx: CampaignContext) -> ServingPlan:
    """The plan for the new revision (its geometry may differ); no preflight: nothing is bought."""
    model = resolve_model(ctx.spec.model, ctx.options.hub_endpoint)
    return plan_campaign(ctx.spec, model, ctx.settings.planner)


def _evaluate(ctx: CampaignContext) -> tuple[Verdict, str]:
    """The new revision's verdict, and why it is not promoted ('' when it passed)."""
    line_count = len(ctx.report.stages)
    try:
        run_stage(ctx, Step(Stage.EVALUATE, evaluate_stage), recorded=False)
    except CapserveError as exc:
        return "not-evaluated", f"its evaluation could not run: {exc}"
    evaluation = ctx.report.evaluation
    if evaluation is None:
        return "not-evaluated", ctx.report.stages[line_count].detail or "it was not evaluated"
    if evaluation.verdict == "pass":
        return "pass", ""
    failed = sorted({g.name for g in evaluation.gates if g.passed is False})
    gates = ", ".join(failed) or "none"
    return evaluation.verdict, f"its evaluation verdict is {evaluation.verdict} (gates failed: {gates})"


def _finish(
    ctx: CampaignContext, ref: RecordRef, entry: RedeployEntry, *, good: RolloutRecord | None = None
) -> RedeployEntry:
    """Write the outcome to the record (the last good rollout moves with it), then the redeploy's own report."""
    entry = entry.model_copy(update={"events": tuple(ctx.report.events[-50:])})
    changes = [lambda record: record.with_rollout(good)] if good is not None else []
    record = change_record(ref, [*changes, lambda record: record.with_redeploy(entry)])
    ctx.report.redeploys = list(record.redeploys)
    logger = get_run_logger()
    logger.info("redeploy of %s: %s → %s %s (%s)", ctx.spec.campaign_id, entry.from_sha[:12], entry.to_sha[:12],
                entry.outcome, entry.detail or entry.verdict)
    try:
        write_report_files(ctx.report, ctx.options.out_dir)
        publish_redeploy(ctx.spec.campaign_id, redeploys_markdown([entry]))
    except Exception:
        logger.exception("could not write the redeploy's report to %s", ctx.options.out_dir)
    try:  # the campaign's report, rendered from the record: this redeploy and its downtime in the block's ledger
        write_campaign_report(record)
    except Exception:  # the redeploy is done: a report that cannot be written is logged, not a failed redeploy
        logger.exception("could not write the campaign's report to %s", campaign_report_dir(record.campaign_id))
    return entry
