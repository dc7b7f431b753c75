"""The prepare run asks AWS for the reservation before it builds anything: a reservation AWS does not have, one
whose payment failed, or one in another zone than recorded ends the run Failed with no VPC, IAM role or EKS
cluster made (capserve.core.capacity.lease_check)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import boto3
import pytest
from capserve_sandbox.aws_ext import capacity as ext
from capserve_sandbox.clock import CLOCK
from prefect.client.schemas.objects import StateType

from capserve.core.capacity.adoption import lease_from_reservation
from capserve.core.lease import Lease
from capserve.core.record import CampaignRecord, record_key
from capserve.core.spec import CapacitySpec
from capserve.core.tags import CAMPAIGN_TAG
from capserve.flows.window import prepare_cluster_before_block
from capserve.tasks.capacity.purchase import purchase
from capserve.tasks.capacity.search import search_offers
from tests.aws.test_orphan_teardown import BUCKET, REGION, records, spec

__all__ = ["records"]  # the fixture, used by name


@pytest.fixture
def clean(records: None) -> Iterator[None]:
    ext.reset()
    CLOCK.reset()
    yield
    ext.reset()
    CLOCK.reset()


def _store(campaign: str, lease: Lease) -> None:
    now = datetime.now(UTC)
    record = CampaignRecord.new(campaign, now).with_spec(spec(campaign), now=now).with_lease(
        lease, offering_id=None, now=now
    )
    boto3.client("s3", region_name=REGION).put_object(
        Bucket=BUCKET, Key=record_key(campaign), Body=record.model_dump_json().encode()
    )


def _bought(campaign: str) -> Lease:
    """A block bought for ``campaign`` in the sandbox, starting in the future, as the record holds it."""
    now = datetime.now(UTC)
    wanted = CapacitySpec.model_validate(dict(
        provider="ec2-capacity-block", instance_type="p6-b300.48xlarge", instance_count=1, regions=[REGION],
        earliest_start=now + timedelta(hours=12), latest_end=now + timedelta(days=14), duration_hours=24,
        max_upfront_fee_usd=4000,
    ))
    reservation = purchase.fn(search_offers.fn(wanted)[0], campaign)
    return lease_from_reservation(reservation, provider="ec2-capacity-block", adopted=False)


def _nothing_built(campaign: str) -> None:
    ec2 = boto3.client("ec2", region_name=REGION)
    tagged = [{"Name": f"tag:{CAMPAIGN_TAG}", "Values": [campaign]}]
    assert ec2.describe_vpcs(Filters=tagged)["Vpcs"] == []
    assert ec2.describe_nat_gateways(Filters=tagged)["NatGateways"] == []
    roles = boto3.client("iam", region_name=REGION).list_roles()["Roles"]
    assert [r["RoleName"] for r in roles if campaign in r["RoleName"]] == []
    assert boto3.client("eks", region_name=REGION).list_clusters()["clusters"] == []


def test_a_reservation_aws_does_not_have_builds_nothing(clean: None) -> None:
    now = datetime.now(UTC)
    gone = Lease(
        provider="ec2-capacity-block", region=REGION, availability_zone="us-east-2a",
        reservation_id="cr-0000000000000dead", start=now + timedelta(hours=2), end=now + timedelta(hours=26),
        instance_type="p6-b300.48xlarge", instance_count=1, upfront_fee=1.0,
    )
    _store("no-such-block", gone)
    state = prepare_cluster_before_block("no-such-block", REGION, gone.reservation_id, return_state=True)
    assert (state.type, state.name) == (StateType.FAILED, "ReservationUnusable"), state
    assert "cr-0000000000000dead does not exist in us-east-2" in (state.message or "")
    assert "nothing was built" in (state.message or "")
    _nothing_built("no-such-block")


def test_a_block_whose_payment_failed_builds_nothing(clean: None) -> None:
    lease = _bought("payment-failed")
    ext.SETTINGS.fail_payment = True  # AWS could not charge the fee: the block was released
    _store("payment-failed", lease)
    state = prepare_cluster_before_block("payment-failed", REGION, lease.reservation_id, return_state=True)
    assert (state.type, state.name) == (StateType.FAILED, "ReservationUnusable"), state
    assert "is payment-failed, not scheduled or active" in (state.message or "")
    _nothing_built("payment-failed")


def test_a_block_in_another_zone_than_recorded_builds_nothing(clean: None) -> None:
    lease = _bought("wrong-zone")
    elsewhere = "us-east-2b" if lease.availability_zone != "us-east-2b" else "us-east-2a"
    _store("wrong-zone", lease.model_copy(update={"availability_zone": elsewhere}))
    state = prepare_cluster_before_block("wrong-zone", REGION, lease.reservation_id, return_state=True)
    assert (state.type, state.name) == (StateType.FAILED, "ReservationUnusable"), state
    assert f"is in {lease.availability_zone}, the record says {elsewhere}" in (state.message or "")
    _nothing_built("wrong-zone")
