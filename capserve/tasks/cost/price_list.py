"""Read EC2 on-demand prices from the AWS Price List API, when it is reachable; otherwise keep the table.

The packaged table (``capserve/core/cost/data/prices.yaml``) is always there; live prices only replace
its entries for the region read, and the report says which were used. The caller needs
``pricing:GetProducts`` (no resource-level permissions; AWS Price List API user guide).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from capserve.core.cost.price_list import (
    PRICING_ENDPOINT_REGION,
    ec2_on_demand_request,
    live_ec2_entry,
    on_demand_hourly_usd,
)
from capserve.core.cost.prices import PriceEntry, PriceTable
from capserve.core.errors import CapserveError
from capserve.tasks import aws

_MAX_PAGES = 20  # a filtered on-demand query answers one product; more pages than this is a wrong filter


def read_ec2_prices(region: str, instance_types: list[str], *, today: dt.date, client: Any = None) -> list[PriceEntry]:
    """One live entry per instance type. Raises ``RetryableError``/``PermanentError`` (converted) on failure."""
    pricing = client or aws.client("pricing", PRICING_ENDPOINT_REGION)
    entries = []
    for instance_type in instance_types:
        what = f"on-demand price of {instance_type} in {region}"
        documents: list[str] = []
        token: str | None = None
        try:
            for _ in range(_MAX_PAGES):
                answer = pricing.get_products(**ec2_on_demand_request(instance_type, region, token))
                documents += answer.get("PriceList", [])
                token = answer.get("NextToken")
                if not token:
                    break
        except (ClientError, BotoCoreError) as exc:
            raise aws.convert(
                exc, f"reading the {what} from the AWS Price List API", fix="allow pricing:GetProducts"
            ) from exc
        entries.append(live_ec2_entry(instance_type, region, on_demand_hourly_usd(documents, what), today))
    return entries


def with_live_prices(
    table: PriceTable, region: str, instance_types: list[str], *, today: dt.date, client: Any = None
) -> tuple[PriceTable, str]:
    """The table with live EC2 prices when the Price List API answers, and a sentence for the report.

    A refused or unreachable API is not a failure of the campaign: the packaged table is used and the
    sentence says why (only capserve's own converted errors are caught here, never everything).
    """
    if not instance_types:
        return table, ""
    try:
        live = read_ec2_prices(region, instance_types, today=today, client=client)
    except CapserveError as exc:
        # Kept short: the sentence goes into the report (the ledger bounds it at 1,000 characters).
        return table, f"AWS Price List API not used ({str(exc)[:400]}); prices from the table dated {table.date}."
    return table.with_live_prices(live), (
        f"EC2 prices for {', '.join(instance_types)} read from the AWS Price List API on {today}."
    )
