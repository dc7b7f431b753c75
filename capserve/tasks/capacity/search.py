"""Offer search: every region in the spec, concurrently, one client per region, every page."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from prefect import task

from capserve.core.capacity.offers import Offer, offer_from_capacity_block, offers_from_training_plan
from capserve.core.capacity.requests import capacity_block_offerings_request, training_plan_offerings_request
from capserve.core.spec import CapacitySpec
from capserve.tasks.aws import client
from capserve.tasks.capacity.errors import capacity_error

# A guard against a paginating API that never stops handing out tokens.
MAX_PAGES = 50


def capacity_block_offers(capacity: CapacitySpec, region: str) -> list[Offer]:
    """Every DescribeCapacityBlockOfferings page in one region. Throttling and 5xx are retried by botocore."""
    ec2 = client("ec2", region)
    offers: list[Offer] = []
    token: str | None = None
    for _ in range(MAX_PAGES):
        try:
            page: dict[str, Any] = ec2.describe_capacity_block_offerings(
                **capacity_block_offerings_request(capacity, next_token=token)
            )
        except Exception as exc:
            raise capacity_error(
                exc, f"searching Capacity Block offerings in {region}", iam_action="ec2:DescribeCapacityBlockOfferings"
            ) from exc
        offers += [offer_from_capacity_block(region, raw) for raw in page.get("CapacityBlockOfferings", [])]
        token = page.get("NextToken")
        if not token:
            return offers
    raise capacity_error(
        RuntimeError(f"more than {MAX_PAGES} pages"), f"searching Capacity Block offerings in {region}",
        iam_action="ec2:DescribeCapacityBlockOfferings",
    )


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


@task(name="search-capacity-offers", tags=["aws"])
def search_offers(capacity: CapacitySpec) -> list[Offer]:
    """All offers for the spec across its regions, searched concurrently (each thread builds its own client).

    A region that fails fails the search: buying while one region's answer is unknown could pick a
    worse offer without anyone noticing.
    """
    search = training_plan_offers if capacity.provider == "sagemaker-training-plan" else capacity_block_offers
    with ThreadPoolExecutor(max_workers=min(len(capacity.regions), 8), thread_name_prefix="offers") as pool:
        per_region = list(pool.map(lambda region: search(capacity, region), capacity.regions))
    return [offer for offers in per_region for offer in offers]
