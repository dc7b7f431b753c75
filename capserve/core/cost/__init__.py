"""Cost truth for a campaign: the ledger, the dated price table, and planning before buying (pure).

How to read the ledger, and where every price comes from: docs/cost.md.
"""

from capserve.core.cost.causes import LOST_CAUSES, Cause
from capserve.core.cost.inputs import (
    AWS_TERMINATION_LEAD,
    BlockWindow,
    CostInputs,
    Interval,
    ScheduledRunMark,
    ThroughputPoint,
)
from capserve.core.cost.ledger import BiggestLoss, CostLedger, build_ledger
from capserve.core.cost.planning import (
    CostForecast,
    ExpectedTimeline,
    ThroughputEstimate,
    expected_resources,
    forecast_offer,
    forecast_table,
    forecast_window,
)
from capserve.core.cost.prices import PriceEntry, PriceQuote, PriceTable, load_price_table
from capserve.core.cost.resources import (
    DataTransferUsage,
    EbsUsage,
    Ec2InstanceUsage,
    EksControlPlaneUsage,
    FsxLustreUsage,
    LoadBalancerUsage,
    NatGatewayUsage,
    PublicIpv4Usage,
    ResourceCost,
    ResourceUsage,
    S3Usage,
    price_resource,
)
from capserve.core.cost.spec import CostSpec

__all__ = [
    "AWS_TERMINATION_LEAD",
    "LOST_CAUSES",
    "BiggestLoss",
    "BlockWindow",
    "Cause",
    "CostForecast",
    "CostInputs",
    "CostLedger",
    "CostSpec",
    "DataTransferUsage",
    "EbsUsage",
    "Ec2InstanceUsage",
    "EksControlPlaneUsage",
    "ExpectedTimeline",
    "FsxLustreUsage",
    "Interval",
    "LoadBalancerUsage",
    "NatGatewayUsage",
    "PriceEntry",
    "PriceQuote",
    "PriceTable",
    "PublicIpv4Usage",
    "ResourceCost",
    "ResourceUsage",
    "S3Usage",
    "ScheduledRunMark",
    "ThroughputEstimate",
    "ThroughputPoint",
    "build_ledger",
    "expected_resources",
    "forecast_offer",
    "forecast_table",
    "forecast_window",
    "load_price_table",
    "price_resource",
]
