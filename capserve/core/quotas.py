"""Account quotas the campaign will meet, judged before anything is bought (docs/preflight.md §3).

The prepare run builds the cluster's network ``cluster_lead`` before the block (``capserve.core.cluster.network``:
one VPC with its internet gateway, one Elastic IP for the one NAT gateway, which goes in the reservation's zone),
and a rehearsal launches on-demand instances. A quota that is full fails those calls (``VpcLimitExceeded``,
``AddressLimitExceeded``, ``NatGatewayLimitExceeded``, ``VcpuLimitExceeded``) after a block that cannot be
cancelled was bought. Preflight reads each quota from Service Quotas and the usage from EC2
(``capserve.tasks.preflight``); this module decides, naming the quota code and the value to ask for.

Pure: readings in, problems out.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class Quota(BaseModel):
    """One Service Quotas quota: its service and quota codes, as the Service Quotas console lists them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    service_code: Literal["vpc", "ec2"] = Field(description="Service Quotas' service code.")
    code: str = Field(pattern=r"^L-[0-9A-F]{8}$", description="Service Quotas' quota code.")
    name: str = Field(min_length=1, max_length=100, description="The quota's name in Service Quotas.")
    unit: str = Field("", max_length=20, description="What it counts, when not a number of resources ('vCPUs').")


# Codes and names as Service Quotas lists them (docs/preflight.md §3 gives the sources): the VPC quotas page
# (https://docs.aws.amazon.com/vpc/latest/userguide/amazon-vpc-limits.html) and the EC2 on-demand instance
# quotas (https://docs.aws.amazon.com/ec2/latest/instancetypes/ec2-instance-quotas.html).
VPCS = Quota(service_code="vpc", code="L-F678F1CE", name="VPCs per Region")
NAT_GATEWAYS = Quota(service_code="vpc", code="L-FE5A380F", name="NAT gateways per Availability Zone")
ELASTIC_IPS = Quota(service_code="ec2", code="L-0263D0A3", name="EC2-VPC Elastic IPs")
ON_DEMAND_P = Quota(service_code="ec2", code="L-417A185B", name="Running On-Demand P instances", unit="vCPUs")
ON_DEMAND_G = Quota(service_code="ec2", code="L-DB2E81BA", name="Running On-Demand G and VT instances", unit="vCPUs")
ON_DEMAND_STANDARD = Quota(
    service_code="ec2", code="L-1216C47A", name="Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances",
    unit="vCPUs",
)

# What one campaign's network adds (capserve.core.cluster.network: vpc_request, elastic_ip_request,
# nat_gateway_request are each sent once). An internet gateway comes with the VPC: AWS ties its quota to
# the VPC quota ("Internet gateways per Region", same page).
NETWORK_NEEDS: tuple[tuple[Quota, int], ...] = ((VPCS, 1), (ELASTIC_IPS, 1), (NAT_GATEWAYS, 1))


def on_demand_quota(instance_type: str) -> Quota:
    """The on-demand vCPU quota an instance type counts against (by its family letter)."""
    family = instance_type.removeprefix("ml.")[:1]
    if family == "p":
        return ON_DEMAND_P
    if family in ("g", "v"):
        return ON_DEMAND_G
    return ON_DEMAND_STANDARD


class QuotaReading(BaseModel):
    """One quota in one region (or zone) as read before the purchase, with what the campaign adds to it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    quota: Quota = Field(description="Which quota.")
    region: str = Field(min_length=1, max_length=32, description="The region it applies in.")
    where: str = Field("", max_length=200, description="The zone it was read for, when it is per zone.")
    limit: float | None = Field(None, ge=0, description="The applied value; None when it could not be read.")
    used: int = Field(0, ge=0, description="How much of it the account uses now.")
    needed: int = Field(ge=0, description="How much the campaign adds.")
    unread: str = Field("", max_length=500, description="Why the value could not be read (then it is not judged).")


def fits(*, used: int, adding: int, limit: float) -> bool:
    """The rule AWS applies on create (and the sandbox plays): a quota holds at most its value."""
    return used + adding <= limit


def quota_problems(readings: tuple[QuotaReading, ...]) -> list[str]:
    """Every quota the campaign would overflow, with the increase to request; unread quotas are not judged."""
    problems = []
    for r in readings:
        if r.limit is None or fits(used=r.used, adding=r.needed, limit=r.limit):
            continue
        q, wanted = r.quota, r.used + r.needed
        unit = f" {q.unit}" if q.unit else ""
        where = f" ({r.where})" if r.where else ""
        problems.append(
            f"quota {q.name} ({q.code}) in {r.region}{where}: {r.used}{unit} used of {r.limit:g}, the campaign adds "
            f"{r.needed}: request an increase of {q.code} in {r.region} to at least {wanted} (Service Quotas, service "
            f"{q.service_code}), free some, or drop {r.region} from capacity.regions"
        )
    return problems
