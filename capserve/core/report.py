"""The campaign report: what each stage did, when, and what it decided — a typed model end to end.

``report.json`` is a contract: ``{"campaign", "stages": [...], <one key per section>...}``, each section
written by the stage that produced it, in campaign order; ``report.md`` is the same for a person. The
sections are the stages' own typed results (``ClusterResult``, ``WeightsResult``, …), declared below as
optional fields with a ``Section`` marker. Adding one is a field here and a stage returning it::

    rollout: Annotated[RolloutResult | None, Section("Rollout")] = None

A section's JSON is its ``report_section()`` under the field's name and its markdown its ``markdown()``
(``Section`` takes other functions where a result spells them differently).

Two lists close it: ``"events"`` (the lifecycle events this run sent) and ``"redeploys"`` (every redeploy of
the campaign, copied from its record when the report is written, whichever run did them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from capserve.core.approval import Approval
from capserve.core.capacity.result import AcquireResult
from capserve.core.cluster.result import ClusterResult, PreparedCluster
from capserve.core.cost.ledger import CostLedger
from capserve.core.evaluation.result import EvaluationResult
from capserve.core.events import CapserveEvent
from capserve.core.markdown import markdown_table, without_images
from capserve.core.plan_check import plan_markdown
from capserve.core.planner.plan import ServingPlan
from capserve.core.redeploy import RedeployEntry, redeploys_markdown
from capserve.core.rehearsal import RehearsalRecord
from capserve.core.rollout.image import ImageMirrorResult
from capserve.core.rollout.result import RolloutResult
from capserve.core.schedule import LeaseSchedule
from capserve.core.stages import Stage, StageStatus
from capserve.core.teardown.result import TeardownResult
from capserve.core.weights.node_staging import NodeStagingResult
from capserve.core.weights.result import WeightsResult

__all__ = ["CampaignReport", "Section", "StageRecord", "StageStatus", "markdown_table"]


class Reportable(Protocol):
    def report_section(self) -> Any: ...

    def markdown(self) -> str: ...


@dataclass(frozen=True)
class Section:
    """Marks a report field as a section: its markdown title (None when the markdown brings its own
    ``##`` heading), and how to render it when the result does not spell it ``report_section``/``markdown``."""

    title: str | None
    to_json: Callable[[Any], dict[str, Any]] | None = None
    to_markdown: Callable[[Any], str] | None = None

    def json_of(self, key: str, value: Reportable) -> dict[str, Any]:
        return self.to_json(value) if self.to_json else {key: value.report_section()}

    def markdown_of(self, value: Reportable) -> str:
        return self.to_markdown(value) if self.to_markdown else value.markdown()


def _plan_json(plan: ServingPlan) -> dict[str, Any]:
    return {"plan": plan.to_json()}


def _acquire_json(acquired: AcquireResult) -> dict[str, Any]:
    return acquired.report_sections()


COST_PLOTS = ("cost_timeline.png", "cost_waterfall.png")
"""The ledger's PNGs, written next to report.md (capserve/tasks/cost/plots.py) when there was a block."""


def _cost_markdown(ledger: CostLedger) -> str:
    """The ledger's section, how to read it, and its two plots (drawn only when there was a block)."""
    text = ledger.markdown().rstrip()
    text += "\n\nHow to read this section: docs/cost.md §1 (in the capserve repository)."
    if ledger.window is not None:
        timeline, waterfall = COST_PLOTS
        text += f"\n\n![reservation timeline]({timeline})\n\n![cost waterfall]({waterfall})"
    return text + "\n"


EVALUATION_DIR = "evaluation"
"""Where the evaluation writes its files, under the report's folder (capserve/flows/campaign.py)."""


def _evaluation_markdown(result: EvaluationResult) -> str:
    """The evaluation's section with its plots as images, relative to report.md (the summary names their files)."""
    text = result.model_copy(update={"plots": []}).markdown().rstrip()
    images = [f"![{Path(p).stem}]({EVALUATION_DIR}/{Path(p).name})" for p in result.plots]
    return text + ("\n\n" + "\n\n".join(images) if images else "") + "\n"


class TimelineRow(BaseModel):
    """One line of the report's first table and one bar of timeline.png: a stage of this run, or what another run
    of the campaign did for it before (the purchase, the cluster's preparation)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    what: str = Field(max_length=64, description="The stage, 'purchase' or 'prepare_cluster'.")
    run: str = Field(max_length=200, description="The run that did it ('this run' for this report's stages).")
    status: StageStatus = Field(description="How it ended.")
    started_at: datetime = Field(description="Start, on the campaign's clock.")
    ended_at: datetime | None = Field(None, description="End, on the campaign's clock (None while running).")


class StageRecord(BaseModel):
    """One stage's line in the report."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    name: Stage = Field(description="The stage.")
    status: StageStatus = Field(description="How it ended (or 'running').")
    started_at: datetime = Field(description="UTC start.")
    ended_at: datetime | None = Field(None, description="UTC end; None while running.")
    detail: str | None = Field(None, max_length=4000, description="Why it failed, stopped or was skipped.")

    def report_json(self) -> dict[str, Any]:
        return {
            "name": self.name.value,
            "status": self.status.value,
            "started_at": self.started_at.isoformat(),
            "ended_at": self.ended_at.isoformat() if self.ended_at else None,
            **({"detail": self.detail} if self.detail else {}),
        }


class CampaignReport(BaseModel):
    """The report of one campaign run: the stages, then one typed section per stage that produced one."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    campaign: str = Field(min_length=1, max_length=64, description="The campaign id.")
    stages: list[StageRecord] = Field(default_factory=list, max_length=64, description="Stages, in run order.")
    plan: Annotated[ServingPlan | None, Section("Plan", to_json=_plan_json, to_markdown=plan_markdown)] = Field(
        None, description="The serving plan."
    )
    acquire: Annotated[AcquireResult | None, Section(None, to_json=_acquire_json)] = Field(
        None, description="The lease and the offers considered (report.json keys 'lease', 'offers_considered')."
    )
    schedule: Annotated[LeaseSchedule | None, Section("Scheduled runs", to_json=LeaseSchedule.report_json)] = Field(
        None, description="The runs the lease scheduled: bring-up, drain, hard teardown (report.json 'schedule')."
    )
    weights: Annotated[WeightsResult | None, Section("Weights")] = Field(None, description="Weights in S3.")
    image: Annotated[ImageMirrorResult | None, Section("Image")] = Field(
        None, description="The serving image in the block's region, by digest."
    )
    prepared: Annotated[PreparedCluster | None, Section("Before the block")] = Field(
        None, description="The cluster's preparation before the block (its scheduled run, from the record)."
    )
    cluster: Annotated[ClusterResult | None, Section("Cluster")] = Field(None, description="The cluster.")
    node_staging: Annotated[NodeStagingResult | None, Section("Weights on the nodes")] = Field(
        None, description="Each node's copy of its weights."
    )
    rollout: Annotated[RolloutResult | None, Section("Rollout")] = Field(
        None, description="What serves, how it was reached, what failed and was rolled back."
    )
    evaluation: Annotated[EvaluationResult | None, Section(None, to_markdown=_evaluation_markdown)] = Field(
        None, description="The verdict."
    )
    teardown: Annotated[TeardownResult | None, Section("Teardown")] = Field(None, description="What was deleted.")
    rehearsal: Annotated[RehearsalRecord | None, Section("Rehearsal")] = Field(
        None, description="A rehearsal run's result, checks and cost (`capserve rehearse`; docs/rehearsal.md)."
    )
    cost: Annotated[CostLedger | None, Section(None, to_markdown=_cost_markdown)] = Field(
        None, description="What the reservation cost, what it served and where the paid GPU-hours went."
    )
    events: list[CapserveEvent] = Field(
        default_factory=list, max_length=1000, description="Lifecycle events this run sent, in order."
    )
    redeploys: list[RedeployEntry] = Field(
        default_factory=list,
        max_length=256,
        description="The campaign's redeploys, from its record (report.json 'redeploys'; capserve.core.redeploy).",
    )
    approvals: list[Approval] = Field(
        default_factory=list, max_length=256,
        description="Every decision a person made for the campaign, from its record (report.json 'approvals').",
    )

    # ------------------------------------------------------------------ sections

    @classmethod
    def sections(cls) -> dict[str, Section]:
        """Section fields, in report order."""
        return {
            name: marker
            for name, field in cls.model_fields.items()
            for marker in field.metadata
            if isinstance(marker, Section)
        }

    @classmethod
    def section_of(cls, value: BaseModel) -> str:
        """The one section that holds a result of ``value``'s type."""
        for name in cls.sections():
            if isinstance(value, _section_types(cls.model_fields[name].annotation)):
                return name
        raise TypeError(f"no report section holds a {type(value).__name__}")

    def add(self, value: BaseModel) -> None:
        """Put a stage's result into the one section of its type; a section is written once."""
        name = self.section_of(value)
        if getattr(self, name) is not None:
            raise ValueError(f"report section {name!r} is already written")
        setattr(self, name, value)

    # ------------------------------------------------------------------ stages

    def begin(self, stage: Stage, now: datetime | None = None) -> StageRecord:
        record = StageRecord(name=stage, status=StageStatus.RUNNING, started_at=now or _now())
        self.stages.append(record)
        return record

    def end(
        self, record: StageRecord, status: StageStatus, detail: str | None = None, now: datetime | None = None
    ) -> None:
        record.status = status
        record.detail = detail[:4000] if detail else None
        record.ended_at = now or _now()

    def skip(self, stage: Stage, why: str, now: datetime | None = None) -> None:
        """Record a stage that did not run, and why (a person reading the report must not have to guess)."""
        record = self.begin(stage, now)
        self.end(record, StageStatus.SKIPPED, why, record.started_at)

    def status_of(self, stage: Stage) -> StageStatus | None:
        """The last status of ``stage`` in this run (None: it did not appear)."""
        found = [s.status for s in self.stages if s.name is stage]
        return found[-1] if found else None

    # ------------------------------------------------------------------ rendering

    def timeline_rows(self) -> list[TimelineRow]:
        """The campaign's story in time order: the purchase and the cluster's preparation when other runs did them
        (a scheduled serve run adopts the lease the campaign run bought), then this run's stages."""
        rows = [TimelineRow(what=s.name.value, run="this run", status=s.status, started_at=s.started_at,
                            ended_at=s.ended_at) for s in self.stages]
        bought = self.acquire
        if bought is not None and bought.adopted_by and bought.bought_by and bought.bought_at is not None:
            rows.append(TimelineRow(what="purchase", run=bought.bought_by, status=StageStatus.COMPLETED,
                                    started_at=bought.bought_at, ended_at=bought.bought_at))
        if self.prepared is not None:
            rows.append(TimelineRow(what="prepare_cluster", run=self.prepared.run, status=StageStatus.COMPLETED,
                                    started_at=self.prepared.started_at, ended_at=self.prepared.ended_at))
        return sorted(rows, key=lambda r: r.started_at)

    def event_rows(self) -> list[dict[str, object]]:
        """report.md's Events table: the events sent (by this run, and by the redeploys the record holds), and what
        other runs did for the campaign before them (the purchase when the lease was adopted, the cluster's
        preparation), in time order; a scheduled serve run sent neither event."""
        rows = [(event.occurred, f"`{event.event}`") for event in self.events]
        bought = self.acquire
        if bought is not None and bought.adopted_by and bought.bought_at is not None:
            reservation = bought.lease.reservation_id if bought.lease is not None else None
            rows.append((bought.bought_at, f"purchase: `{reservation}` by run {bought.bought_by}"))
        if self.prepared is not None:
            rows.append((self.prepared.started_at, f"cluster preparation began (run {self.prepared.run})"))
            rows.append((self.prepared.ended_at, "cluster prepared"))
        return [{"occurred (UTC)": f"{at:%Y-%m-%d %H:%M:%S}", "event": what} for at, what in sorted(rows)]

    def block(self) -> tuple[datetime, datetime] | None:
        """The block's start and end (None before a lease)."""
        lease = self.acquire.lease if self.acquire is not None else None
        return (lease.start, lease.end) if lease is not None else None

    def to_json(self) -> dict[str, Any]:
        """report.json."""
        out: dict[str, Any] = {"campaign": self.campaign, "stages": [s.report_json() for s in self.stages]}
        for name, marker in self.sections().items():
            value = getattr(self, name)
            if value is not None:
                out.update(marker.json_of(name, value))
        out["events"] = [e.report_entry() for e in self.events]
        out["redeploys"] = [r.report_entry() for r in self.redeploys]
        if self.approvals:
            out["approvals"] = [a.model_dump(mode="json") for a in self.approvals]
        return out

    def to_markdown(self, *, images: bool = True) -> str:
        """report.md; ``images=False`` leaves out the links to PNG files (the Prefect artifact cannot show
        them: it carries the same content as tables)."""
        lines = [f"# Campaign `{self.campaign}`", ""]
        block = self.block()
        if block is not None:
            lines += [f"Block: {block[0]:%Y-%m-%d %H:%M} → {block[1]:%Y-%m-%d %H:%M} UTC. Every time in this report "
                      "is on the campaign's clock (the block's).", ""]
        lines += ["| stage | run | status | started (UTC) | block time | took |", "|---|---|---|---|---|---|"]
        for r in self.timeline_rows():
            took = _took(r.ended_at - r.started_at) if r.ended_at and r.ended_at > r.started_at else "—"
            since = _block_time(r.started_at, block[0]) if block is not None else "—"
            lines.append(f"| {r.what} | {r.run} | {r.status.value} | {r.started_at:%Y-%m-%d %H:%M:%S} | {since} "
                         f"| {took} |")
        for s in self.stages:
            if s.status in (StageStatus.FAILED, StageStatus.INTERRUPTED):
                lines += ["", f"**{s.name.value} {s.status.value}:** {s.detail}"]
        if self.stages and images:
            lines += ["", "![timeline](timeline.png)"]
        for name, marker in self.sections().items():
            value = getattr(self, name)
            if value is None:
                continue
            body = marker.markdown_of(value)
            if body:
                lines += ["", f"## {marker.title}", ""] if marker.title else [""]
                lines.append(body.rstrip())
        if self.approvals:
            rows = [{"stage": a.stage.value, "about": a.subject, "approved": "yes" if a.approved else "no",
                     "by": a.approver or "—", "at": a.decided_at.isoformat(), "note": a.note} for a in self.approvals]
            lines += ["", "## Approvals", "", markdown_table(rows).rstrip()]
        if self.redeploys:
            lines += ["", "## Redeploys", "", redeploys_markdown(self.redeploys).rstrip()]
        events = self.event_rows()
        if events:
            lines += ["", "## Events", "", markdown_table(events).rstrip()]
        text = "\n".join(lines)
        if not images:
            text = without_images(text)
        return text + "\n"


def _took(span: timedelta) -> str:
    """A duration as the first table shows it: seconds under a minute, else minutes (or hours and minutes)."""
    seconds = span.total_seconds()
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"


def _block_time(at: datetime, block_start: datetime) -> str:
    """``at`` against the block's start: ``block +02:14`` (hours:minutes), ``block −1d 00:50`` before it."""
    minutes = round((at - block_start).total_seconds() / 60)
    sign = "+" if minutes >= 0 else "−"
    days, rest = divmod(abs(minutes), 24 * 60)
    return f"block {sign}{f'{days}d ' if days else ''}{rest // 60:02d}:{rest % 60:02d}"


def _section_types(annotation: Any) -> tuple[type, ...]:
    return tuple(t for t in getattr(annotation, "__args__", (annotation,)) if t is not type(None))


def _now() -> datetime:
    return datetime.now(UTC)
