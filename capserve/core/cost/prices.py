"""The dated price table: what the resources besides the prepaid GPUs cost, with where each price was read.

The table ships in the package (``data/prices.yaml``) so that a report can always price what a campaign
ran, even with no network; its date goes into every report. The AWS Price List API, when reachable,
replaces entries with prices read at run time (``capserve/tasks/cost/price_list.py``). The upfront fee
of a reservation is never in this table: only the amount AWS charged is the truth (docs/cost.md).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable
from importlib import resources
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from capserve.core.errors import PermanentError

# How sure we are of a price, most certain first:
# - price-list-api: read from the AWS Price List API at run time;
# - official: read on an AWS page (pricing page, AWS blog);
# - corroborated: the AWS pricing page's figure as quoted by dated independent pages (listed per entry);
# - derived: computed from a corroborated price by a rule AWS applies (e.g. sizes within a family scale);
# - unconfirmed: a value we could not check against any page; shown as such in the report.
PriceStatus = Literal["price-list-api", "official", "corroborated", "derived", "unconfirmed"]
_TRUST: tuple[PriceStatus, ...] = ("price-list-api", "official", "corroborated", "derived", "unconfirmed")

REGION = r"^[a-z]{2}(-gov)?-[a-z]+-\d$"


def worst_status(statuses: Iterable[PriceStatus]) -> PriceStatus:
    """The least certain of several prices (what a total built from them can claim)."""
    return max(statuses, key=_TRUST.index)


class PriceEntry(BaseModel):
    """One charge (e.g. NAT gateway per hour) in each region it is known for."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str = Field(
        pattern=r"^[a-z0-9_]+(\.[a-z0-9_-]+)+$", max_length=100, description="Dotted name the code looks up."
    )
    unit: str = Field(min_length=1, max_length=80, description="What one unit is, e.g. 'USD per NAT gateway-hour'.")
    usd: dict[str, float] = Field(min_length=1, max_length=40, description="Region → price in USD per unit.")
    source: str = Field(pattern=r"^https://", max_length=300, description="The public page the price comes from.")
    read_on: dt.date = Field(description="When the price was read or checked.")
    status: PriceStatus = Field(description="How sure we are (see PriceStatus).")
    checked_against: list[str] = Field(
        default_factory=list, max_length=10, description="Independent dated pages that quote the same figure."
    )
    unconfirmed_regions: list[str] = Field(
        default_factory=list,
        max_length=40,
        description="Regions whose price is assumed equal to a checked region's and was not itself checked.",
    )
    note: str = Field("", max_length=500, description="Anything a reader must know (tier, conditions).")

    def status_in(self, region: str) -> PriceStatus:
        return "unconfirmed" if region in self.unconfirmed_regions else self.status

    @model_validator(mode="after")
    def _valid_prices(self) -> PriceEntry:
        stray = sorted(set(self.unconfirmed_regions) - set(self.usd))
        if stray:
            raise ValueError(f"{self.key}: unconfirmed_regions {', '.join(stray)} have no price")
        for region, usd in self.usd.items():
            if not re.match(REGION, region):
                raise ValueError(f"{self.key}: {region!r} is not an AWS region name")
            if not 0 <= usd < 1000:
                raise ValueError(f"{self.key}: price {usd} in {region} is outside 0..1000 USD per unit")
        if self.status == "corroborated" and not self.checked_against:
            raise ValueError(f"{self.key}: a corroborated price lists the pages it was checked against")
        return self


class PriceQuote(BaseModel):
    """One price for one region, with how sure we are of it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str = Field(description="The entry's key.")
    region: str = Field(description="Region of the price.")
    usd: float = Field(ge=0, description="USD per unit.")
    status: PriceStatus = Field(description="How sure we are.")
    source: str = Field(description="Where it comes from.")


class PriceTable(BaseModel):
    """Every price the ledger may need, dated."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    date: dt.date = Field(description="When the table was last read; every entry was read on or before it.")
    currency: Literal["USD"] = Field("USD", description="Currency of every price.")
    hours_per_month: float = Field(
        730,
        gt=0,
        le=744,
        description="Hours in a billing month for per-month prices (the AWS Pricing Calculator's 730).",
    )
    entries: list[PriceEntry] = Field(min_length=1, max_length=500, description="The prices.")
    live: list[PriceEntry] = Field(
        default_factory=list, max_length=500, description="Prices read from the Price List API at run time; preferred."
    )

    @model_validator(mode="after")
    def _consistent(self) -> PriceTable:
        keys = [e.key for e in self.entries]
        duplicates = sorted({k for k in keys if keys.count(k) > 1})
        if duplicates:
            raise ValueError(f"price keys listed twice: {', '.join(duplicates)}")
        late = [e.key for e in self.entries if e.read_on > self.date]
        if late:
            raise ValueError(f"entries read after the table's date {self.date}: {', '.join(late)}; raise 'date'")
        return self

    def quote(self, key: str, region: str) -> PriceQuote | None:
        for entry in [*self.live, *self.entries]:
            if entry.key == key and region in entry.usd:
                return PriceQuote(
                    key=key, region=region, usd=entry.usd[region], status=entry.status_in(region), source=entry.source
                )
        return None

    def with_live_prices(self, live: list[PriceEntry]) -> PriceTable:
        """This table with prices read from the AWS Price List API at run time, which quotes prefer.

        The packaged entries stay as they are (and so does the table's date): a live price replaces
        a packaged one only for the regions it was read in.
        """
        if any(entry.status != "price-list-api" for entry in live):
            raise ValueError("live prices must have status 'price-list-api'")
        return self.model_copy(update={"live": [*self.live, *live]})


def load_price_table(text: str | None = None) -> PriceTable:
    """The packaged table (or ``text``, a YAML document of the same shape), validated."""
    source = "capserve/core/cost/data/prices.yaml" if text is None else "the given price table"
    if text is None:
        text = resources.files("capserve.core.cost").joinpath("data/prices.yaml").read_text(encoding="utf-8")
    try:
        data = yaml.safe_load(text)
        return PriceTable.model_validate(data)
    except (yaml.YAMLError, ValidationError) as exc:
        raise PermanentError(f"{source} is not a valid price table: {exc}") from None
