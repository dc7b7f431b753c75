"""What a teardown did: deleted, already gone, kept (with why), and why the teardown happened at all."""

from __future__ import annotations

from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from capserve.core.errors import PermanentError
from capserve.core.markdown import markdown_table

# Why a teardown ran (docs/design.md §7: record why something was torn down).
# campaign-finished: the campaign's last stage after success; drain-deadline: the one-off run scheduled at
# end - hard_teardown_before_end_minutes; failed-stage: a stage after bring_up failed; reaper: the cron
# found the lease over or unknown; manual: a person asked; expiration-warning: AWS's Capacity Block warning
# (the automation of docs/events.md §4); orphan: a campaign run crashed and no other run of it was live.
TeardownReason = Literal[
    "campaign-finished", "drain-deadline", "failed-stage", "reaper", "manual", "expiration-warning", "orphan"
]


class KeptResource(BaseModel):
    """Something teardown saw (or knows of) and deliberately did not delete."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    resource: str = Field(min_length=1, max_length=512, description="'kind/name' of the resource.")
    why: str = Field(min_length=1, max_length=1000, description="Why it stays.")


class TeardownResult(BaseModel):
    """The outcome of one teardown of one campaign in one region."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    campaign_id: str = Field(min_length=1, max_length=40, description="The campaign torn down.")
    region: str = Field(min_length=1, max_length=32, description="AWS region.")
    reason: TeardownReason = Field(description="Why the teardown happened.")
    dry_run: bool = Field(description="True: nothing was deleted; 'deleted' lists what would have been.")
    deleted: tuple[str, ...] = Field(default=(), max_length=20_000, description="Deleted (or would be), in order.")
    already_gone: tuple[str, ...] = Field(
        default=(), max_length=20_000, description="Expected or found, but AWS said NotFound: nothing to do."
    )
    kept: tuple[KeptResource, ...] = Field(default=(), max_length=256, description="Left alone on purpose, with why.")
    remaining: tuple[str, ...] = Field(
        default=(), max_length=20_000, description="Still there when a wait's deadline passed (empty on success)."
    )
    finished_at: AwareDatetime = Field(description="When the teardown ended (UTC).")

    def report_section(self) -> dict[str, object]:
        """report.json ``"teardown"``."""
        return {
            "deleted": list(self.deleted),
            "already_gone": list(self.already_gone),
            "kept": [{"resource": k.resource, "why": k.why} for k in self.kept],
            "reason": self.reason,
            "dry_run": self.dry_run,
            "finished_at": self.finished_at.isoformat(),
            "remaining": list(self.remaining),
        }

    def markdown(self) -> str:
        verb = "would delete" if self.dry_run else "deleted"
        rows: list[dict[str, object]] = [{"resource": r, "outcome": verb} for r in self.deleted]
        rows += [{"resource": r, "outcome": "already gone"} for r in self.already_gone]
        rows += [{"resource": r, "outcome": "STILL THERE"} for r in self.remaining]
        rows += [{"resource": k.resource, "outcome": f"kept: {k.why}"} for k in self.kept]
        head = (
            f"Teardown of campaign {self.campaign_id} in {self.region} ({self.reason}"
            f"{', dry run: nothing deleted' if self.dry_run else ''}), "
            f"finished {self.finished_at:%Y-%m-%d %H:%M:%S} UTC."
        )
        table = markdown_table(rows) if rows else "Nothing of this campaign exists."
        return f"{head}\n\n{table}\n"


class TeardownIncompleteError(PermanentError):
    """A wait ran out while something was still being deleted. ``result`` says what was done and what remains."""

    def __init__(self, message: str, result: TeardownResult) -> None:
        super().__init__(message)
        self.result = result
