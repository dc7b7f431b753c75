"""The campaign report: what each stage did, when, and what it decided.

``report.json`` is a contract that later stages extend: ``{"campaign", "stages": [...], "plan", ...}``;
each stage adds exactly one top-level key of its own. ``report.md`` is the same content for a person.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from capserve.core.stages import Stage, StageStatus

RESERVED_KEYS = frozenset({"campaign", "stages"})

__all__ = ["CampaignReport", "StageRecord", "StageStatus", "markdown_table"]


class StageRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Stage = Field(description="The stage.")
    status: StageStatus = Field(description="Where the stage ended (or 'running').")
    started_at: datetime = Field(description="UTC start.")
    ended_at: datetime | None = Field(None, description="UTC end; None while running.")
    detail: str | None = Field(None, description="Why it failed or was skipped.", max_length=4000)


class CampaignReport:
    """Accumulates stage records and stage sections; renders JSON and markdown."""

    def __init__(self, campaign: str, *, clock: Callable[[], datetime] | None = None) -> None:
        self.campaign = campaign
        self.stages: list[StageRecord] = []
        self._sections: dict[str, Any] = {}
        self._markdown: list[tuple[str | None, str]] = []
        self._clock = clock or (lambda: datetime.now(UTC))

    @contextmanager
    def stage(self, name: Stage) -> Iterator[StageRecord]:
        """Time a stage; an exception marks it failed (with the reason) and propagates."""
        record = StageRecord(name=name, status=StageStatus.RUNNING, started_at=self._clock())
        self.stages.append(record)
        try:
            yield record
        except BaseException as exc:
            record.status = StageStatus.FAILED
            record.detail = f"{type(exc).__name__}: {exc}"[:4000]
            record.ended_at = self._clock()
            raise
        if record.status is StageStatus.RUNNING:
            record.status = StageStatus.COMPLETED
        record.ended_at = self._clock()

    def add_section(self, key: str, data: Any, *, title: str | None, markdown: str) -> None:
        """Record one stage's top-level JSON key and its human-readable section.

        ``title=None`` when ``markdown`` starts with its own ``##`` heading.
        """
        if key in RESERVED_KEYS or key in self._sections:
            raise ValueError(f"report key {key!r} is already taken")
        self._sections[key] = data
        if markdown:
            self._markdown.append((title, markdown))

    def skip(self, name: Stage, why: str) -> None:
        """Record a stage that did not run, and why (a person reading the report must not have to guess)."""
        now = self._clock()
        self.stages.append(StageRecord(name=name, status=StageStatus.SKIPPED, started_at=now, ended_at=now, detail=why))

    def section(self, key: str) -> Any:
        return self._sections[key]

    def to_json(self) -> dict[str, Any]:
        return {
            "campaign": self.campaign,
            "stages": [
                {
                    "name": s.name.value,
                    "status": s.status.value,
                    "started_at": s.started_at.isoformat(),
                    "ended_at": s.ended_at.isoformat() if s.ended_at else None,
                    **({"detail": s.detail} if s.detail else {}),
                }
                for s in self.stages
            ],
            **self._sections,
        }

    def to_markdown(self) -> str:
        lines = [f"# Campaign `{self.campaign}`", "", "| stage | status | started (UTC) | took |", "|---|---|---|---|"]
        for s in self.stages:
            took = f"{(s.ended_at - s.started_at).total_seconds():.1f} s" if s.ended_at else "—"
            lines.append(f"| {s.name.value} | {s.status.value} | {s.started_at:%Y-%m-%d %H:%M:%S} | {took} |")
        failed = [s for s in self.stages if s.status is StageStatus.FAILED]
        for s in failed:
            lines += ["", f"**{s.name.value} failed:** {s.detail}"]
        if self.stages:
            lines += ["", "![timeline](timeline.png)"]
        for title, body in self._markdown:
            lines += ["", f"## {title}", ""] if title else [""]
            lines.append(body.rstrip())
        return "\n".join(lines) + "\n"


def markdown_table(rows: list[dict[str, Any]], columns: list[str] | None = None) -> str:
    """A GitHub-flavoured markdown table from a list of dicts (same keys, or the given columns)."""
    if not rows:
        return "_none_"
    cols = columns or list(rows[0])
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in rows:
        out.append("| " + " | ".join(_cell(row.get(c)) for c in cols) + " |")
    return "\n".join(out)


def _cell(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:,.2f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value).replace("|", "\\|")
