"""AWS Price List API (``pricing:GetProducts``) requests and answers for EC2 on-demand prices, as plain data.

The API answers with ``PriceList``: a list of JSON documents, one per product, each with the product's
attributes and its terms; an on-demand term holds price dimensions with ``pricePerUnit.USD`` as a decimal
string (AWS Price List API user guide, "GetProducts"; the botocore service model ``pricing``). The
sender is ``capserve/tasks/cost/price_list.py``; moto does not implement this API.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from capserve.core.cost.prices import PriceEntry
from capserve.core.errors import PermanentError

# The Price List query API is served from a few regions only; us-east-1 answers for every region's prices.
PRICING_ENDPOINT_REGION = "us-east-1"
PRICE_LIST_SOURCE = "https://pricing.us-east-1.amazonaws.com"


def ec2_on_demand_request(instance_type: str, region: str, next_token: str | None = None) -> dict[str, Any]:
    """GetProducts for a Linux, shared-tenancy, on-demand instance type in one region."""
    match = {
        "instanceType": instance_type,
        "regionCode": region,
        "operatingSystem": "Linux",
        "tenancy": "Shared",
        "preInstalledSw": "NA",
        "capacitystatus": "Used",  # not the "unused reservation" and "allocated" variants of the product
        "licenseModel": "No License required",
    }
    request: dict[str, Any] = {
        "ServiceCode": "AmazonEC2",
        "FormatVersion": "aws_v1",
        "Filters": [{"Type": "TERM_MATCH", "Field": field, "Value": value} for field, value in match.items()],
        "MaxResults": 100,
    }
    if next_token:
        request["NextToken"] = next_token
    return request


def on_demand_hourly_usd(price_list: list[str], what: str) -> float:
    """The one hourly on-demand USD price in a GetProducts answer; refuses none or several different ones."""
    prices: set[float] = set()
    for document in price_list:
        try:
            product = json.loads(document)
            terms = product.get("terms", {}).get("OnDemand", {})
            for term in terms.values():
                for dimension in term.get("priceDimensions", {}).values():
                    if dimension.get("unit") == "Hrs":
                        prices.add(float(dimension["pricePerUnit"]["USD"]))
        except (ValueError, KeyError, AttributeError, TypeError) as exc:
            raise PermanentError(f"{what}: the Price List API answered a product we cannot read ({exc})") from None
    if not prices:
        raise PermanentError(f"{what}: the Price List API has no on-demand hourly price; check the instance type")
    if len(prices) > 1:
        listed = ", ".join(f"${p:g}" for p in sorted(prices))
        raise PermanentError(f"{what}: the Price List API answered several hourly prices ({listed}); not guessing")
    return prices.pop()


def live_ec2_entry(instance_type: str, region: str, usd: float, today: dt.date) -> PriceEntry:
    return PriceEntry(
        key=f"ec2.on_demand.{instance_type}",
        unit="USD per instance-hour",
        usd={region: usd},
        source=PRICE_LIST_SOURCE,
        read_on=today,
        status="price-list-api",
        note="Linux, shared tenancy, on-demand; read from pricing:GetProducts at run time.",
    )
