"""Which offer to buy, and why every other one lost: a pure decision returned as data.

Filter out offers capserve cannot build a cluster around (Local Zones, AZs EKS refuses without two
other allowed AZs: ``capserve.core.capacity.zones``), then by what the spec allows (type, count,
window, duration, budget), rank the rest by the spec's
policy, break ties deterministically (fee, then start, region, AZ, offering id), and when nothing
matches say why per region.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field

from capserve.core.capacity.offers import Offer
from capserve.core.capacity.zones import Zone, zone_rejection
from capserve.core.spec import CapacitySpec, RankingPolicy

# Offer start/end times come from AWS with second precision; compare windows with a little slack.
_SLACK = timedelta(seconds=1)


class ConsideredOffer(BaseModel):
    """One offer as the report shows it: chosen, or why it lost."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    offer: Offer = Field(description="The offer as AWS described it.")
    chosen: bool = Field(description="True for the one offer bought (or to be bought).")
    rank: int | None = Field(None, ge=1, le=10_000, description="Position among matching offers; None if filtered out.")
    reason: str = Field(max_length=500, description="Why it was chosen, or why it lost.")

    def report_entry(self) -> dict[str, object]:
        o = self.offer
        return {
            "provider": o.provider,
            "region": o.region,
            "availability_zone": o.availability_zone,
            "zone_type": o.zone_type,
            "offering_id": o.offering_id,
            "start": o.start.isoformat(),
            "end": o.end.isoformat(),
            "instance_type": o.instance_type,
            "instance_count": o.instance_count,
            "upfront_fee": o.upfront_fee,
            "currency": o.currency,
            "chosen": self.chosen,
            "rank": self.rank,
            "reason": self.reason,
        }


class Ranking(BaseModel):
    """The decision: the chosen offer (if any), every offer considered, and per-region explanations."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    policy: RankingPolicy = Field(description="The policy that ranked matching offers.")
    considered: list[ConsideredOffer] = Field(
        max_length=10_000, description="Chosen first, then ranked, then filtered."
    )
    no_match: dict[str, str] = Field(
        default_factory=dict, description="Region → why none of its offers matched (regions with a match are absent)."
    )

    @property
    def chosen(self) -> Offer | None:
        return next((c.offer for c in self.considered if c.chosen), None)

    def why_nothing(self) -> str:
        lines = [f"{region}: {why}" for region, why in sorted(self.no_match.items())]
        return "no offering matched the spec:\n  " + "\n  ".join(lines)


def _t(when: datetime) -> str:
    return f"{when.astimezone(UTC):%Y-%m-%d %H:%M}Z"


def rejection(offer: Offer, capacity: CapacitySpec) -> str | None:
    """Why the spec rules this offer out, or None if it is acceptable."""
    if offer.instance_type != capacity.instance_type:
        return f"instance type {offer.instance_type}, wanted {capacity.instance_type}"
    if offer.instance_count != capacity.instance_count:
        return f"{offer.instance_count} instances, wanted {capacity.instance_count}"
    if capacity.earliest_start is not None and offer.start + _SLACK < capacity.earliest_start:
        return f"outside window: starts {_t(offer.start)}, before earliest_start {_t(capacity.earliest_start)}"
    if capacity.latest_end is not None and offer.end - _SLACK > capacity.latest_end:
        return f"outside window: ends {_t(offer.end)}, after latest_end {_t(capacity.latest_end)}"
    if capacity.duration_hours is not None and abs(offer.duration_hours - capacity.duration_hours) > 0.01:
        return f"lasts {offer.duration_hours:g} h, wanted {capacity.duration_hours} h"
    if capacity.max_upfront_fee_usd is not None and offer.upfront_fee > capacity.max_upfront_fee_usd:
        return f"over budget: ${offer.upfront_fee:,.2f} > max_upfront_fee_usd ${capacity.max_upfront_fee_usd:,.2f}"
    return None


def _kind(reason: str) -> str:
    return reason.split(":", 1)[0] if ":" in reason else reason


def _sort_key(offer: Offer, policy: RankingPolicy, gpus_per_instance: int) -> tuple[object, ...]:
    tie = (offer.region, offer.availability_zone, offer.offering_id)
    if policy == "earliest-start":
        return (offer.start, offer.upfront_fee, *tie)
    return (round(offer.fee_per_gpu_hour(gpus_per_instance), 6), offer.start, *tie)


def _lost_because(loser: Offer, winner: Offer, policy: RankingPolicy, gpus_per_instance: int) -> str:
    per_gpu_hour = loser.fee_per_gpu_hour(gpus_per_instance)
    win_per_gpu_hour = winner.fee_per_gpu_hour(gpus_per_instance)
    if policy == "earliest-start" and loser.start > winner.start:
        return f"starts {loser.start - winner.start} later than the chosen offer"
    if policy == "cheapest-per-gpu-hour" and per_gpu_hour > win_per_gpu_hour + 1e-6:
        return f"${per_gpu_hour:,.4f} per GPU-hour, chosen costs ${win_per_gpu_hour:,.4f}"
    if loser.upfront_fee > winner.upfront_fee:
        same = "start" if policy == "earliest-start" else "rate"
        return f"same {same}, ${loser.upfront_fee - winner.upfront_fee:,.2f} more upfront"
    if loser.start > winner.start:
        return f"same price per GPU-hour, starts {loser.start - winner.start} later"
    return "tie, broken by region / AZ / offering id order"


def rank_offers(
    offers: list[Offer],
    capacity: CapacitySpec,
    *,
    regions: list[str],
    gpus_per_instance: int,
    zones: Mapping[str, Sequence[Zone]],
) -> Ranking:
    """Choose one offer. ``regions`` are all the regions searched, so empty ones are reported too;
    ``zones`` are each region's zones (DescribeAvailabilityZones), which decide where a cluster can be built."""
    if gpus_per_instance < 1:
        raise ValueError("gpus_per_instance must be at least 1")
    policy = capacity.policy
    matching: list[Offer] = []
    filtered: list[ConsideredOffer] = []
    for offer in offers:
        why = zone_rejection(offer, zones.get(offer.region, ())) or rejection(offer, capacity)
        if why is None:
            matching.append(offer)
        else:
            filtered.append(ConsideredOffer(offer=offer, chosen=False, reason=why))
    matching.sort(key=lambda o: _sort_key(o, policy, gpus_per_instance))
    considered: list[ConsideredOffer] = []
    if matching:
        winner = matching[0]
        what = "earliest start" if policy == "earliest-start" else "lowest fee per GPU-hour"
        reason = f"chosen: {what} within window and budget"
        considered.append(ConsideredOffer(offer=winner, chosen=True, rank=1, reason=reason))
        considered += [
            ConsideredOffer(offer=o, chosen=False, rank=i, reason=_lost_because(o, winner, policy, gpus_per_instance))
            for i, o in enumerate(matching[1:], start=2)
        ]
    filtered.sort(key=lambda c: _sort_key(c.offer, policy, gpus_per_instance))
    considered += filtered

    no_match: dict[str, str] = {}
    matched_regions = {o.region for o in matching}
    for region in regions:
        if region in matched_regions:
            continue
        reasons = [c.reason for c in filtered if c.offer.region == region]
        if not reasons:
            no_match[region] = "no offers for this instance type, count and window"
            continue
        counts = Counter(_kind(r) for r in reasons)
        summary = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items()))
        cheapest = min((c for c in filtered if c.offer.region == region), key=lambda c: c.offer.upfront_fee)
        no_match[region] = (
            f"{len(reasons)} offer(s) rejected ({summary}); cheapest {cheapest.offer.label()}: {cheapest.reason}"
        )
    return Ranking(policy=policy, considered=considered, no_match=no_match)
