"""Redeploying a running campaign on a new model revision: what it records (pure; when it may run is
``capserve.core.redeploy_rules``).

A redeploy stages the new revision, rolls it out with the rollout stage's strategy, evaluates it, and then
either **promotes** it (the record's last good rollout moves to it) or **rolls back** to the last good
revision. Only a revision that passed its gates is promoted: a failed or invalid evaluation rolls back,
as does a rollout that never became ready (the rollout's own rollback).

Each redeploy appends one ``RedeployEntry`` to the campaign record (``CampaignRecord.redeploys``). The
record is what carries it to the campaign's report: every report a campaign run writes copies the
record's redeploys into ``report.json`` ``"redeploys"`` (``capserve.campaign.runner``), whichever run did them.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from capserve.core.cost.causes import Cause
from capserve.core.cost.inputs import Interval
from capserve.core.events import CapserveEvent
from capserve.core.markdown import markdown_table
from capserve.core.rollout.config import RolloutConfig
from capserve.core.rollout.probes import expected_start_s
from capserve.core.rollout.start_history import StartHistory
from capserve.core.rollout.strategy import Strategy
from capserve.core.timeline import TimeFigures

SHA = re.compile(r"^[0-9a-f]{40}$")

Verdict = Literal["pass", "fail", "invalid", "not-evaluated"]
Outcome = Literal["promoted", "rolled-back", "failed"]


DownPhaseName = Literal["stop", "start", "gate", "rollback"]
_PHASE_WHAT = {
    "stop": "old pods stopped, new pods scheduled, compile cache restored",
    "start": "vLLM start",
    "gate": "check, switch and evaluation before traffic",
    "rollback": "the last good revision started again",
}


class DownPhase(BaseModel):
    """One part of a redeploy's downtime, on the block's clock."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: DownPhaseName = Field(description="stop | start | gate | rollback.")
    start: AwareDatetime = Field(description="When it began.")
    end: AwareDatetime = Field(description="When it ended.")
    note: str = Field("", max_length=200, description="What it holds (for a start: warm or cold compile cache).")

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()

    def describe(self) -> str:
        return f"{self.name} {self.seconds / 60:.1f} min" + (f" ({self.note})" if self.note else "")


def down_phases(
    down_from: datetime | None,
    ended_at: datetime,
    *,
    ready_at: datetime | None,
    start_s: float | None,
    cache: str | None,
    rollback_began: datetime | None = None,
) -> tuple[DownPhase, ...]:
    """A redeploy's downtime split where the rollout says: until the new vLLM process starts (stop), its start to
    the pods' readiness (start: the measured ``start_s``, warm or cold by ``cache``; None: from the stop on), then
    the gate until the redeploy ends, or until a rollback after a failed gate began (and the rollback after it).

    None without a downtime or a ready instant inside it (a rollout that never became ready: one interval).
    """
    if down_from is None or ready_at is None or not down_from <= ready_at <= ended_at:
        return ()
    # A log that did not tell the start leaves it undivided from the stop before it.
    began = down_from if start_s is None else min(max(ready_at - timedelta(seconds=start_s), down_from), ready_at)
    warmth = {"hit": "warm compile cache", "miss": "cold compile cache"}.get(cache or "", "compile cache unknown")
    gate_end = rollback_began if rollback_began is not None and ready_at <= rollback_began <= ended_at else ended_at
    phases = [
        DownPhase(name="stop", start=down_from, end=began, note=_PHASE_WHAT["stop"]),
        DownPhase(name="start", start=began, end=ready_at, note=warmth),
        DownPhase(name="gate", start=ready_at, end=gate_end, note=_PHASE_WHAT["gate"]),
        DownPhase(name="rollback", start=gate_end, end=ended_at, note=_PHASE_WHAT["rollback"]),
    ]
    return tuple(p for p in phases if p.end > p.start or p.name == "start")


class RedeployEntry(BaseModel):
    """One redeploy of a campaign: from which revision to which, why, how, and how it ended."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    from_sha: str = Field(pattern=SHA.pattern, description="Commit served before the redeploy.")
    to_sha: str = Field(pattern=SHA.pattern, description="Commit the redeploy tried.")
    trigger: str = Field(min_length=1, max_length=100, description="What started it (revision-published, manual).")
    strategy: Strategy | Literal[""] = Field(description="Rollout strategy used ('' when it never rolled out).")
    verdict: Verdict = Field(description="The new revision's evaluation verdict.")
    outcome: Outcome = Field(description="promoted | rolled-back | failed.")
    serving_sha: str | None = Field(None, max_length=40, description="Commit serving afterwards (None: nothing).")
    started_at: AwareDatetime = Field(description="When it started.")
    ended_at: AwareDatetime = Field(description="When it ended.")
    down_from: AwareDatetime | None = Field(
        None,
        description="When the serving endpoint went down (a recreate rollout deleting the old pods); it is back at "
        "ended_at. None: the old revision served throughout (a strategy that keeps it, or no rollout began).",
    )
    detail: str = Field("", max_length=2000, description="Why it rolled back or failed.")
    phases: tuple[DownPhase, ...] = Field(
        (), max_length=4, description="The downtime's parts (stop, start, gate, rollback); empty: not split."
    )
    events: tuple[CapserveEvent, ...] = Field(
        (), max_length=50, description="The lifecycle events it sent (the campaign's report lists them)."
    )

    def report_entry(self) -> dict[str, Any]:
        """report.json ``"redeploys"`` entry."""
        return {
            "from": self.from_sha,
            "to": self.to_sha,
            "trigger": self.trigger,
            "strategy": self.strategy,
            "verdict": self.verdict,
            "outcome": self.outcome,
            "serving": self.serving_sha,
            "started_at": self.started_at.isoformat(),
            "ended_at": self.ended_at.isoformat(),
            "down_from": self.down_from.isoformat() if self.down_from else None,
            "down_until": self.ended_at.isoformat() if self.down_from else None,
            "downtime_minutes": round(self.downtime_s / 60, 1),
            "downtime_phases": [
                {"phase": p.name, "minutes": round(p.seconds / 60, 1), "note": p.note} for p in self.phases
            ],
            **({"detail": self.detail} if self.detail else {}),
        }

    @property
    def downtime_s(self) -> float:
        """Seconds the endpoint served nothing evaluated because of this redeploy."""
        return (self.ended_at - self.down_from).total_seconds() if self.down_from else 0.0

    def downtime(self) -> list[Interval]:
        """The ledger's intervals for that downtime (``Cause.REDEPLOYS``), one per phase when it was split."""
        if self.down_from is None:
            return []
        label = f"redeploy to {self.to_sha[:8]} ({self.outcome})"
        if not self.phases:
            return [Interval(cause=Cause.REDEPLOYS, start=self.down_from, end=self.ended_at, label=label)]
        return [
            Interval(cause=Cause.REDEPLOYS, start=p.start, end=p.end, label=f"{label}: {p.describe()}"[:200])
            for p in self.phases
        ]


def redeploys_markdown(entries: list[RedeployEntry] | tuple[RedeployEntry, ...]) -> str:
    rows = [
        {
            "started (UTC)": f"{e.started_at:%Y-%m-%d %H:%M:%S}",
            "from": f"`{e.from_sha[:12]}`",
            "to": f"`{e.to_sha[:12]}`",
            "trigger": e.trigger,
            "strategy": e.strategy or "—",
            "verdict": e.verdict,
            "outcome": f"**{e.outcome}**",
            "down (min)": f"{e.downtime_s / 60:.0f}" if e.down_from else "0",
            "down: phases": " · ".join(p.describe() for p in e.phases) or "—",
            "why": e.detail[:200].replace("|", "/"),  # a cell must not end the row
        }
        for e in entries
    ]
    return markdown_table(rows)


class SwapTime(BaseModel):
    """How long a redeploy holds the block at worst, from the time model (``capserve.core.timeline``): the new
    revision's cold start (a new revision of the same architecture starts warm, but one whose config.json changed
    compiles anew, and which it is is known only once it is staged), the evaluation gate, and, if it fails, the
    last good revision's start again (warm when compile caches are kept)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    start_s: float = Field(ge=0, description="The new revision's vLLM start, cold.")
    evaluation_s: float = Field(ge=0, description="The evaluation gate before traffic.")
    rollback_s: float = Field(ge=0, description="The last good revision's start again, after a failed gate.")

    @property
    def total_s(self) -> float:
        return self.start_s + self.evaluation_s + self.rollback_s

    def describe(self) -> str:
        return (
            f"about {self.total_s / 60:.0f} min at worst (vLLM start cold {self.start_s / 60:.0f} min, evaluation "
            f"{self.evaluation_s / 60:.0f} min, a rollback's start {self.rollback_s / 60:.0f} min)"
        )


def swap_time(
    config: RolloutConfig, figures: TimeFigures | None = None, past: StartHistory | None = None
) -> SwapTime:
    """The worst case of redeploying ``config``'s geometry (the model and nodes stay; the revision changes).
    ``past``: the measured starts of that shape, which predict a start better than the model
    (docs/timeline.md §7)."""
    f = figures or TimeFigures()
    nodes = config.layout.nodes_per_replica * config.replicas

    def start(warm: bool) -> float:
        measured = past.for_start(warm=warm) if past is not None else None
        if measured is not None:
            return measured.to_listening_s
        return expected_start_s(
            config.compile_shape, config.node_bytes, warm=warm, instance_type=config.instance_type, nodes=nodes,
            figures=f,
        )

    return SwapTime(start_s=start(False), evaluation_s=f.gate_s, rollback_s=start(config.compile_cache))


def outcome_for(verdict: Verdict) -> Outcome:
    """Only a revision that passed its gates is promoted; anything else goes back to the last good one."""
    return "promoted" if verdict == "pass" else "rolled-back"
