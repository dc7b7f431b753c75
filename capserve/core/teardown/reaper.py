"""The reaper's rule, pure: is a campaign found by its tag finished (lease over, or unknown and old)?"""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from capserve.core.markdown import markdown_table
from capserve.core.teardown.result import TeardownResult
from capserve.core.teardown.settings import ReaperSettings


class CampaignSighting(BaseModel):
    """A campaign the reaper found capserve-tagged resources of, in one region."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    campaign_id: str = Field(min_length=1, max_length=40, description="Value of the capserve.io/campaign tag.")
    region: str = Field(min_length=1, max_length=32, description="AWS region.")
    resources: tuple[str, ...] = Field(min_length=1, max_length=1000, description="What was seen ('kind/name').")
    lease_end: AwareDatetime | None = Field(None, description="End of the campaign's reservation, when found.")
    lease_source: str | None = Field(None, max_length=2048, description="Where the lease end was read from.")
    oldest_created: AwareDatetime | None = Field(None, description="Creation time of its oldest dated resource.")


class ReaperDecision(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    campaign_id: str = Field(min_length=1, max_length=40, description="The campaign.")
    region: str = Field(min_length=1, max_length=32, description="AWS region.")
    reap: bool = Field(description="True: the campaign is finished and is (or, in a dry run, would be) torn down.")
    why: str = Field(min_length=1, max_length=1000, description="The rule that decided.")
    teardown: TeardownResult | None = Field(None, description="The teardown run for it (dry or real).")


class ReaperResult(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    regions: tuple[str, ...] = Field(min_length=1, max_length=32, description="Regions searched.")
    dry_run: bool = Field(description="True: nothing was deleted.")
    now: AwareDatetime = Field(description="The instant leases were judged at.")
    decisions: tuple[ReaperDecision, ...] = Field(default=(), max_length=10_000, description="One per campaign.")

    def report_section(self) -> dict[str, object]:
        return {
            "dry_run": self.dry_run,
            "now": self.now.isoformat(),
            "campaigns": [
                {
                    "campaign_id": d.campaign_id,
                    "region": d.region,
                    "reap": d.reap,
                    "why": d.why,
                    "teardown": d.teardown.report_section() if d.teardown else None,
                }
                for d in self.decisions
            ],
        }

    def markdown(self) -> str:
        """What the reaper deleted or would delete, one row per campaign it judged."""
        verb = "would reap" if self.dry_run else "reaped"
        rows: list[dict[str, object]] = [
            {
                "campaign": d.campaign_id,
                "region": d.region,
                "decision": verb if d.reap else "kept",
                "why": d.why,
                "resources": len(d.teardown.deleted) if d.teardown else 0,
            }
            for d in self.decisions
        ]
        head = f"Reaper at {self.now.isoformat()} in {', '.join(self.regions)}{' (dry run)' if self.dry_run else ''}."
        return f"{head}\n\n{markdown_table(rows) if rows else 'No capserve campaign found.'}\n"


def decide(sighting: CampaignSighting, now: datetime, settings: ReaperSettings) -> tuple[bool, str]:
    """Reap when the lease is over (its end minus the margin has passed); with no lease found, only once the
    campaign's oldest resource is older than the grace period; with neither, keep it and say so."""
    if sighting.lease_end is not None:
        over_at = sighting.lease_end - timedelta(minutes=settings.lease_end_margin_minutes)
        if now >= over_at:
            return True, (
                f"lease over: {sighting.lease_source} ends {sighting.lease_end.isoformat()} "
                f"(treated as over from {over_at.isoformat()})"
            )
        return False, f"lease running: {sighting.lease_source} ends {sighting.lease_end.isoformat()}"
    grace = timedelta(hours=settings.unknown_lease_grace_hours)
    if sighting.oldest_created is None:
        return False, (
            "lease unknown and no resource reports its age; tear it down with reason 'manual' if it is abandoned"
        )
    age = now - sighting.oldest_created
    if age >= grace:
        return True, f"lease unknown; oldest resource created {sighting.oldest_created.isoformat()}, past the grace"
    return False, (
        f"lease unknown; oldest resource created {sighting.oldest_created.isoformat()}, within the "
        f"{settings.unknown_lease_grace_hours:g} h grace"
    )
