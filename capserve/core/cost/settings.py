"""How the campaign prices what it ran: whether to ask the AWS Price List API (docs/cost.md §4.2)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class CostSettings(BaseModel):
    """Settings of the cost ledger (``CAPSERVE_COST__…``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    price_list_api: bool = Field(
        True,
        description="Read EC2 on-demand prices from the AWS Price List API when the ledger is built (needs "
        "pricing:GetProducts); off, or when it refuses, the packaged price table is used and the report says so.",
    )
