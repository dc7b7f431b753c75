"""The quota judge (capserve.core.quotas): what to request, and which quota an instance family counts against."""

from __future__ import annotations

from capserve.core.quotas import (
    NAT_GATEWAYS,
    ON_DEMAND_G,
    ON_DEMAND_P,
    ON_DEMAND_STANDARD,
    VPCS,
    QuotaReading,
    on_demand_quota,
    quota_problems,
)


def test_a_quota_with_room_passes_and_an_unread_one_is_not_judged() -> None:
    room = QuotaReading(quota=VPCS, region="us-east-2", limit=5, used=4, needed=1)
    unread = QuotaReading(quota=VPCS, region="us-west-2", limit=None, used=9, needed=1, unread="AccessDenied")
    assert quota_problems((room, unread)) == []


def test_a_full_quota_names_its_code_and_the_value_to_request() -> None:
    full = QuotaReading(quota=NAT_GATEWAYS, region="us-east-2", where="us-east-2a holds 5", limit=5, used=5,
                        needed=1)
    vcpus = QuotaReading(quota=ON_DEMAND_P, region="us-east-2", where="1 × p6-b200.48xlarge", limit=0, used=0,
                         needed=192)
    assert quota_problems((full, vcpus)) == [
        "quota NAT gateways per Availability Zone (L-FE5A380F) in us-east-2 (us-east-2a holds 5): 5 used of 5, the "
        "campaign adds 1: request an increase of L-FE5A380F in us-east-2 to at least 6 (Service Quotas, service vpc),"
        " free some, or drop us-east-2 from capacity.regions",
        "quota Running On-Demand P instances (L-417A185B) in us-east-2 (1 × p6-b200.48xlarge): 0 vCPUs used of 0, "
        "the campaign adds 192: request an increase of L-417A185B in us-east-2 to at least 192 (Service Quotas, "
        "service ec2), free some, or drop us-east-2 from capacity.regions",
    ]


def test_instance_families_map_to_their_on_demand_quota() -> None:
    assert on_demand_quota("p6-b300.48xlarge") == ON_DEMAND_P
    assert on_demand_quota("ml.p5.48xlarge") == ON_DEMAND_P
    assert on_demand_quota("g6e.48xlarge") == ON_DEMAND_G
    assert on_demand_quota("m7i.large") == ON_DEMAND_STANDARD
