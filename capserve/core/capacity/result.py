"""What the acquire stage hands to the campaign: the lease (or why there is none) and the decision behind it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

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
    bought_by: str | None = Field(
        None, max_length=200, description="The run that bought the lease (its flow run name)."
    )
    bought_at: AwareDatetime | None = Field(None, description="When that run bought it (the campaign's clock).")
    adopted_by: str | None = Field(
        None, max_length=200, description="The run that adopted the lease another run of the campaign bought."
    )
    approval: str | None = Field(
        None, max_length=500,
        description="For a purchase: whether a person had to approve it (their decision is the report's Approvals).",
    )

    def with_purchase(self, purchase: AcquireResult) -> AcquireResult:
        """This adoption told with the purchase it adopted: the offers considered, the chosen one and the price,
        as the run that bought them recorded them (the campaign record's ``purchase``), and who adopted it.

        ``self`` unchanged unless it adopted the very reservation ``purchase`` bought."""
        bought, held = purchase.lease, self.lease
        if (
            self.outcome != "adopted" or purchase.outcome != "bought" or bought is None or held is None
            or bought.reservation_id != held.reservation_id
        ):
            return self
        when = f" at {_utc(purchase.bought_at)}" if purchase.bought_at else ""
        adopter = f"run {self.adopted_by}" if self.adopted_by else "a later run of the campaign"
        state = self.state or purchase.state
        message = (
            f"Bought {bought.reservation_id} for ${bought.upfront_fee:,.2f} by run {purchase.bought_by or 'unknown'}"
            f"{when}; adopted by {adopter} ({state.value if state else 'state unknown'}); it ends "
            f"{_utc(held.end)}."
        )
        return purchase.model_copy(update={"state": state, "adopted_by": self.adopted_by, "message": message})

    @property
    def stopped(self) -> bool:
        """True when nothing was obtained and the campaign must stop cleanly (rejected, timed out, dry run)."""
        return self.lease is None

    def report_sections(self) -> dict[str, object]:
        """The report.json keys this stage owns: ``lease``, ``offers_considered``, ``offers_forecast`` and, when
        the lease was bought or adopted, ``purchase`` (which run bought it, when, and which run adopted it)."""
        sections: dict[str, object] = {
            "lease": self.lease.report_section() if self.lease else None,
            "offers_considered": [c.report_entry() for c in self.ranking.considered] if self.ranking else [],
            "offers_forecast": [f.to_json() for f in self.forecasts],
        }
        if self.bought_by or self.adopted_by:
            sections["purchase"] = {
                "bought_by": self.bought_by,
                "bought_at": _iso(self.bought_at),
                "offering_id": self.ranking.chosen.offering_id if self.ranking and self.ranking.chosen else None,
                "upfront_fee": self.lease.upfront_fee if self.lease and self.bought_by else None,
                "adopted_by": self.adopted_by,
                "approval": self.approval,
            }
        return sections

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
                f"| window | {_utc(lease.start)} → {_utc(lease.end)} |",
                f"| capacity | {lease.instance_count} × {lease.instance_type} |",
                f"| upfront fee | ${lease.upfront_fee:,.2f} {lease.currency}{' (adopted)' if lease.adopted else ''} |",
            ]
            if self.bought_by:
                at = f" at {_utc(self.bought_at)}" if self.bought_at else ""
                lines.append(f"| bought by | run `{self.bought_by}`{at} |")
            if self.approval:
                lines.append(f"| approval | {self.approval} |")
            if self.adopted_by:
                lines.append(f"| adopted by | run `{self.adopted_by}` |")
            lines.append("")
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


def _iso(when: datetime | None) -> str | None:
    return when.isoformat() if when else None


def _utc(when: datetime) -> str:
    """A time as the report shows it: to the second, UTC, on the campaign's clock."""
    return f"{when.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"
