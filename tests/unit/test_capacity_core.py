"""Pure capacity pieces: normalisers, request builders, states, adoption checks, approval, the acquire result."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from capserve.core.capacity.adoption import adoption_problems, lease_from_reservation
from capserve.core.capacity.approval import ApprovalRequest, needs_approval
from capserve.core.capacity.offers import offer_from_capacity_block, offers_from_training_plan
from capserve.core.capacity.ranking import rank_offers
from capserve.core.capacity.requests import (
    FEE_TAG,
    create_training_plan_request,
    purchase_capacity_block_request,
    region_from_arn,
    reservations_by_campaign_request,
    training_plan_name,
    training_plan_name_from_arn,
)
from capserve.core.capacity.result import AcquireResult
from capserve.core.capacity.states import (
    ReservationState,
    reservation_from_ec2,
    reservation_from_training_plan,
    state_from_training_plan,
)
from capserve.core.capacity.zones import Zone
from capserve.core.record import CampaignRecord, StageEntry, record_key
from capserve.core.spec import CapacitySpec
from capserve.core.stages import Stage, StageStatus
from capserve.core.tags import CAMPAIGN_TAG

START = datetime(2026, 12, 1, 11, 30, tzinfo=UTC)
CAPACITY = CapacitySpec(
    provider="ec2-capacity-block", instance_type="p6-b300.48xlarge", instance_count=1,
    regions=["us-east-2"], earliest_start=START - timedelta(days=1), latest_end=START + timedelta(days=14),
    duration_hours=24, max_upfront_fee_usd=4000, approval_threshold_usd=3500,
)
RAW_OFFER = {
    "CapacityBlockOfferingId": "cbo-0123456789abcdef0", "InstanceType": "p6-b300.48xlarge",
    "AvailabilityZone": "us-east-2a", "InstanceCount": 1, "StartDate": START,
    "EndDate": START + timedelta(hours=24), "CapacityBlockDurationHours": 24, "UpfrontFee": "2832.00",
    "CurrencyCode": "USD",
}


def test_capacity_block_offer_is_normalised() -> None:
    offer = offer_from_capacity_block("us-east-2", RAW_OFFER)
    assert (offer.upfront_fee, offer.duration_hours, offer.availability_zone) == (2832.0, 24.0, "us-east-2a")
    assert offer.fee_per_gpu_hour(8) == pytest.approx(2832 / 192)
    with pytest.raises(ValueError, match="not USD"):
        offer_from_capacity_block("us-east-2", {**RAW_OFFER, "CurrencyCode": "EUR"})


def test_training_plan_offer_drops_the_ml_prefix_and_skips_multi_segment_offers() -> None:
    segment = {"InstanceType": "ml.p6-b300.48xlarge", "InstanceCount": 2, "AvailabilityZone": "us-west-2a",
               "StartTime": START, "EndTime": START + timedelta(days=2)}
    raw = {"TrainingPlanOfferingId": "tpo-1", "UpfrontFee": "100.5", "CurrencyCode": "USD",
           "ReservedCapacityOfferings": [segment]}
    [offer] = offers_from_training_plan("us-west-2", raw)
    assert (offer.instance_type, offer.instance_count) == ("p6-b300.48xlarge", 2)
    assert offer.provider == "sagemaker-training-plan"
    assert offers_from_training_plan("us-west-2", {**raw, "ReservedCapacityOfferings": [segment, segment]}) == []


def test_purchase_is_tagged_with_the_campaign_and_fee() -> None:
    offer = offer_from_capacity_block("us-east-2", RAW_OFFER)
    request = purchase_capacity_block_request(offer, "k3-demo")
    [spec] = request["TagSpecifications"]
    tags = {t["Key"]: t["Value"] for t in spec["Tags"]}
    assert spec["ResourceType"] == "capacity-reservation"
    assert tags[CAMPAIGN_TAG] == "k3-demo" and tags[FEE_TAG] == "2832.00"
    assert "ClientToken" not in request  # PurchaseCapacityBlock has none: the tag is what dedupes
    assert reservations_by_campaign_request("k3-demo")["Filters"] == [
        {"Name": f"tag:{CAMPAIGN_TAG}", "Values": ["k3-demo"]}
    ]
    with pytest.raises(ValueError, match="not a training plan"):
        create_training_plan_request(offer, "k3-demo")


def test_training_plan_names_and_arns() -> None:
    assert training_plan_name("k3-demo") == "capserve-k3-demo"
    arn = "arn:aws:sagemaker:us-west-2:123456789012:training-plan/capserve-k3-demo"
    assert training_plan_name_from_arn(arn) == "capserve-k3-demo" and region_from_arn(arn) == "us-west-2"


def test_states_have_behaviour() -> None:
    assert ReservationState.ACTIVE.is_usable and not ReservationState.SCHEDULED.is_usable
    failed = ReservationState.PAYMENT_FAILED
    assert failed.is_terminal and "payment method" in failed.failure_hint()
    assert not ReservationState.PAYMENT_PENDING.is_terminal and ReservationState.SCHEDULED.is_confirmed
    assert state_from_training_plan("Pending") is ReservationState.PAYMENT_PENDING
    with pytest.raises(ValueError, match="unknown training plan status"):
        state_from_training_plan("Bogus")


def raw_reservation(**changes: object) -> dict[str, object]:
    base: dict[str, object] = {
        "CapacityReservationId": "cr-0123456789abcdef0", "AvailabilityZone": "us-east-2a", "State": "scheduled",
        "InstanceType": "p6-b300.48xlarge", "TotalInstanceCount": 1, "StartDate": START,
        "EndDate": START + timedelta(days=1),
        "Tags": [{"Key": CAMPAIGN_TAG, "Value": "k3-demo"}, {"Key": FEE_TAG, "Value": "2832.00"}],
    }
    base.update(changes)
    return base


def test_adoption_checks_say_what_to_change() -> None:
    now = START - timedelta(hours=2)
    ours = reservation_from_ec2("us-east-2", raw_reservation())
    assert ours.upfront_fee == 2832.0 and ours.campaign_id == "k3-demo"
    assert adoption_problems(ours, CAPACITY, now=now, campaign_id="k3-demo") == []
    bad = reservation_from_ec2("us-east-2", raw_reservation(State="payment-failed", InstanceType="p5.48xlarge"))
    problems = adoption_problems(bad, CAPACITY, now=now, campaign_id="other")
    assert len(problems) == 3
    assert any("capacity.instance_type" in p for p in problems)
    lease = lease_from_reservation(ours, provider="ec2-capacity-block", adopted=True)
    assert lease.upfront_fee == 2832.0 and lease.adopted


def test_training_plan_reservation() -> None:
    raw = {"TrainingPlanArn": "arn:aws:sagemaker:us-west-2:1:training-plan/capserve-x", "Status": "Scheduled",
           "StartTime": START, "EndTime": START + timedelta(days=1), "TotalInstanceCount": 2, "UpfrontFee": "99.00",
           "ReservedCapacitySummaries": [{"InstanceType": "ml.p6-b300.48xlarge", "AvailabilityZone": "us-west-2a"}]}
    plan = reservation_from_training_plan("us-west-2", raw, {CAMPAIGN_TAG: "x"})
    assert (plan.instance_type, plan.availability_zone, plan.upfront_fee) == ("p6-b300.48xlarge", "us-west-2a", 99.0)


def test_approval_threshold_and_form() -> None:
    offer = offer_from_capacity_block("us-east-2", RAW_OFFER)
    assert needs_approval(offer, 1000) and not needs_approval(offer, 2832)
    text = ApprovalRequest(campaign_id="k3-demo", offer=offer, approval_threshold_usd=1000, alternatives=3).markdown()
    assert "$2,832.00" in text and "cannot be cancelled" in text and offer.offering_id in text


def test_acquire_result_report_sections_match_the_lease_contract() -> None:
    offer = offer_from_capacity_block("us-east-2", RAW_OFFER)
    other = offer.model_copy(update={"offering_id": "cbo-2", "upfront_fee": 5000.0})
    zones = {"us-east-2": [Zone(name="us-east-2a", zone_id="use2-az1", zone_type="availability-zone"),
                           Zone(name="us-east-2b", zone_id="use2-az2", zone_type="availability-zone")]}
    ranking = rank_offers([offer, other], CAPACITY, regions=["us-east-2"], gpus_per_instance=8, zones=zones)
    lease = lease_from_reservation(
        reservation_from_ec2("us-east-2", raw_reservation()), provider="ec2-capacity-block", adopted=False
    )
    result = AcquireResult(campaign_id="k3-demo", outcome="bought", lease=lease, ranking=ranking,
                           state=ReservationState.ACTIVE)
    sections = result.report_sections()
    assert sections["lease"] == lease.report_section()
    considered = sections["offers_considered"]
    assert isinstance(considered, list) and [c["chosen"] for c in considered] == [True, False]
    assert considered[1]["reason"].startswith("over budget")
    text = result.markdown()
    assert "**chosen**" in text and "over budget" in text and lease.reservation_id in text
    stopped = AcquireResult(campaign_id="k3-demo", outcome="rejected", ranking=ranking, message="rejected")
    assert stopped.stopped and stopped.report_sections()["lease"] is None


def test_campaign_record_round_trips() -> None:
    lease = lease_from_reservation(
        reservation_from_ec2("us-east-2", raw_reservation()), provider="ec2-capacity-block", adopted=False
    )
    record = CampaignRecord.new("k3-demo", START).with_lease(lease, offering_id="cbo-1", now=START)
    record = record.with_stage(Stage.ACQUIRE, StageEntry(status=StageStatus.COMPLETED, ended_at=START, detail="bought"))
    assert CampaignRecord.model_validate_json(record.model_dump_json()) == record
    assert record_key("k3-demo") == "capserve/campaigns/k3-demo/record.json"
