"""The sandbox's Capacity Block / training plan extension behaves as AWS documents (and fails loudly if moto moves)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from capserve_sandbox.aws_ext import capacity as ext
from capserve_sandbox.clock import CLOCK

REGION = "us-east-2"
NO_RETRIES = Config(retries={"mode": "standard", "total_max_attempts": 1})



@pytest.fixture
def ec2(sandbox: None) -> Iterator[Any]:
    ext.reset()
    CLOCK.reset()
    yield boto3.client("ec2", region_name=REGION, config=NO_RETRIES)
    ext.reset()
    CLOCK.reset()


def offerings(ec2: Any, **changes: Any) -> list[dict[str, Any]]:
    now = datetime.now(UTC)
    request = dict(InstanceType="p6-b300.48xlarge", InstanceCount=1, CapacityDurationHours=24,
                   StartDateRange=now, EndDateRange=now + timedelta(days=14))
    request.update(changes)
    return list(ec2.describe_capacity_block_offerings(**request)["CapacityBlockOfferings"])


def buy(ec2: Any, offering: dict[str, Any], campaign: str = "c1") -> dict[str, Any]:
    tags = [{"ResourceType": "capacity-reservation", "Tags": [{"Key": "capserve.io/campaign", "Value": campaign}]}]
    response = ec2.purchase_capacity_block(
        CapacityBlockOfferingId=offering["CapacityBlockOfferingId"], InstancePlatform="Linux/UNIX",
        TagSpecifications=tags,
    )
    return dict(response["CapacityReservation"])


def test_offerings_start_and_end_at_1130_utc_with_a_fee(ec2: Any) -> None:
    found = offerings(ec2)
    assert 1 <= len(found) <= ext.MAX_OFFERINGS
    for offering in found:
        for when in (offering["StartDate"], offering["EndDate"]):
            assert when.astimezone(UTC).time().isoformat() == "11:30:00"
        assert float(offering["UpfrontFee"]) > 0 and offering["CurrencyCode"] == "USD"
    assert {o["AvailabilityZone"] for o in found} == {f"{REGION}a", f"{REGION}b"}


def test_offerings_page_and_refuse_unknown_types(ec2: Any) -> None:
    first = ec2.describe_capacity_block_offerings(
        InstanceType="p6-b300.48xlarge", InstanceCount=1, CapacityDurationHours=24, MaxResults=4
    )
    assert len(first["CapacityBlockOfferings"]) == 4 and first["NextToken"]
    with pytest.raises(ClientError, match="InvalidParameterValue"):
        offerings(ec2, InstanceType="zz9.mega")


def test_purchase_dry_run_tags_and_clock_driven_states(ec2: Any) -> None:
    ext.SETTINGS.payment_pending_describes = 1
    offering = offerings(ec2)[0]
    with pytest.raises(ClientError, match="DryRunOperation"):
        ec2.purchase_capacity_block(
            CapacityBlockOfferingId=offering["CapacityBlockOfferingId"], InstancePlatform="Linux/UNIX", DryRun=True
        )
    bought = buy(ec2, offering)
    assert bought["State"] == "payment-pending"
    tagged = [{"Name": "tag:capserve.io/campaign", "Values": ["c1"]}]

    def state() -> str:
        [reservation] = ec2.describe_capacity_reservations(Filters=tagged)["CapacityReservations"]
        return str(reservation["State"])

    assert [state(), state()] == ["payment-pending", "scheduled"]
    CLOCK.advance(offering["StartDate"] - CLOCK.now())
    assert state() == "active"
    CLOCK.advance(timedelta(days=1))
    assert state() == "expired"
    assert ec2.describe_capacity_reservations(
        Filters=[{"Name": "tag:capserve.io/campaign", "Values": ["other"]}]
    )["CapacityReservations"] == []
    assert len(ext.calls("purchase_capacity_block")) == 1
    assert len(ext.calls("purchase_capacity_block", include_dry_run=True)) == 2


def test_auto_activate_moves_the_clock_to_the_start(ec2: Any) -> None:
    ext.SETTINGS.auto_activate = True
    bought = buy(ec2, offerings(ec2)[0])
    [seen] = ec2.describe_capacity_reservations(CapacityReservationIds=[bought["CapacityReservationId"]])[
        "CapacityReservations"
    ]
    assert seen["State"] == "active" and seen["AvailableInstanceCount"] == 1
    assert CLOCK.now() >= bought["StartDate"]


def test_auto_activate_moves_the_clock_only_for_the_reservations_asked_about(ec2: Any) -> None:
    ext.SETTINGS.auto_activate = True
    before = CLOCK.now()
    buy(ec2, offerings(ec2)[0], campaign="mine")
    # Another campaign looks for its own tag and finds nothing: the first campaign's block has not started.
    others = ec2.describe_capacity_reservations(Filters=[{"Name": "tag:capserve.io/campaign", "Values": ["yours"]}])
    assert others["CapacityReservations"] == [] and CLOCK.now() - before < timedelta(hours=1)


def test_a_bought_offering_cannot_be_bought_again_and_unknown_ids_are_not_found(ec2: Any) -> None:
    offering = offerings(ec2)[0]
    buy(ec2, offering)
    with pytest.raises(ClientError, match="InvalidCapacityBlockOfferingId.NotFound"):
        buy(ec2, offering)
    with pytest.raises(ClientError, match="InvalidCapacityReservationId.NotFound"):
        ec2.describe_capacity_reservations(CapacityReservationIds=["cr-00000000000000000"])


def test_a_bought_block_is_not_offered_again_and_of_two_buyers_at_once_one_gets_not_found(ec2: Any) -> None:
    first = offerings(ec2)[0]
    buy(ec2, first)
    again = offerings(ec2)  # the same search, after the purchase
    assert first["CapacityBlockOfferingId"] not in {o["CapacityBlockOfferingId"] for o in again}
    with pytest.raises(ClientError, match="InvalidCapacityBlockOfferingId.NotFound"):
        buy(ec2, first, campaign="c2")  # a buyer that searched before the purchase

    contested = again[0]
    with ThreadPoolExecutor(max_workers=4) as pool:
        answers = list(pool.map(lambda c: _try_buy(ec2, contested, c), ["a", "b", "c", "d"]))
    bought = [a for a in answers if a.startswith("cr-")]
    assert len(bought) == 1 and answers.count("InvalidCapacityBlockOfferingId.NotFound") == 3, answers


def _try_buy(ec2: Any, offering: dict[str, Any], campaign: str) -> str:
    try:
        return str(buy(ec2, offering, campaign)["CapacityReservationId"])
    except ClientError as exc:
        return str(exc.response["Error"]["Code"])


def test_faults_and_knobs(ec2: Any) -> None:
    ext.SETTINGS.inject("describe_capacity_block_offerings", "InsufficientInstanceCapacity")
    with pytest.raises(ClientError) as caught:
        offerings(ec2)
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
    ext.SETTINGS.regions_without_capacity.add(REGION)
    assert offerings(ec2) == []
    ext.SETTINGS.deny_purchase = True
    with pytest.raises(ClientError, match="UnauthorizedOperation"):
        ec2.purchase_capacity_block(CapacityBlockOfferingId="cbo-x", InstancePlatform="Linux/UNIX", DryRun=True)


def test_training_plans(sandbox: None) -> None:
    ext.reset()
    sagemaker = boto3.client("sagemaker", region_name=REGION, config=NO_RETRIES)
    now = datetime.now(UTC)
    [offering, *_] = sagemaker.search_training_plan_offerings(
        InstanceType="ml.p6-b300.48xlarge", InstanceCount=2, StartTimeAfter=now,
        EndTimeBefore=now + timedelta(days=5), DurationHours=48, TargetResources=["hyperpod-cluster"],
    )["TrainingPlanOfferings"]
    [segment] = offering["ReservedCapacityOfferings"]
    assert segment["StartTime"].astimezone(UTC).time().isoformat() == "11:30:00"
    arn = sagemaker.create_training_plan(
        TrainingPlanName="capserve-c1", TrainingPlanOfferingId=offering["TrainingPlanOfferingId"],
        Tags=[{"Key": "capserve.io/campaign", "Value": "c1"}],
    )["TrainingPlanArn"]
    assert sagemaker.describe_training_plan(TrainingPlanName="capserve-c1")["Status"] == "Scheduled"
    assert sagemaker.list_tags(ResourceArn=arn)["Tags"] == [{"Key": "capserve.io/campaign", "Value": "c1"}]
    with pytest.raises(ClientError, match="ResourceInUse"):
        sagemaker.create_training_plan(TrainingPlanName="capserve-c1", TrainingPlanOfferingId="tpo-x")
    with pytest.raises(ClientError, match="ResourceNotFound"):
        sagemaker.describe_training_plan(TrainingPlanName="nope")
    assert [p["TrainingPlanName"] for p in sagemaker.list_training_plans()["TrainingPlanSummaries"]] == ["capserve-c1"]
    ext.reset()


def test_the_demo_turns_auto_activate_on_through_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    ext.reset()
    monkeypatch.setenv(ext.AUTO_ACTIVATE_ENV, "1")
    ext.install()
    assert ext.SETTINGS.auto_activate
    ext.reset()
