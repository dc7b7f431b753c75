"""What the acquire stage hands to the campaign: the lease (or why there is none) and the decision behind it."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from capserve.core.capacity.ranking import Ranking
from capserve.core.capacity.states import ReservationState
from capserve.core.cost.planning import CostForecast, forecast_table
from capserve.core.lease import Lease

# "expired": a run started for a recorded lease found that reservation ended (or gone); it never searches offers.
Outcome = Literal["bought", "adopted", "rejected", "approval-timed-out", "dry-run", "expired", "rehearsal-required"]


class AcquireResult(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    campaign_id: str = Field(min_length=1, max_length=64, description="The campaign.")
    outcome: Outcome = Field(description="What happened: bought or adopted capacity, or stopped with nothing bought.")
    lease: Lease | None = Field(None, description="The capacity obtained; None when the campaign must stop.")
    state: ReservationState | None = Field(None, description="The reservation's state when the stage finished.")
    ranking: Ranking | None = Field(
        None, description="The offers considered (None when an existing reservation was adopted)."
    )
    message: str = Field("", max_length=4000, description="One paragraph for people: what happened and what next.")
    forecasts: tuple[CostForecast, ...] = Field(
        (), max_length=20, description="Expected utilisation and cost per million tokens of the best-ranked offers."
    )

    @property
    def stopped(self) -> bool:
        """True when nothing was obtained and the campaign must stop cleanly (rejected, timed out, dry run)."""
        return self.lease is None

    def report_sections(self) -> dict[str, object]:
        """The report.json keys this stage owns: ``lease`` and ``offers_considered``."""
        return {
            "lease": self.lease.report_section() if self.lease else None,
            "offers_considered": [c.report_entry() for c in self.ranking.considered] if self.ranking else [],
            "offers_forecast": [f.to_json() for f in self.forecasts],
        }

    def markdown(self) -> str:
        lines = [f"## Capacity: {self.outcome}", ""]
        if self.message:
            lines += [self.message, ""]
        if self.lease is not None:
            lease = self.lease
            lines += [
                "| lease | |",
                "|---|---|",
                f"| provider | {lease.provider} |",
                f"| reservation | `{lease.reservation_id}` ({self.state.value if self.state else 'state unknown'}) |",
                f"| where | {lease.region} / {lease.availability_zone} |",
                f"| window | {lease.start.isoformat()} → {lease.end.isoformat()} |",
                f"| capacity | {lease.instance_count} × {lease.instance_type} |",
                f"| upfront fee | ${lease.upfront_fee:,.2f} {lease.currency}{' (adopted)' if lease.adopted else ''} |",
                "",
            ]
        if self.ranking is not None and self.ranking.considered:
            lines += [
                f"### Offers considered (policy: {self.ranking.policy})",
                "",
                "| | region / AZ | start (UTC) | end (UTC) | fee | why |",
                "|---|---|---|---|---|---|",
            ]
            for c in self.ranking.considered:
                o = c.offer
                mark = "**chosen**" if c.chosen else (f"#{c.rank}" if c.rank else "filtered")
                lines.append(
                    f"| {mark} | {o.region} / {o.availability_zone} | {o.start:%Y-%m-%d %H:%M} | "
                    f"{o.end:%Y-%m-%d %H:%M} | ${o.upfront_fee:,.2f} | {c.reason} |"
                )
            lines.append("")
        if self.forecasts:
            lines += ["### What the best-ranked offers would buy (expected, docs/cost.md §5)", ""]
            lines += [forecast_table(list(self.forecasts)), ""]
        if self.ranking is not None and self.ranking.no_match:
            lines += ["Regions without a match:", ""]
            lines += [f"- {region}: {why}" for region, why in sorted(self.ranking.no_match.items())]
        return "\n".join(lines).rstrip() + "\n"
