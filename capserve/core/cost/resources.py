"""The resources a campaign runs besides the prepaid GPUs, and what each cost from the price table.

One small model per kind of AWS charge (a discriminated union on ``kind``), so that what the wiring
records is exactly what the price table can price. Quantities are what the campaign ran; prices come
from ``capserve/core/cost/data/prices.yaml`` (docs/cost.md lists every source).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from capserve.core.cost.prices import PriceQuote, PriceStatus, PriceTable, worst_status

_MAX_HOURS = 24 * 366  # a campaign's resources live at most as long as its reservation (182 days) plus margins
_MAX_GB = 1e9


class _Usage(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=120, description="What a person reads in the report.")


class Ec2InstanceUsage(_Usage):
    """On-demand instances (the system node group): never the reservation's GPU instances, which are prepaid."""

    kind: Literal["ec2_instance"] = "ec2_instance"
    instance_type: str = Field(pattern=r"^[a-z][a-z0-9-]*\.[a-z0-9]+$", max_length=64, description="EC2 type.")
    count: int = Field(ge=0, le=1000, description="Instances running.")
    hours: float = Field(ge=0, le=_MAX_HOURS, description="Hours each ran.")


class EksControlPlaneUsage(_Usage):
    kind: Literal["eks_control_plane"] = "eks_control_plane"
    hours: float = Field(ge=0, le=_MAX_HOURS, description="Hours the cluster existed.")
    extended_support: bool = Field(False, description="True when its Kubernetes version is in extended support.")


class NatGatewayUsage(_Usage):
    kind: Literal["nat_gateway"] = "nat_gateway"
    count: int = Field(ge=0, le=100, description="NAT gateways.")
    hours: float = Field(ge=0, le=_MAX_HOURS, description="Hours each existed.")
    gb_processed: float = Field(0, ge=0, le=_MAX_GB, description="GB through all of them, both directions.")


class LoadBalancerUsage(_Usage):
    kind: Literal["load_balancer"] = "load_balancer"
    lb_type: Literal["network", "application"] = Field("network", description="NLB or ALB.")
    count: int = Field(ge=0, le=100, description="Load balancers.")
    hours: float = Field(ge=0, le=_MAX_HOURS, description="Hours each existed.")
    capacity_unit_hours: float = Field(0, ge=0, le=_MAX_GB, description="NLCU-hours (NLB) or LCU-hours (ALB).")


class S3Usage(_Usage):
    """S3 Standard. Transfer from S3 to EC2 in the same region is free, so only internet egress is priced."""

    kind: Literal["s3"] = "s3"
    gb_stored: float = Field(ge=0, le=_MAX_GB, description="GB kept in S3 Standard.")
    hours_stored: float = Field(ge=0, le=_MAX_HOURS, description="Hours they were kept (counted for this campaign).")
    put_requests: int = Field(0, ge=0, le=10**12, description="PUT, COPY, POST and LIST requests.")
    get_requests: int = Field(0, ge=0, le=10**12, description="GET and other requests.")
    gb_out_to_internet: float = Field(0, ge=0, le=_MAX_GB, description="GB sent out to the internet.")


FsxDeployment = Literal["scratch_2", "persistent_2_125", "persistent_2_250", "persistent_2_500", "persistent_2_1000"]


class FsxLustreUsage(_Usage):
    kind: Literal["fsx_lustre"] = "fsx_lustre"
    deployment: FsxDeployment = Field(description="Deployment type (persistent: MB/s per TiB of throughput).")
    capacity_gb: float = Field(ge=0, le=_MAX_GB, description="Provisioned storage capacity in GB.")
    hours: float = Field(ge=0, le=_MAX_HOURS, description="Hours the file system existed.")


class EbsUsage(_Usage):
    kind: Literal["ebs_gp3"] = "ebs_gp3"
    gb: float = Field(ge=0, le=_MAX_GB, description="Provisioned GB over all volumes.")
    hours: float = Field(ge=0, le=_MAX_HOURS, description="Hours the volumes existed.")


class PublicIpv4Usage(_Usage):
    kind: Literal["public_ipv4"] = "public_ipv4"
    count: int = Field(ge=0, le=10_000, description="Public IPv4 addresses in use or idle.")
    hours: float = Field(ge=0, le=_MAX_HOURS, description="Hours each was held.")


class DataTransferUsage(_Usage):
    kind: Literal["data_transfer"] = "data_transfer"
    path: Literal["inter_az", "internet_out"] = Field(description="Where the bytes went.")
    gb: float = Field(ge=0, le=_MAX_GB, description="GB moved.")


ResourceUsage = Annotated[
    Ec2InstanceUsage
    | EksControlPlaneUsage
    | NatGatewayUsage
    | LoadBalancerUsage
    | S3Usage
    | FsxLustreUsage
    | EbsUsage
    | PublicIpv4Usage
    | DataTransferUsage,
    Field(discriminator="kind"),
]


class ResourceCost(BaseModel):
    """One resource's cost, and how it was computed (so a person can check it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=120, description="The resource, as in the usage.")
    cost: float | None = Field(ge=0, description="USD; None when the table has no price for it in this region.")
    detail: str = Field(max_length=1000, description="quantity × unit price for each charge, or what price is missing.")
    price_status: PriceStatus | None = Field(description="The least certain price used (None when unpriced).")


class _Charges:
    """Collects quantity × price lines; remembers the prices it could not find."""

    def __init__(self, table: PriceTable, region: str) -> None:
        self.table, self.region = table, region
        self.total = 0.0
        self.lines: list[str] = []
        self.missing: list[str] = []
        self.statuses: list[PriceStatus] = []

    def add(self, key: str, quantity: float, what: str, *, times: float = 1.0) -> None:
        if quantity == 0:
            return
        quote: PriceQuote | None = self.table.quote(key, self.region)
        if quote is None:
            self.missing.append(key)
            return
        self.total += quantity * quote.usd * times
        factor = f" × {times:g}" if times != 1 else ""
        self.lines.append(f"{what} × ${quote.usd:g}{factor} ({key})")
        self.statuses.append(quote.status)

    def result(self, name: str) -> ResourceCost:
        if self.missing:
            keys = ", ".join(self.missing)
            return ResourceCost(
                name=name,
                cost=None,
                detail=f"no price for {keys} in {self.region} in the price table dated {self.table.date}: "
                "add it to capserve/core/cost/data/prices.yaml",
                price_status=None,
            )
        return ResourceCost(
            name=name,
            cost=round(self.total, 4),
            detail="; ".join(self.lines) or "nothing used",
            price_status=worst_status(self.statuses) if self.statuses else None,
        )


def price_resource(usage: ResourceUsage, table: PriceTable, region: str) -> ResourceCost:
    """Price one resource's usage from the table. A missing price gives cost None, never a guess."""
    charges = _Charges(table, region)
    month = table.hours_per_month
    match usage:
        case Ec2InstanceUsage():
            charges.add(
                f"ec2.on_demand.{usage.instance_type}",
                usage.count * usage.hours,
                f"{usage.count} × {usage.instance_type} × {usage.hours:g} h",
            )
        case EksControlPlaneUsage():
            tier = "extended" if usage.extended_support else "standard"
            charges.add(f"eks.control_plane.{tier}", usage.hours, f"{usage.hours:g} cluster-h")
        case NatGatewayUsage():
            charges.add("vpc.nat_gateway.hour", usage.count * usage.hours, f"{usage.count} × {usage.hours:g} h")
            charges.add("vpc.nat_gateway.gb", usage.gb_processed, f"{usage.gb_processed:g} GB")
        case LoadBalancerUsage():
            short = "nlb" if usage.lb_type == "network" else "alb"
            charges.add(f"elb.{short}.hour", usage.count * usage.hours, f"{usage.count} × {usage.hours:g} h")
            charges.add(
                f"elb.{short}.capacity_unit_hour", usage.capacity_unit_hours, f"{usage.capacity_unit_hours:g} CU-h"
            )
        case S3Usage():
            gb_months = usage.gb_stored * usage.hours_stored / month
            charges.add(
                "s3.standard.gb_month", gb_months, f"{usage.gb_stored:g} GB × {usage.hours_stored:g} h / {month:g}"
            )
            charges.add("s3.standard.put_per_1000", usage.put_requests / 1000, f"{usage.put_requests:,} PUT/1000")
            charges.add("s3.standard.get_per_1000", usage.get_requests / 1000, f"{usage.get_requests:,} GET/1000")
            charges.add("transfer.internet_out.gb", usage.gb_out_to_internet, f"{usage.gb_out_to_internet:g} GB out")
        case FsxLustreUsage():
            gb_months = usage.capacity_gb * usage.hours / month
            charges.add(
                f"fsx.lustre.{usage.deployment}.gb_month",
                gb_months,
                f"{usage.capacity_gb:g} GB × {usage.hours:g} h / {month:g}",
            )
        case EbsUsage():
            charges.add(
                "ebs.gp3.gb_month", usage.gb * usage.hours / month, f"{usage.gb:g} GB × {usage.hours:g} h / {month:g}"
            )
        case PublicIpv4Usage():
            charges.add("vpc.public_ipv4.hour", usage.count * usage.hours, f"{usage.count} × {usage.hours:g} h")
        case DataTransferUsage():
            if usage.path == "inter_az":
                # Billed on both sides of the AZ boundary: out of one AZ and into the other.
                charges.add("transfer.inter_az.gb_each_direction", usage.gb, f"{usage.gb:g} GB", times=2)
            else:
                charges.add("transfer.internet_out.gb", usage.gb, f"{usage.gb:g} GB")
    return charges.result(usage.name)
