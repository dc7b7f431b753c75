"""The ranking policy: filters with reasons, both policies, deterministic tie-breaks, per-region explanations."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from capserve.core.capacity.offers import Offer
from capserve.core.capacity.ranking import rank_offers
from capserve.core.spec import CapacitySpec

T0 = datetime(2026, 12, 1, 11, 30, tzinfo=UTC)


def spec(**changes: object) -> CapacitySpec:
    base: dict[str, object] = dict(
        provider="ec2-capacity-block", instance_type="p6-b300.48xlarge", instance_count=1,
        regions=["us-east-2", "us-west-2"], earliest_start=T0 - timedelta(hours=1),
        latest_end=T0 + timedelta(days=14), duration_hours=24, max_upfront_fee_usd=4000,
        approval_threshold_usd=3500,
    )
    base.update(changes)
    return CapacitySpec.model_validate(base)


def offer(region: str = "us-east-2", az: str = "a", day: int = 0, fee: float = 2800.0, **changes: object) -> Offer:
    start = T0 + timedelta(days=day)
    base: dict[str, object] = dict(
        provider="ec2-capacity-block", region=region, availability_zone=f"{region}{az}",
        offering_id=f"cbo-{region}-{az}-{day}", start=start, end=start + timedelta(hours=24),
        instance_type="p6-b300.48xlarge", instance_count=1, upfront_fee=fee,
    )
    base.update(changes)
    return Offer.model_validate(base)


def test_earliest_start_wins_and_every_loser_says_why() -> None:
    offers = [offer(day=2, fee=2000), offer(day=0, fee=2900, az="b"), offer(day=0, fee=2800), offer(fee=5000, day=1)]
    ranking = rank_offers(offers, spec(), regions=["us-east-2", "us-west-2"], gpus_per_instance=8)
    assert ranking.chosen == offers[2]  # day 0 and cheaper than the other day-0 offer
    reasons = {c.offer.offering_id: c.reason for c in ranking.considered}
    assert "more upfront" in reasons["cbo-us-east-2-b-0"]
    assert "later than the chosen offer" in reasons["cbo-us-east-2-a-2"]
    assert reasons["cbo-us-east-2-a-1"].startswith("over budget")
    assert [c.rank for c in ranking.considered] == [1, 2, 3, None]
    assert ranking.no_match == {"us-west-2": "no offers for this instance type, count and window"}


def test_cheapest_per_gpu_hour_prefers_price_over_start() -> None:
    offers = [offer(day=0, fee=2900), offer(day=3, fee=2700)]
    ranking = rank_offers(offers, spec(policy="cheapest-per-gpu-hour"), regions=["us-east-2"], gpus_per_instance=8)
    assert ranking.chosen == offers[1]
    loser = ranking.considered[1]
    assert "per GPU-hour" in loser.reason and loser.rank == 2


def test_ties_break_deterministically_whatever_the_input_order() -> None:
    offers = [offer(region="us-west-2"), offer(region="us-east-2", az="b"), offer(region="us-east-2")]
    first = rank_offers(offers, spec(), regions=["us-east-2", "us-west-2"], gpus_per_instance=8)
    second = rank_offers(list(reversed(offers)), spec(), regions=["us-east-2", "us-west-2"], gpus_per_instance=8)
    assert first == second
    assert first.chosen is not None and first.chosen.availability_zone == "us-east-2a"
    assert "tie" in first.considered[1].reason


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        (dict(instance_count=2), "2 instances, wanted 1"),
        (dict(instance_type="p5.48xlarge"), "instance type p5.48xlarge"),
        (dict(day=-1), "outside window: starts"),
        (dict(day=14), "outside window: ends"),
        (dict(fee=4000.01), "over budget"),
    ],
)
def test_nothing_matched_says_why_per_region(changes: dict[str, object], reason: str) -> None:
    ranking = rank_offers([offer(**changes)], spec(), regions=["us-east-2", "us-west-2"], gpus_per_instance=8)
    assert ranking.chosen is None
    assert reason in ranking.no_match["us-east-2"]
    assert "no offers" in ranking.no_match["us-west-2"]
    assert "us-east-2:" in ranking.why_nothing() and "us-west-2:" in ranking.why_nothing()


def test_wrong_duration_is_filtered() -> None:
    long = offer()
    long = long.model_copy(update={"end": long.start + timedelta(hours=48)})
    ranking = rank_offers([long], spec(), regions=["us-east-2"], gpus_per_instance=8)
    assert ranking.chosen is None and "lasts 48 h, wanted 24 h" in ranking.considered[0].reason
