"""Running a campaign's stages: timing and recording each, skipping what cannot run, and ending safely.

The rules (decided in ``capserve.core.sequencing``, applied here):

- each stage is timed in the report and recorded in the campaign record (status, start, end, inputs
  digest, outputs); a stage blocked by missing or not-yet-active capacity is skipped together with
  every stage after it, for one reason;
- only a ``CapserveError`` raised by a stage (it failed on its own merits) tears down at once
  ("failed-stage"); an interruption (Ctrl-C, SIGTERM, a Prefect cancellation, a broken output pipe)
  leaves the cluster to the scheduled teardown and the reaper, and the report and record say so;
- an error while tearing down after a failure never replaces the failure, and the report is always
  written, with the cost ledger of the run (``capserve.campaign.cost``; 0 when no capacity was obtained) and
  the campaign's redeploys as its record holds them (a redeploy run appends to the record, not to this report);
  a run that adopted the lease an earlier run bought reports that purchase (offers considered, the chosen one,
  the fee, the run that bought it) from the record too, and says it adopted it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from prefect.exceptions import Pause, TerminationSignal
from prefect.runtime import flow_run
from prefect.settings import PREFECT_UI_URL
from pydantic import BaseModel, JsonValue

from capserve.campaign.context import CampaignContext
from capserve.campaign.cost import campaign_ledger
from capserve.campaign.reuse import reuse_unchanged
from capserve.campaign.run_names import campaign_runs
from capserve.core.block_cost import with_record
from capserve.core.errors import CapserveError
from capserve.core.record import StageEntry, stage_outputs
from capserve.core.report import StageRecord
from capserve.core.sequencing import blocked_by, decide_ending
from capserve.core.stages import Stage, StageStatus
from capserve.core.teardown.result import TeardownReason
from capserve.tasks.manifests import recording
from capserve.tasks.record_store import load_record
from capserve.tasks.reporting import publish_report, write_report_files
from capserve.tasks.run_log import run_logger
from capserve.tasks.the_clock import clock


@dataclass(frozen=True)
class StageEnd:
    """What a stage returns when it ends without (all of) its result: skipped or stopped, and why."""

    status: StageStatus
    why: str
    section: BaseModel | None = None


StageOutput = BaseModel | StageEnd


@dataclass(frozen=True)
class Step:
    """One stage of a campaign: its name and the function that runs it."""

    stage: Stage
    run: Callable[[CampaignContext], StageOutput]


TearDown = Callable[[CampaignContext, TeardownReason], StageOutput]


def run_campaign(ctx: CampaignContext, steps: Sequence[Step], tear_down: TearDown) -> None:
    """Run ``steps`` in order, then end the run (tear down or not, by the rules above) and write the report.

    Every object applied meanwhile is written to ``<out_dir>/manifests/`` (``capserve.tasks.manifests``):
    here, not in one flow, because the add-ons are applied by whichever run brings the cluster up (the
    ``campaign`` run with ``--teardown-when-done``, else the ``serve`` run the lease schedules, in a worker).
    """
    error: BaseException | None = None
    # Every stage subflow is tagged with the campaign (filtering the UI by the tag finds the whole story).
    with campaign_runs(ctx.spec.campaign_id), recording(ctx.options.out_dir / "manifests"):
        try:
            run_steps(ctx, steps)
        except BaseException as exc:
            error = exc
            raise
        finally:
            finish(ctx, error, tear_down)


def run_steps(ctx: CampaignContext, steps: Sequence[Step]) -> None:
    for index, step in enumerate(steps):
        why = blocked_by(step.stage, lease=ctx.lease, state=ctx.reservation_state, no_capacity=ctx.no_capacity)
        if why is not None:
            for later in steps[index:]:
                skip_stage(ctx, later.stage, why)
            return
        run_stage(ctx, step)


def run_stage(ctx: CampaignContext, step: Step, *, recorded: bool = True) -> None:
    """Run one stage: timed in the report, recorded (from acquire on, in S3), its result put in its section.

    ``recorded=False`` (a redeploy): the campaign record is left alone and nothing is reused from it; the
    redeploy writes its outcome to the record once, at its end (``capserve.flows.redeploy``)."""
    if recorded and Stage.PLAN.precedes(step.stage):
        ctx.start_saving()  # the campaign reaches the cloud: from here on the record is kept in S3
    digest = ctx.record.inputs_digest(step.stage, ctx.spec)
    if recorded and reuse_unchanged(ctx, step.stage, digest):
        return  # unchanged since its last run and its outputs verify (capserve.campaign.reuse)
    line = ctx.report.begin(step.stage, clock().now())
    if recorded:
        _record(ctx, step.stage, line, digest)
    try:
        output = step.run(ctx)
    except BaseException as caught:
        exc = what_stopped(caught)
        status = StageStatus.FAILED if isinstance(exc, CapserveError) else StageStatus.INTERRUPTED
        ctx.report.end(line, status, f"{type(exc).__name__}: {exc}", _now_quietly())
        if recorded:
            _record(ctx, step.stage, line, digest, quietly=True)
        if exc is caught:
            raise
        raise exc from None
    section = output.section if isinstance(output, StageEnd) else output
    if section is not None:
        ctx.report.add(section)
    if isinstance(output, StageEnd):
        ctx.report.end(line, output.status, output.why, clock().now())
    else:
        ctx.report.end(line, StageStatus.COMPLETED, now=clock().now())
    if recorded:
        _record(ctx, step.stage, line, digest, outputs=stage_outputs(step.stage, section))


# What stops a run from outside (Ctrl-C, SIGTERM, a host going down), as opposed to an error of the run's own.
_INTERRUPTIONS = (KeyboardInterrupt, SystemExit, TerminationSignal)


def what_stopped(error: BaseException) -> BaseException:
    """The interruption behind ``error`` when Prefect turned one into another error on its way out, else ``error``.

    A SIGTERM that lands while Prefect's task engine is still creating a task run is handled as the crash of a
    task run that does not exist yet, and comes out as ``ValueError: Task run is not set`` raised while handling
    the ``TerminationSignal`` (``prefect.task_engine``, ``initialize_run``). Taken at its word, the flow run
    would end Failed, for an error that is not the run's; re-raised as the signal, it ends Crashed, as every
    other stopped run does (what the automations and the person at the UI react to).
    """
    if isinstance(error, _INTERRUPTIONS):
        return error
    seen: set[int] = set()
    behind = error.__context__
    while behind is not None and id(behind) not in seen:
        if isinstance(behind, _INTERRUPTIONS):
            return behind
        seen.add(id(behind))
        behind = behind.__context__
    return error


def skip_stage(ctx: CampaignContext, stage: Stage, why: str) -> None:
    ctx.report.skip(stage, why, clock().now())
    ctx.save(lambda record: record.with_stage(stage, StageEntry(status=StageStatus.SKIPPED, detail=why[:4000])))


def finish(ctx: CampaignContext, error: BaseException | None, tear_down: TearDown) -> None:
    """Tear down when the rules say so, say why when they do not, and write the report (always)."""
    resources_made = any(
        line.name.leaves_resources and line.status is not StageStatus.SKIPPED for line in ctx.report.stages
    )
    ending = decide_ending(
        error,
        resources_made=resources_made,
        teardown_when_done=ctx.options.teardown_when_done,
        awaiting_approval=isinstance(error, Pause),
    )
    try:
        if ending.teardown is not None and ctx.lease is not None:
            _tear_down(ctx, ending.teardown, tear_down, first_error=error)
        elif ending.asks_a_person:
            # A question for a person, not a fault: INFO, with where to answer it.
            run_logger(__name__).info("%s", approval_question(ctx.spec.campaign_id, this_run_page()))
        elif error is not None and ending.why:
            _explain_interruption(ctx, ending.why)
    finally:
        _add_from_record(ctx)  # first: the ledger counts the redeploys' downtime
        # A run suspended for approval is not interrupted: it resumes, and may ask AWS for prices meanwhile.
        _add_cost(ctx, interrupted=error is not None and not isinstance(error, (CapserveError, Pause)))
        _write_report(ctx, quietly=error is not None)


def approval_question(campaign_id: str, page: str | None) -> str:
    """What the log says while the run waits for a person to approve its purchase."""
    where = f"in the UI at {page}" if page else "in the Prefect UI, on this run's page"
    return (
        f"campaign {campaign_id}: waiting for approval: buy the capacity on offer? Approve or reject {where} "
        "(the form of this run); the run resumes with the answer, and nothing is bought until then"
    )


def this_run_page() -> str | None:
    """The Prefect UI's page of the current flow run (None outside a run, or with no UI URL configured)."""
    if not PREFECT_UI_URL.value() or flow_run.get_id() is None:
        return None
    page: str | None = flow_run.ui_url
    return page


def _tear_down(
    ctx: CampaignContext, reason: TeardownReason, tear_down: TearDown, *, first_error: BaseException | None
) -> None:
    """Tear down now. While another error is on its way out, a teardown failure is recorded and logged but does
    not replace it (the scheduled teardown and the reaper still stand behind it)."""
    try:
        run_stage(ctx, Step(Stage.TEARDOWN, lambda context: tear_down(context, reason)))
    except CapserveError:
        if first_error is None:
            raise
        run_logger(__name__).exception(
            "teardown after a failed stage did not finish; the scheduled teardown and the reaper stay"
        )


def _explain_interruption(ctx: CampaignContext, why: str) -> None:
    """Say in the report (on the interrupted stage) and in the record why nothing was torn down."""
    interrupted = [line for line in ctx.report.stages if line.status is StageStatus.INTERRUPTED]
    if not interrupted:
        return
    run_logger(__name__).warning("campaign %s: %s", ctx.spec.campaign_id, why)
    line = interrupted[-1]
    line.detail = f"{line.detail}; {why}"[:4000]
    _record(ctx, line.name, line, ctx.record.inputs_digest(line.name, ctx.spec), quietly=True)


def _record(
    ctx: CampaignContext,
    stage: Stage,
    line: StageRecord,
    digest: str,
    *,
    outputs: dict[str, JsonValue] | None = None,
    quietly: bool = False,
) -> None:
    """The stage's line, as the record keeps it. ``quietly``: while another error is on its way out, a failed
    write is logged, not raised (the record is a convenience; the cloud's tags stay the truth)."""
    entry = StageEntry(
        status=line.status,
        started_at=line.started_at,
        ended_at=line.ended_at,
        inputs_digest=digest,
        outputs=outputs or {},
        detail=(line.detail or "")[:4000],
    )
    try:
        ctx.save(lambda record: record.with_stage(stage, entry))
    except Exception:
        if not quietly:
            raise
        run_logger(__name__).exception("could not record the %s stage in the campaign record", stage.value)


def _add_cost(ctx: CampaignContext, *, interrupted: bool) -> None:
    """The cost ledger into the report. The report is written without it rather than not at all."""
    try:
        campaign_ledger(ctx, interrupted=interrupted)
    except Exception:  # noqa: BLE001 - the report is written without the ledger rather than not at all (logged with its traceback)
        run_logger(__name__).exception("could not compute the cost ledger of campaign %s", ctx.spec.campaign_id)


def _add_from_record(ctx: CampaignContext) -> None:
    """The redeploys and approvals the record holds (capserve.core.redeploy), the cluster's preparation before the
    block and the purchase of the lease this run adopted: other runs write them there, never to this run's report,
    so the report a campaign writes lists every redeploy made and decision given until then, and how its capacity
    was bought, whichever run writes it (the runs may execute on different workers: the record, not a report file
    on one host, carries them)."""
    if not ctx.saving:
        return  # the record never reached S3: no redeploy can have found the campaign
    try:
        record = load_record(ctx.record_ref)
    except Exception:  # noqa: BLE001 - a record that cannot be read costs the report its redeploys, not the report (logged)
        run_logger(__name__).exception(
            "could not read the redeploys of campaign %s from its record", ctx.spec.campaign_id
        )
        return
    if record is not None:
        ctx.report = with_record(ctx.report, record)


def _write_report(ctx: CampaignContext, *, quietly: bool) -> None:
    try:
        json_path, md_path = write_report_files(ctx.report, ctx.options.out_dir)
        run_logger(__name__).info("report: %s and %s", json_path, md_path)
        publish_report(ctx.report)
    except Exception:
        if not quietly:
            raise
        run_logger(__name__).exception("could not write the whole report to %s", ctx.options.out_dir)


def _now_quietly() -> datetime:
    """The campaign's clock while an error is on its way out: the host's if that clock cannot be read."""
    try:
        return clock().now()
    except Exception:  # noqa: BLE001  # never hide the error that ended the stage
        return datetime.now(UTC)
