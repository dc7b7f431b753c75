"""Live EC2 prices from the AWS Price List API: our requests against botocore's model, our parsing, the fallback.

moto does not implement ``pricing``, so botocore's Stubber stands in: without ``expected_params`` it
still validates every request we send against the real service model.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from capserve.core.cost.price_list import on_demand_hourly_usd
from capserve.core.cost.prices import load_price_table
from capserve.core.cost.resources import Ec2InstanceUsage, price_resource
from capserve.core.errors import PermanentError
from capserve.tasks.cost.price_list import read_ec2_prices, with_live_prices

TODAY = dt.date(2026, 12, 2)
TABLE = load_price_table()


def product(usd: str, *, unit: str = "Hrs") -> str:
    """One GetProducts PriceList document, shaped as the API answers (attributes trimmed)."""
    return json.dumps(
        {
            "product": {"productFamily": "Compute Instance", "attributes": {"instanceType": "m7i.large"}},
            "terms": {
                "OnDemand": {
                    "SKU.JRTCKXETXF": {
                        "priceDimensions": {"SKU.JRTCKXETXF.6YS6EN2CT7": {"unit": unit, "pricePerUnit": {"USD": usd}}}
                    }
                }
            },
        }
    )


def pricing_client() -> Any:
    return boto3.client("pricing", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")


def test_live_prices_are_read_and_preferred_over_the_table() -> None:
    client = pricing_client()
    with Stubber(client) as stub:
        # Two pages: the first carries a token, the second the product.
        stub.add_response("get_products", {"PriceList": [], "NextToken": "page-2", "FormatVersion": "aws_v1"})
        stub.add_response("get_products", {"PriceList": [product("0.1050000000")], "FormatVersion": "aws_v1"})
        table, note = with_live_prices(TABLE, "us-east-2", ["m7i.large"], today=TODAY, client=client)
        stub.assert_no_pending_responses()
    assert "read from the AWS Price List API on 2026-12-02" in note
    quote = table.quote("ec2.on_demand.m7i.large", "us-east-2")
    assert quote is not None and quote.usd == 0.105 and quote.status == "price-list-api"
    # us-east-1 was not read: it keeps the packaged price.
    assert table.quote("ec2.on_demand.m7i.large", "us-east-1").usd == 0.1008  # type: ignore[union-attr]
    cost = price_resource(
        Ec2InstanceUsage(name="system nodes", instance_type="m7i.large", count=2, hours=10), table, "us-east-2"
    )
    assert cost.cost == pytest.approx(2 * 10 * 0.105) and cost.price_status == "price-list-api"


def test_a_refused_api_leaves_the_table_and_says_why() -> None:
    client = pricing_client()
    with Stubber(client) as stub:
        stub.add_client_error("get_products", "AccessDeniedException", "not authorized to perform pricing:GetProducts")
        table, note = with_live_prices(TABLE, "us-east-1", ["m7i.large"], today=TODAY, client=client)
    assert table is TABLE
    assert "AccessDeniedException" in note and "allow pricing:GetProducts" in note and "2026-12-01" in note


def test_a_throttled_api_is_retryable_for_a_caller_that_wants_to_retry() -> None:
    from capserve.core.errors import RetryableError

    client = pricing_client()
    with Stubber(client) as stub:
        stub.add_client_error("get_products", "ThrottlingException", "slow down", http_status_code=400)
        with pytest.raises(RetryableError, match="m7i.large"):
            read_ec2_prices("us-east-1", ["m7i.large"], today=TODAY, client=client)


def test_nothing_to_read_sends_nothing() -> None:
    table, note = with_live_prices(TABLE, "us-east-1", [], today=TODAY, client=object())
    assert table is TABLE and note == ""


@pytest.mark.parametrize(
    ("documents", "message"),
    [
        ([], "no on-demand hourly price"),
        ([product("0.1", unit="Quantity")], "no on-demand hourly price"),
        ([product("0.1"), product("0.2")], "several hourly prices"),
        (["{not json"], "cannot read"),
        ([json.dumps({"terms": {"OnDemand": {"t": {"priceDimensions": {"d": {"unit": "Hrs"}}}}}})], "cannot read"),
    ],
)
def test_answers_we_cannot_trust_are_refused(documents: list[str], message: str) -> None:
    with pytest.raises(PermanentError, match=message):
        on_demand_hourly_usd(documents, "on-demand price of m7i.large in us-east-1")


def test_the_same_price_twice_is_one_price() -> None:
    assert on_demand_hourly_usd([product("0.1008"), product("0.1008000000")], "x") == 0.1008


def test_the_ledger_reports_where_its_prices_came_from() -> None:
    from capserve.core.cost.inputs import CostInputs
    from capserve.core.cost.ledger import build_ledger

    note = "AWS Price List API not used (AccessDeniedException); prices from the table dated 2026-12-01."
    ledger = build_ledger(CostInputs(campaign="k3", upfront_fee=0, region="us-east-1"), TABLE, price_note=note)
    assert note in ledger.notes
    assert ledger.report_section()["price_source"] == note
