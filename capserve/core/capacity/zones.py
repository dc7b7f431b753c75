"""Can capserve build its cluster where an offer's capacity is? A pure decision over the region's zones.

Two rules, both checked before anything is bought (docs/aws-capacity.md §1.8):

- **Only Availability Zones.** DescribeCapacityBlockOfferings also returns offerings in the Local Zones
  an account has opted into, marked by the offering's ``ZoneType`` (botocore ec2 model,
  ``CapacityBlockOffering.ZoneType``; ``DescribeCapacityBlockOfferings.AllAvailabilityZones``). capserve
  builds its subnets, control plane and node groups in Availability Zones only, so an offer whose zone
  is a ``local-zone`` or ``wavelength-zone`` (``AvailabilityZone.ZoneType``) is dropped.
- **EKS refuses some AZ IDs for cluster subnets**: use1-az3, usw1-az2 and cac1-az3 (EKS user guide,
  "View Amazon EKS networking requirements for VPC and subnets", "Subnet requirements for clusters").
  The rule is on the *cluster* subnets; node subnets are not restricted. The control plane needs
  subnets in two AZs, and bring-up puts them only in allowed zone IDs, so an offer in a refused AZ is
  still usable when the region has **two other** AZs that EKS accepts (the GPU nodes alone go in the
  block's AZ). A region with fewer cannot host the cluster at all.

Zone IDs (not names: names are shuffled per account) come from DescribeAvailabilityZones, read by
``capserve.tasks.capacity.zones``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from capserve.core.capacity.offers import Offer
from capserve.core.cluster.network import EKS_DISALLOWED_ZONE_IDS, EKS_MIN_AZS

AVAILABILITY_ZONE = "availability-zone"
# The zone IDs EKS refuses for a cluster's subnets, and how many zones it needs: one list, with its source,
# in capserve.core.cluster.network (the control-plane subnets are chosen by the same rule).
EKS_MIN_CLUSTER_AZS = EKS_MIN_AZS


class Zone(BaseModel):
    """One entry of DescribeAvailabilityZones, as far as the decision needs it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=64, description="ZoneName, e.g. us-east-1a (per account).")
    zone_id: str = Field(min_length=1, max_length=64, description="ZoneId, e.g. use1-az3 (the same for everyone).")
    zone_type: str = Field(min_length=1, max_length=32, description="availability-zone, local-zone or wavelength-zone.")
    state: str = Field("available", max_length=32, description="available, unavailable or constrained.")

    @property
    def eks_cluster_subnets_allowed(self) -> bool:
        """May EKS put control-plane interfaces in a subnet of this zone?"""
        return (
            self.zone_type == AVAILABILITY_ZONE
            and self.state != "unavailable"
            and self.zone_id not in EKS_DISALLOWED_ZONE_IDS
        )


def zones_from_describe(response: Mapping[str, Any]) -> list[Zone]:
    """Normalise a ``DescribeAvailabilityZones`` response."""
    return [
        Zone(
            name=raw["ZoneName"],
            zone_id=raw["ZoneId"],
            zone_type=raw.get("ZoneType", AVAILABILITY_ZONE),
            state=raw.get("State", "available"),
        )
        for raw in response.get("AvailabilityZones", [])
    ]


def zone_rejection(offer: Offer, zones: Sequence[Zone]) -> str | None:
    """Why the cluster cannot be built around this offer's zone, or None when it can.

    ``zones`` are the offer's region's zones. Each reason starts with a short kind and a colon (the
    ranking counts rejections per kind).
    """
    where = offer.availability_zone
    if offer.zone_type is not None and offer.zone_type != AVAILABILITY_ZONE:
        return _not_an_az(where, offer.zone_type)
    zone = next((z for z in zones if z.name == where), None)
    if zone is None:
        return (
            f"zone unknown: {where} is not among {offer.region}'s zones (DescribeAvailabilityZones), so "
            "capserve cannot check that EKS accepts it"
        )
    if zone.zone_type != AVAILABILITY_ZONE:
        return _not_an_az(where, zone.zone_type)
    allowed = sorted(z.zone_id for z in zones if z.eks_cluster_subnets_allowed and z.zone_id != zone.zone_id)
    needed = EKS_MIN_CLUSTER_AZS if zone.zone_id in EKS_DISALLOWED_ZONE_IDS else EKS_MIN_CLUSTER_AZS - 1
    if len(allowed) < needed:
        refused = (
            f"EKS refuses cluster subnets in {where} ({zone.zone_id})"
            if zone.zone_id in EKS_DISALLOWED_ZONE_IDS
            else f"{where} ({zone.zone_id}) is allowed"
        )
        return (
            f"no EKS control plane: {refused}, and {offer.region} has {len(allowed)} other Availability "
            f"Zone(s) EKS accepts ({', '.join(allowed) or 'none'}); the control plane needs "
            f"{EKS_MIN_CLUSTER_AZS} AZs in all"
        )
    return None


def _not_an_az(where: str, zone_type: str) -> str:
    return (
        f"not an Availability Zone: {where} is a {zone_type}; capserve builds its subnets and node groups "
        "in Availability Zones only"
    )
