"""The packaged price table, and pricing each kind of resource from it (hand-computed)."""

from __future__ import annotations

import datetime as dt

import pytest
import yaml

from capserve.core.cost.prices import PriceEntry, load_price_table
from capserve.core.cost.resources import (
    DataTransferUsage,
    EbsUsage,
    Ec2InstanceUsage,
    EksControlPlaneUsage,
    FsxDeployment,
    FsxLustreUsage,
    LoadBalancerUsage,
    NatGatewayUsage,
    PublicIpv4Usage,
    S3Usage,
    price_resource,
)
from capserve.core.errors import PermanentError

TABLE = load_price_table()
REGIONS = ("us-east-1", "us-east-2")


def test_the_packaged_table_is_dated_and_every_price_has_a_public_source() -> None:
    assert TABLE.date == dt.date(2026, 12, 1)
    for entry in TABLE.entries:
        assert entry.source.startswith("https://aws.amazon.com/"), entry.key
        assert entry.read_on <= TABLE.date
        if entry.status == "corroborated":
            assert entry.checked_against, entry.key


@pytest.mark.parametrize("region", REGIONS)
def test_every_charge_the_ledger_can_ask_for_is_priced_in_both_us_east_regions(region: str) -> None:
    fsx: list[FsxDeployment] = [
        "scratch_2",
        "persistent_2_125",
        "persistent_2_250",
        "persistent_2_500",
        "persistent_2_1000",
    ]
    usages = [
        Ec2InstanceUsage(name=f"system {t}", instance_type=t, count=1, hours=1)
        for t in ("m7i.large", "m7i.xlarge", "m6i.large", "m6i.xlarge", "m5.large", "m5.xlarge", "t3.medium")
    ] + [
        EksControlPlaneUsage(name="eks", hours=1),
        EksControlPlaneUsage(name="eks extended", hours=1, extended_support=True),
        NatGatewayUsage(name="nat", count=1, hours=1, gb_processed=1),
        LoadBalancerUsage(name="nlb", count=1, hours=1, capacity_unit_hours=1),
        LoadBalancerUsage(name="alb", lb_type="application", count=1, hours=1, capacity_unit_hours=1),
        S3Usage(name="s3", gb_stored=1, hours_stored=1, put_requests=1, get_requests=1, gb_out_to_internet=1),
        *(FsxLustreUsage(name=f"fsx {d}", deployment=d, capacity_gb=1200, hours=1) for d in fsx),
        EbsUsage(name="ebs", gb=1, hours=1),
        PublicIpv4Usage(name="ipv4", count=1, hours=1),
        DataTransferUsage(name="inter-az", path="inter_az", gb=1),
        DataTransferUsage(name="egress", path="internet_out", gb=1),
    ]
    for usage in usages:
        cost = price_resource(usage, TABLE, region)
        assert cost.cost is not None and cost.cost > 0, cost.detail


def test_a_region_checked_for_one_price_only_is_marked_unconfirmed_there() -> None:
    east1 = TABLE.quote("ec2.on_demand.m7i.xlarge", "us-east-1")
    east2 = TABLE.quote("ec2.on_demand.m7i.xlarge", "us-east-2")
    assert east1 is not None and east1.status == "corroborated"
    assert east2 is not None and east2.status == "unconfirmed"


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        # 2 × 25 h × $0.1008 = $5.04
        (Ec2InstanceUsage(name="system nodes", instance_type="m7i.large", count=2, hours=25), 5.04),
        # 24 h × $0.10 = $2.40; extended support 24 h × $0.60 = $14.40
        (EksControlPlaneUsage(name="eks", hours=24), 2.40),
        (EksControlPlaneUsage(name="eks", hours=24, extended_support=True), 14.40),
        # 2 × 24 h × $0.045 + 100 GB × $0.045 = 2.16 + 4.50 = $6.66
        (NatGatewayUsage(name="nat", count=2, hours=24, gb_processed=100), 6.66),
        # 24 h × $0.0225 + 10 NLCU-h × $0.006 = 0.54 + 0.06 = $0.60
        (LoadBalancerUsage(name="nlb", count=1, hours=24, capacity_unit_hours=10), 0.60),
        # 1,460 GB × 365 h / 730 = 730 GB-month × $0.023 = 16.79; 10,000 PUT × 0.005/1000 = 0.05;
        # 100,000 GET × 0.0004/1000 = 0.04; 10 GB out × 0.09 = 0.90 → $17.78
        (
            S3Usage(
                name="s3",
                gb_stored=1460,
                hours_stored=365,
                put_requests=10_000,
                get_requests=100_000,
                gb_out_to_internet=10,
            ),
            17.78,
        ),
        # 2,400 GB × 73 h / 730 = 240 GB-month × $0.145 = $34.80
        (FsxLustreUsage(name="fsx", deployment="persistent_2_125", capacity_gb=2400, hours=73), 34.80),
        # 730 GB × 10 h / 730 = 10 GB-month × $0.08 = $0.80
        (EbsUsage(name="ebs", gb=730, hours=10), 0.80),
        # 3 × 24 h × $0.005 = $0.36
        (PublicIpv4Usage(name="ipv4", count=3, hours=24), 0.36),
        # Inter-AZ: 100 GB × $0.01 out + × $0.01 in = $2.00
        (DataTransferUsage(name="inter-az", path="inter_az", gb=100), 2.00),
    ],
)
def test_each_kind_of_resource_is_priced_as_computed_by_hand(usage: object, expected: float) -> None:
    cost = price_resource(usage, TABLE, "us-east-1")  # type: ignore[arg-type]
    assert cost.cost == pytest.approx(expected)
    assert cost.detail and cost.price_status is not None


def test_a_price_missing_for_the_region_gives_no_cost_and_says_what_to_add() -> None:
    cost = price_resource(
        Ec2InstanceUsage(name="system", instance_type="m7i.large", count=2, hours=5), TABLE, "eu-west-1"
    )
    assert cost.cost is None and cost.price_status is None
    assert "ec2.on_demand.m7i.large" in cost.detail and "eu-west-1" in cost.detail and "prices.yaml" in cost.detail


def test_an_unknown_instance_type_is_not_priced_rather_than_guessed() -> None:
    cost = price_resource(
        Ec2InstanceUsage(name="system", instance_type="x9z.huge", count=1, hours=1), TABLE, "us-east-1"
    )
    assert cost.cost is None


def test_zero_usage_costs_nothing_and_needs_no_price() -> None:
    cost = price_resource(NatGatewayUsage(name="nat", count=0, hours=0), TABLE, "eu-west-1")
    assert cost.cost == 0 and cost.detail == "nothing used"


def test_the_least_certain_price_is_the_resources_status() -> None:
    # S3 storage is corroborated, S3 requests unconfirmed: the total is only as sure as its least sure part.
    cost = price_resource(S3Usage(name="s3", gb_stored=10, hours_stored=10, put_requests=1000), TABLE, "us-east-1")
    assert cost.price_status == "unconfirmed"
    only_storage = price_resource(S3Usage(name="s3", gb_stored=10, hours_stored=10), TABLE, "us-east-1")
    assert only_storage.price_status == "corroborated"


def test_live_prices_are_preferred_for_their_region_only() -> None:
    live = PriceEntry(
        key="ec2.on_demand.m7i.large",
        unit="USD per instance-hour",
        usd={"us-east-1": 0.2},
        source="https://pricing.us-east-1.amazonaws.com",
        read_on=dt.date(2026, 12, 2),
        status="price-list-api",
    )
    table = TABLE.with_live_prices([live])
    assert table.quote("ec2.on_demand.m7i.large", "us-east-1").usd == 0.2  # type: ignore[union-attr]
    assert table.quote("ec2.on_demand.m7i.large", "us-east-2").usd == 0.1008  # type: ignore[union-attr]
    assert table.date == TABLE.date  # the packaged table's date does not move
    with pytest.raises(ValueError, match="price-list-api"):
        TABLE.with_live_prices([live.model_copy(update={"status": "official"})])


def _table_yaml(**changes: object) -> str:
    data = {
        "date": "2026-12-01",
        "entries": [
            {
                "key": "eks.control_plane.standard",
                "unit": "USD per cluster-hour",
                "usd": {"us-east-1": 0.1},
                "source": "https://aws.amazon.com/eks/pricing/",
                "read_on": "2026-12-01",
                "status": "official",
            }
        ],
    }
    data.update(changes)
    return yaml.safe_dump(data)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"date": "2026-11-30"}, "read after the table's date"),
        (
            {"entries": [{**yaml.safe_load(_table_yaml())["entries"][0], "status": "corroborated"}]},
            "lists the pages it was checked against",
        ),
        ({"entries": [{**yaml.safe_load(_table_yaml())["entries"][0], "usd": {"us-mars-1a": 1}}]}, "not an AWS region"),
        ({"entries": [yaml.safe_load(_table_yaml())["entries"][0]] * 2}, "listed twice"),
        ({"entries": [{**yaml.safe_load(_table_yaml())["entries"][0], "source": "http://x"}]}, "source"),
    ],
)
def test_a_bad_price_table_is_one_clear_error(changes: dict[str, object], message: str) -> None:
    with pytest.raises(PermanentError, match=message):
        load_price_table(_table_yaml(**changes))


def test_a_price_table_that_is_not_yaml_is_refused() -> None:
    with pytest.raises(PermanentError, match="not a valid price table"):
        load_price_table("date: [")
