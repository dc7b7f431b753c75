"""The ranking policy: filters with reasons, both policies, deterministic tie-breaks, per-region explanations."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from capserve.core.capacity.offers import Offer
from capserve.core.capacity.ranking import Ranking, rank_offers
from capserve.core.capacity.zones import Zone
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


def _zones(region: str, ids: dict[str, str], types: dict[str, str] | None = None) -> list[Zone]:
    return [Zone(name=f"{region}{s}", zone_id=i, zone_type=(types or {}).get(s, "availability-zone"))
            for s, i in ids.items()]


# moto's (and a typical account's) zone IDs for the regions these tests search.
ZONES = {
    "us-east-2": _zones("us-east-2", {"a": "use2-az1", "b": "use2-az2", "c": "use2-az3"}),
    "us-west-2": _zones("us-west-2", {"a": "usw2-az2", "b": "usw2-az1", "c": "usw2-az3"}),
}


def rank(
    offers: list[Offer], capacity: CapacitySpec, regions: list[str], zones: dict[str, list[Zone]] | None = None
) -> Ranking:
    return rank_offers(offers, capacity, regions=regions, gpus_per_instance=8, zones=zones or ZONES)


def test_earliest_start_wins_and_every_loser_says_why() -> None:
    offers = [offer(day=2, fee=2000), offer(day=0, fee=2900, az="b"), offer(day=0, fee=2800), offer(fee=5000, day=1)]
    ranking = rank(offers, spec(), ["us-east-2", "us-west-2"])
    assert ranking.chosen == offers[2]  # day 0 and cheaper than the other day-0 offer
    reasons = {c.offer.offering_id: c.reason for c in ranking.considered}
    assert "more upfront" in reasons["cbo-us-east-2-b-0"]
    assert "later than the chosen offer" in reasons["cbo-us-east-2-a-2"]
    assert reasons["cbo-us-east-2-a-1"].startswith("over budget")
    assert [c.rank for c in ranking.considered] == [1, 2, 3, None]
    assert ranking.no_match == {"us-west-2": "no offers for this instance type, count and window"}


def test_cheapest_per_gpu_hour_prefers_price_over_start() -> None:
    offers = [offer(day=0, fee=2900), offer(day=3, fee=2700)]
    ranking = rank(offers, spec(policy="cheapest-per-gpu-hour"), ["us-east-2"])
    assert ranking.chosen == offers[1]
    loser = ranking.considered[1]
    assert "per GPU-hour" in loser.reason and loser.rank == 2


def test_ties_break_deterministically_whatever_the_input_order() -> None:
    offers = [offer(region="us-west-2"), offer(region="us-east-2", az="b"), offer(region="us-east-2")]
    first = rank(offers, spec(), ["us-east-2", "us-west-2"])
    second = rank(list(reversed(offers)), spec(), ["us-east-2", "us-west-2"])
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
    ranking = rank([offer(**changes)], spec(), ["us-east-2", "us-west-2"])
    assert ranking.chosen is None
    assert reason in ranking.no_match["us-east-2"]
    assert "no offers" in ranking.no_match["us-west-2"]
    assert "us-east-2:" in ranking.why_nothing() and "us-west-2:" in ranking.why_nothing()


def test_wrong_duration_is_filtered() -> None:
    long = offer()
    long = long.model_copy(update={"end": long.start + timedelta(hours=48)})
    ranking = rank([long], spec(), ["us-east-2"])
    assert ranking.chosen is None and "lasts 48 h, wanted 24 h" in ranking.considered[0].reason


def test_an_offer_in_a_local_zone_is_dropped_and_says_why() -> None:
    local = offer(region="us-west-2", az="-lax-1a", fee=2000, zone_type="local-zone")
    usual = offer(region="us-west-2", fee=2900, zone_type="availability-zone")
    zones = {"us-west-2": [*ZONES["us-west-2"], Zone(name="us-west-2-lax-1a", zone_id="usw2-lax1-az1",
                                                      zone_type="local-zone")]}
    ranking = rank([local, usual], spec(policy="cheapest-per-gpu-hour"), ["us-west-2"], zones)
    assert ranking.chosen == usual
    dropped = ranking.considered[1]
    assert dropped.offer == local and dropped.rank is None
    assert dropped.reason.startswith("not an Availability Zone: us-west-2-lax-1a is a local-zone")


def test_a_zone_the_offering_does_not_type_is_judged_by_describe_availability_zones() -> None:
    # Training plan offerings carry no ZoneType: the zone's own type decides.
    ranking = rank([offer(region="us-east-2", az="-wl1-bos-wlz-1")], spec(), ["us-east-2"],
                   {"us-east-2": _zones("us-east-2", {"a": "use2-az1", "b": "use2-az2", "-wl1-bos-wlz-1": "use2-wl1"},
                                        {"-wl1-bos-wlz-1": "wavelength-zone"})})
    assert ranking.chosen is None
    assert "is a wavelength-zone" in ranking.considered[0].reason
    assert ranking.no_match["us-east-2"].startswith("1 offer(s) rejected (1 not an Availability Zone)")


def test_a_zone_missing_from_describe_availability_zones_is_not_bought() -> None:
    ranking = rank([offer(az="z")], spec(), ["us-east-2"])
    assert ranking.chosen is None and ranking.considered[0].reason.startswith("zone unknown: us-east-2z")


def test_an_az_eks_refuses_is_usable_when_two_other_azs_take_the_control_plane() -> None:
    # use1-az3 is us-east-1e in moto's (and many accounts') naming; us-east-1 has five more AZs.
    east1 = _zones("us-east-1", {"a": "use1-az6", "b": "use1-az1", "e": "use1-az3"})
    ranking = rank([offer(region="us-east-1", az="e")], spec(regions=["us-east-1"]), ["us-east-1"],
                   {"us-east-1": east1})
    assert ranking.chosen is not None and ranking.chosen.availability_zone == "us-east-1e"


def test_an_az_eks_refuses_without_two_other_allowed_azs_is_dropped() -> None:
    # us-west-1: most accounts see two AZs; usw1-az2 is refused for cluster subnets.
    west1 = _zones("us-west-1", {"a": "usw1-az2", "b": "usw1-az1"})
    ranking = rank([offer(region="us-west-1", az="a"), offer(region="us-west-1", az="b", fee=2900)],
                   spec(regions=["us-west-1"]), ["us-west-1"], {"us-west-1": west1})
    refused = next(c for c in ranking.considered if c.offer.availability_zone == "us-west-1a")
    assert refused.rank is None
    assert refused.reason.startswith("no EKS control plane: EKS refuses cluster subnets in us-west-1a (usw1-az2)")
    # The allowed AZ next to it has no second allowed AZ either: the control plane needs two.
    assert ranking.chosen is None
    allowed = next(c for c in ranking.considered if c.offer.availability_zone == "us-west-1b")
    assert "us-west-1b (usw1-az1) is allowed, and us-west-1 has 0 other" in allowed.reason
