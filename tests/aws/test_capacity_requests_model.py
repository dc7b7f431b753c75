"""Every request builder in core/capacity, checked against botocore's service model (Stubber, no expected_params).

Without ``expected_params`` the Stubber lets botocore's parameter validation run on the real request
(docs/sandbox.md §7), so a misspelt or missing member fails here, not at purchase time.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from capserve.core.capacity import requests as build
from capserve.core.capacity.offers import Offer
from capserve.core.spec import CapacitySpec

NOW = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
CAPACITY = CapacitySpec(
    provider="ec2-capacity-block", instance_type="p6-b300.48xlarge", instance_count=2, regions=["us-east-2"],
    earliest_start=NOW, latest_end=NOW + timedelta(days=14), duration_hours=48, max_upfront_fee_usd=20_000,
)
BLOCK = Offer(
    provider="ec2-capacity-block", region="us-east-2", availability_zone="us-east-2a", offering_id="cbo-1",
    start=NOW, end=NOW + timedelta(days=2), instance_type="p6-b300.48xlarge", instance_count=2, upfront_fee=11000,
)
PLAN = BLOCK.model_copy(update={"provider": "sagemaker-training-plan", "offering_id": "tpo-1"})

ARN = "arn:aws:sagemaker:us-east-2:123456789012:training-plan/capserve-k3-demo"
# Minimal responses that satisfy each output shape's required members (the Stubber validates those too).
RESPONSES: dict[str, dict[str, Any]] = {
    "search_training_plan_offerings": {"TrainingPlanOfferings": []},
    "create_training_plan": {"TrainingPlanArn": ARN},
    "describe_training_plan": {"TrainingPlanArn": ARN, "TrainingPlanName": "capserve-k3-demo", "Status": "Active"},
}

CASES: list[tuple[str, str, Callable[[], dict[str, Any]]]] = [
    ("ec2", "describe_capacity_block_offerings", lambda: build.capacity_block_offerings_request(CAPACITY)),
    ("ec2", "describe_capacity_block_offerings",
     lambda: build.capacity_block_offerings_request(CAPACITY, next_token="t")),
    ("ec2", "purchase_capacity_block", lambda: build.purchase_capacity_block_request(BLOCK, "k3-demo")),
    ("ec2", "purchase_capacity_block", lambda: build.purchase_capacity_block_request(BLOCK, "k3-demo", dry_run=True)),
    ("ec2", "describe_capacity_reservations",
     lambda: build.reservations_by_campaign_request("k3-demo", next_token="t")),
    ("ec2", "describe_capacity_reservations", lambda: build.reservation_by_id_request("cr-0123456789abcdef0")),
    ("sagemaker", "search_training_plan_offerings", lambda: build.training_plan_offerings_request(CAPACITY)),
    ("sagemaker", "create_training_plan", lambda: build.create_training_plan_request(PLAN, "k3-demo")),
    ("sagemaker", "describe_training_plan", lambda: build.describe_training_plan_request("capserve-k3-demo")),
]


@pytest.mark.parametrize(("service", "operation", "builder"), CASES)
def test_request_matches_the_service_model(service: str, operation: str, builder: Callable[[], dict[str, Any]]) -> None:
    client = boto3.client(service, region_name="us-east-2", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(client) as stub:
        stub.add_response(operation, RESPONSES.get(operation, {}))
        getattr(client, operation)(**builder())
        stub.assert_no_pending_responses()
