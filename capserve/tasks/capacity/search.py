"""Offer search: every region in the spec, concurrently, one client per region, every page; and each region's
zones, by which the ranking decides where a cluster can be built (``capserve.core.capacity.zones``)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from capserve.core.capacity.offers import Offer, offer_from_capacity_block, offers_from_training_plan
from capserve.core.capacity.requests import capacity_block_offerings_request, training_plan_offerings_request
from capserve.core.capacity.zones import Zone, zones_from_describe
from capserve.core.spec import CapacitySpec
from capserve.tasks.aws import client
from capserve.tasks.capacity.errors import capacity_error
from capserve.tasks.resilience import aws_task


def capacity_block_offers(capacity: CapacitySpec, region: str) -> list[Offer]:
    """Every DescribeCapacityBlockOfferings page in one region (botocore's paginator follows NextToken)."""
    ec2 = client("ec2", region)
    try:
        pages = ec2.get_paginator("describe_capacity_block_offerings").paginate(
            **capacity_block_offerings_request(capacity)
        )
        raw = [item for page in pages for item in page.get("CapacityBlockOfferings", [])]
    except Exception as exc:
        raise capacity_error(
            exc, f"searching Capacity Block offerings in {region}", iam_action="ec2:DescribeCapacityBlockOfferings"
        ) from exc
    return [offer_from_capacity_block(region, item) for item in raw]


def training_plan_offers(capacity: CapacitySpec, region: str) -> list[Offer]:
    """SearchTrainingPlanOfferings in one region (the API has no pagination)."""
    sagemaker = client("sagemaker", region)
    try:
        page: dict[str, Any] = sagemaker.search_training_plan_offerings(**training_plan_offerings_request(capacity))
    except Exception as exc:
        raise capacity_error(
            exc, f"searching training plan offerings in {region}", iam_action="sagemaker:SearchTrainingPlanOfferings"
        ) from exc
    return [offer for raw in page.get("TrainingPlanOfferings", []) for offer in offers_from_training_plan(region, raw)]


@aws_task(name="search-capacity-offers")
def search_offers(capacity: CapacitySpec) -> list[Offer]:
    """All offers for the spec across its regions, searched concurrently (each thread builds its own client).

    A region that fails fails the search: buying while one region's answer is unknown could pick a
    worse offer without anyone noticing.
    """
    search = training_plan_offers if capacity.provider == "sagemaker-training-plan" else capacity_block_offers
    with ThreadPoolExecutor(max_workers=min(len(capacity.regions), 8), thread_name_prefix="offers") as pool:
        per_region = list(pool.map(lambda region: search(capacity, region), capacity.regions))
    return [offer for offers in per_region for offer in offers]


def _region_zones(region: str) -> list[Zone]:
    """Every zone of the region, Local and Wavelength Zones included whatever the opt-in status, so each
    offering's zone can be looked up by name (EC2 API reference, DescribeAvailabilityZones)."""
    ec2 = client("ec2", region)
    try:
        response = ec2.describe_availability_zones(AllAvailabilityZones=True)
    except Exception as exc:
        raise capacity_error(
            exc, f"listing the availability zones of {region}", iam_action="ec2:DescribeAvailabilityZones"
        ) from exc
    return zones_from_describe(response)


@aws_task(name="describe-capacity-zones")
def search_zones(capacity: CapacitySpec) -> dict[str, list[Zone]]:
    """Region → its zones (names, IDs, types) for every region of the spec, looked up concurrently."""
    with ThreadPoolExecutor(max_workers=min(len(capacity.regions), 8), thread_name_prefix="zones") as pool:
        return dict(zip(capacity.regions, pool.map(_region_zones, capacity.regions), strict=True))
