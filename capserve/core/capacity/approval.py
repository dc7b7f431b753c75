"""The approval step: what a person is shown before money is spent, and what they answer."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from capserve.core.capacity.offers import Offer


class ApprovalRequest(BaseModel):
    """What the approver sees: the offer, its cost against the thresholds, and the plan it serves."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    campaign_id: str = Field(min_length=1, max_length=64, description="The campaign asking to buy.")
    offer: Offer = Field(description="The offer that would be bought.")
    approval_threshold_usd: float = Field(ge=0, description="Fees above this need approval.")
    max_upfront_fee_usd: float | None = Field(None, gt=0, description="The spec's hard budget.")
    alternatives: int = Field(ge=0, le=10_000, description="How many other offers were considered.")
    plan: str = Field("", max_length=2000, description="One line about what the capacity is for (model, serving plan).")
    rehearsal: str = Field(
        "", max_length=500, description="The spec's rehearsal on on-demand capacity: its result and date, or none."
    )
    cost_forecast: str = Field(
        "",
        max_length=8000,
        description="Expected utilisation and cost per million output tokens of the offers weighed (a table).",
    )

    def markdown(self) -> str:
        o = self.offer
        budget = f"${self.max_upfront_fee_usd:,.2f}" if self.max_upfront_fee_usd is not None else "none"
        lines = [
            f"### Approve a capacity purchase for campaign `{self.campaign_id}`?",
            "",
            "A Capacity Block or training plan **cannot be cancelled**; the fee is charged up front.",
            "",
            "| | |",
            "|---|---|",
            f"| offer | `{o.offering_id}` ({o.provider}) |",
            f"| where | {o.region} / {o.availability_zone} |",
            f"| when | {o.start.isoformat()} → {o.end.isoformat()} ({o.duration_hours:g} h) |",
            f"| what | {o.instance_count} × {o.instance_type} |",
            f"| upfront fee | **${o.upfront_fee:,.2f} {o.currency}** "
            f"(approval above ${self.approval_threshold_usd:,.2f}, budget {budget}) |",
            f"| alternatives considered | {self.alternatives} |",
        ]
        if self.plan:
            lines.append(f"| plan | {self.plan} |")
        if self.rehearsal:
            lines.append(f"| rehearsal | {self.rehearsal} |")
        if self.cost_forecast:
            lines += ["", "#### What it would buy (expected)", "", self.cost_forecast]
        return "\n".join(lines)


class ApprovalDecision(BaseModel):
    """A person's answer. ``offering_id`` ties the answer to the offer shown, so a stale approval buys nothing else."""

    model_config = ConfigDict(extra="forbid")

    approved: bool = Field(False, description="Buy this offer?")
    offering_id: str = Field(min_length=1, max_length=512, description="The offer this decision is about.")
    approver: str = Field("", max_length=200, description="Who decided (for the record).")
    note: str = Field("", max_length=2000, description="Why.")


def needs_approval(offer: Offer, threshold_usd: float) -> bool:
    """Spending above the threshold waits for a person; at or below it runs (scheduled runs included)."""
    return offer.upfront_fee > threshold_usd
