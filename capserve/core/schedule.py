"""The runs a lease schedules on the Prefect server, decided as data (docs/prefect.md §11).

The moment a campaign holds a lease it knows every waypoint of the block: the cluster's preparation before
the start (what needs no GPU: network, IAM, control plane, system nodes; ``cluster_lead``), bring-up at the
start (minus a lead), drain at end − 45 min, hard teardown at end − 35 min (AWS terminates the instances at
end − 30).
Each becomes a one-off flow run of its own deployment, named ``<stage>-<campaign>``, tagged with the
campaign, given only the campaign id, region and reservation id (a pending run must survive a change of
the spec's schema), and created with an idempotency key that holds the reservation id and the time:

- a re-run asks for the same keys, so the server hands back the runs it already has (no duplicates);
- a changed lease asks for new keys; the runs of the old lease that have not started are cancelled;
- a finished campaign cancels what it no longer needs (nothing to bring up or drain once torn down).

``planned_runs`` decides what should exist, ``reconcile`` compares it with what the server has; the
task in ``capserve.tasks.scheduling`` only reads and writes.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from capserve.core.lease import Lease
from capserve.core.markdown import markdown_table
from capserve.core.spec import CampaignSpec, TeardownSpec
from capserve.core.timeline import TimeFigures

AWS_TERMINATES_BEFORE_END = timedelta(minutes=30)
"""EC2 starts terminating a Capacity Block's instances 30 minutes before its end (docs/aws-capacity.md)."""

SCHEDULED_TAG = "capserve.io/scheduled"
"""Tag on every run a lease schedules: how ``reconcile`` tells them from runs a person started."""


class ScheduledStage(enum.StrEnum):
    """What a scheduled run does (the report's ``schedule[].stage``)."""

    PREPARE_CLUSTER = "prepare_cluster"
    BRING_UP = "bring_up"
    DRAIN = "drain"
    TEARDOWN = "teardown"


DEPLOYMENTS: dict[ScheduledStage, str] = {
    ScheduledStage.PREPARE_CLUSTER: "prepare-cluster/prepare-cluster",
    ScheduledStage.BRING_UP: "serve/serve",
    ScheduledStage.DRAIN: "drain/drain",
    ScheduledStage.TEARDOWN: "scheduled-teardown/scheduled-teardown",
}
"""The deployment (``flow/name`` in capserve/deployments/prefect.yaml) each scheduled run belongs to."""

RUN_PREFIX: dict[ScheduledStage, str] = {
    ScheduledStage.PREPARE_CLUSTER: "prepare-cluster",
    ScheduledStage.BRING_UP: "serve",
    ScheduledStage.DRAIN: "drain",
    ScheduledStage.TEARDOWN: "teardown",
}

PENDING_STATES = frozenset({"SCHEDULED", "PENDING"})
"""Prefect state types of a run that has not started yet: the only ones a reschedule may cancel."""


def campaign_tag(campaign_id: str) -> str:
    return f"capserve.io/campaign={campaign_id}"


def run_name(stage: ScheduledStage, campaign_id: str) -> str:
    return f"{RUN_PREFIX[stage]}-{campaign_id}"


class PlannedRun(BaseModel):
    """One run the lease needs on the server."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    stage: ScheduledStage = Field(description="What the run does.")
    name: str = Field(min_length=1, max_length=200, description="The run's name: '<stage>-<campaign>'.")
    deployment: str = Field(min_length=3, max_length=200, description="'flow/deployment' the run belongs to.")
    scheduled_at: AwareDatetime = Field(description="When it fires, in the campaign's clock.")
    idempotency_key: str = Field(min_length=1, max_length=400, description="Campaign, stage, reservation, time.")
    parameters: dict[str, str] = Field(description="Only campaign_id, region and reservation_id.")
    tags: tuple[str, ...] = Field(max_length=8, description="The campaign's tag and the scheduled-run tag.")


PREPARE_MARGIN = 2.0
"""The cluster's preparation starts this many times its modelled length before bring-up. EKS's own figure is an
average (docs/timeline.md §1), the network and IAM come first, and the two sides of the bet are far apart: starting
early costs the control plane and two small system nodes (about $0.30 an hour, docs/cost.md §4), a preparation
still running at the block's start costs the block's GPU minutes."""


def cluster_lead(spec: CampaignSpec, figures: TimeFigures | None = None) -> timedelta | None:
    """How long before bring-up the cluster's preparation runs: the control plane, the system nodes and the
    add-ons of the time model, times ``PREPARE_MARGIN``, in whole 5 minutes. None when the campaign uses an existing
    cluster (nothing to prepare)."""
    if spec.cluster.existing_cluster_name is not None:
        return None
    f = figures or TimeFigures()
    seconds = (f.control_plane_s + f.system_nodes_s + f.addons_s) * PREPARE_MARGIN
    return timedelta(minutes=5 * math.ceil(seconds / 300))


def planned_runs(
    campaign_id: str,
    lease: Lease,
    teardown: TeardownSpec,
    *,
    bring_up_lead: timedelta = timedelta(0),
    prepare_lead: timedelta | None = None,
) -> tuple[PlannedRun, ...]:
    """The runs of ``lease``: the cluster's preparation at start − bring-up lead − ``prepare_lead`` (when given),
    bring-up at start − lead, drain and hard teardown before the end."""
    bring_up_at = lease.start - bring_up_lead
    prepare = {ScheduledStage.PREPARE_CLUSTER: bring_up_at - prepare_lead} if prepare_lead is not None else {}
    times = {
        **prepare,
        ScheduledStage.BRING_UP: bring_up_at,
        ScheduledStage.DRAIN: teardown.drain_at(lease.end),
        ScheduledStage.TEARDOWN: teardown.teardown_at(lease.end),
    }
    parameters = {"campaign_id": campaign_id, "region": lease.region, "reservation_id": lease.reservation_id}
    return tuple(
        PlannedRun(
            stage=stage,
            name=run_name(stage, campaign_id),
            deployment=DEPLOYMENTS[stage],
            scheduled_at=at,
            idempotency_key=idempotency_key(campaign_id, stage, lease.reservation_id, at),
            parameters=parameters,
            tags=(campaign_tag(campaign_id), SCHEDULED_TAG),
        )
        for stage, at in times.items()
    )


SERVE_WORKS = timedelta(minutes=90)
"""How long the serve run is expected to work from bring-up: its bring-up, rollout and first evaluation
(docs/prefect.md §14)."""


def expected_work(planned: Sequence[PlannedRun], lease_end: datetime) -> list[tuple[datetime, datetime]]:
    """The spans of the block in which the campaign's runs are expected to work, beyond the instants they are due:
    the serve run from bring-up, and the hard teardown until a few minutes past AWS's termination at end − 30 min
    (it must be done before then). The clock is told them with the due instants (``capserve.core.clock``)."""
    spans = []
    terminates = lease_end - AWS_TERMINATES_BEFORE_END
    for run in planned:
        if run.stage is ScheduledStage.BRING_UP:
            spans.append((run.scheduled_at, run.scheduled_at + SERVE_WORKS))
        elif run.stage is ScheduledStage.TEARDOWN and run.scheduled_at < terminates:
            spans.append((run.scheduled_at, terminates + timedelta(minutes=5)))
    return spans


def idempotency_key(campaign_id: str, stage: ScheduledStage, reservation_id: str, at: datetime) -> str:
    """Same lease, same key: the server returns the run it has. A moved lease makes a new key."""
    return f"capserve:{campaign_id}:{stage.value}:{reservation_id}:{at.isoformat()}"


class ExistingRun(BaseModel):
    """A run the server already has for the campaign (read by its tags)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    flow_run_id: str = Field(min_length=1, max_length=64, description="Prefect flow run id.")
    name: str = Field(max_length=200, description="The run's name.")
    idempotency_key: str | None = Field(None, max_length=400, description="The key it was created with.")
    state_type: str = Field(max_length=40, description="Prefect state type (SCHEDULED, RUNNING, …).")
    state_name: str = Field("", max_length=80, description="Prefect state name.")
    scheduled_at: AwareDatetime | None = Field(None, description="Its expected start.")
    started_at: AwareDatetime | None = Field(None, description="When it started, if it did.")

    @property
    def pending(self) -> bool:
        return self.state_type in PENDING_STATES


@dataclass(frozen=True)
class ScheduleActions:
    """What ``reconcile`` decided: runs to create, runs the server already has, runs to cancel."""

    create: tuple[PlannedRun, ...]
    keep: tuple[tuple[PlannedRun, ExistingRun], ...]
    cancel: tuple[ExistingRun, ...]


def reconcile(
    planned: Sequence[PlannedRun], existing: Iterable[ExistingRun], *, no_longer_needed: Iterable[ScheduledStage] = ()
) -> ScheduleActions:
    """Match ``planned`` runs to ``existing`` ones by idempotency key.

    Pending runs with a key no plan asks for belong to an older lease: cancelled. Stages in
    ``no_longer_needed`` are neither created nor kept (their pending runs are cancelled).
    """
    dropped = set(no_longer_needed)
    by_key = {run.idempotency_key: run for run in existing if run.idempotency_key}
    wanted = {run.idempotency_key: run for run in planned if run.stage not in dropped}
    keep = tuple((run, by_key[key]) for key, run in wanted.items() if key in by_key)
    create = tuple(run for key, run in wanted.items() if key not in by_key)
    cancel = tuple(run for key, run in by_key.items() if run.pending and key not in wanted)
    return ScheduleActions(create=create, keep=keep, cancel=cancel)


def stages_no_longer_needed(*, torn_down: bool, served: bool) -> tuple[ScheduledStage, ...]:
    """After a teardown nothing is left to prepare, bring up, drain or tear down; after serving, the cluster's
    preparation and bring-up are done."""
    if torn_down:
        return tuple(ScheduledStage)
    if served:
        return (ScheduledStage.PREPARE_CLUSTER, ScheduledStage.BRING_UP)
    return ()


class ScheduleEntry(BaseModel):
    """report.json ``"schedule"[]``: one scheduled run."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=200, description="The run's name.")
    stage: ScheduledStage = Field(description="prepare_cluster, bring_up, drain or teardown.")
    scheduled_at: AwareDatetime = Field(description="When it fires, in the campaign's clock.")
    flow_run_id: str | None = Field(None, max_length=64, description="The run; None when it could not be created.")
    state: str = Field(max_length=200, description="Its state when the report was written, or why there is none.")
    fired_at: AwareDatetime | None = Field(None, description="When it started, if it has.")

    def report_section(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "stage": self.stage.value,
            "scheduled_at": self.scheduled_at.isoformat(),
            "flow_run_id": self.flow_run_id,
            "state": self.state,
            "fired_at": self.fired_at.isoformat() if self.fired_at else None,
        }


class WindowFacts(BaseModel):
    """report.json ``"window"``: the block on the campaign's clock."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    block_start: AwareDatetime = Field(description="The reservation's start.")
    block_end: AwareDatetime = Field(description="The reservation's end.")

    @property
    def aws_terminates_at(self) -> datetime:
        return self.block_end - AWS_TERMINATES_BEFORE_END

    def report_json(self) -> dict[str, Any]:
        return {
            "block_start": self.block_start.isoformat(),
            "block_end": self.block_end.isoformat(),
            "aws_terminates_at": self.aws_terminates_at.isoformat(),
        }


class LeaseSchedule(BaseModel):
    """The report's schedule section: the lease's waypoints, the runs scheduled for them, and the window."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    runs: tuple[ScheduleEntry, ...] = Field(max_length=16, description="One entry per scheduled stage.")
    window: WindowFacts = Field(description="The block on the campaign's clock.")

    @property
    def lease_end(self) -> datetime:
        return self.window.block_end

    def report_json(self) -> dict[str, Any]:
        return {"schedule": [run.report_section() for run in self.runs], "window": self.window.report_json()}

    def markdown(self) -> str:
        rows = [
            {"run": run.name, "stage": run.stage.value, "scheduled at": _iso(run.scheduled_at),
             "flow run": run.flow_run_id, "state": run.state, "fired at": _iso(run.fired_at) if run.fired_at else None}
            for run in self.runs
        ]
        table = markdown_table(rows)
        ends = f"AWS terminates the instances at {_iso(self.window.aws_terminates_at)} (end − 30 min)."
        return f"{table}\n\n{ends} Times here are on the campaign's clock."


def schedule_entry(
    planned: PlannedRun, existing: ExistingRun | None, *, note: str = "", fired_at: datetime | None = None
) -> ScheduleEntry:
    """The report's line for ``planned``: its run on the server, or ``note`` saying why there is none."""
    if existing is None:
        return ScheduleEntry(
            name=planned.name, stage=planned.stage, scheduled_at=planned.scheduled_at, state=note or "not scheduled"
        )
    return ScheduleEntry(
        name=planned.name,
        stage=planned.stage,
        scheduled_at=planned.scheduled_at,
        flow_run_id=existing.flow_run_id,
        state=existing.state_name or existing.state_type.title(),
        # The run stamps its start on the campaign's clock (the record); Prefect's start is wall time.
        fired_at=fired_at if existing.started_at is not None else None,
    )


def _iso(moment: datetime) -> str:
    return moment.isoformat()
