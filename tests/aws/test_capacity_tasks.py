"""Capacity tasks against the sandbox: every request here is parsed by botocore's model on the client and by moto.

Retries: throttling and 5xx are retried by botocore's standard mode (jittered); validation, permission and
no-capacity answers are not retried and say what to change; a purchase is sent exactly once.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from capserve_sandbox.aws_ext import capacity as ext
from capserve_sandbox.clock import CLOCK

from capserve.core.capacity.ranking import rank_offers
from capserve.core.capacity.settings import CapacitySettings
from capserve.core.capacity.states import ReservationState
from capserve.core.errors import PermanentError, RetryableError, WaitTimeoutError
from capserve.core.spec import CapacitySpec
from capserve.tasks.capacity.purchase import PurchaseOutcomeUnknownError, preflight_purchase, purchase
from capserve.tasks.capacity.reservations import (
    describe_reservation_by_id,
    find_campaign_reservations,
    wait_until_usable,
)
from capserve.tasks.capacity.search import search_offers, search_zones

REGIONS = ["us-east-2", "us-west-2"]
FAST = CapacitySettings(poll_initial_seconds=0.01, poll_max_seconds=0.05, payment_timeout_seconds=5,
                        activation_grace_seconds=0, max_activation_wait_seconds=14 * 86_400)



@pytest.fixture(autouse=True)
def clean(sandbox: None) -> Iterator[None]:
    ext.reset()
    CLOCK.reset()
    yield
    ext.reset()
    CLOCK.reset()


def capacity(provider: str = "ec2-capacity-block", **changes: object) -> CapacitySpec:
    now = datetime.now(UTC)
    base: dict[str, object] = dict(
        provider=provider, instance_type="p6-b300.48xlarge", instance_count=1, regions=REGIONS,
        earliest_start=now, latest_end=now + timedelta(days=14), duration_hours=24, max_upfront_fee_usd=4000,
    )
    base.update(changes)
    return CapacitySpec.model_validate(base)


def test_search_covers_every_region_and_page() -> None:
    offers = search_offers.fn(capacity())
    assert {o.region for o in offers} == set(REGIONS)
    assert {c.region for c in ext.calls("describe_capacity_block_offerings")} == set(REGIONS)
    assert all(o.provider == "ec2-capacity-block" and o.start.tzinfo for o in offers)


def test_the_local_zone_offering_is_never_chosen() -> None:
    # The sandbox, like AWS for an opted-in account, offers a block in us-west-2-lax-1a (ZoneType
    # local-zone), priced under us-west-2's AZs: ranked on price alone, it would be bought.
    spec = capacity(regions=["us-west-2"], policy="cheapest-per-gpu-hour")
    offers = search_offers.fn(spec)
    local = [o for o in offers if o.zone_type == "local-zone"]
    assert [o.availability_zone for o in local] == ["us-west-2-lax-1a"]
    assert min(offers, key=lambda o: o.upfront_fee) == local[0]
    ranking = rank_offers(offers, spec, regions=spec.regions, gpus_per_instance=8, zones=search_zones.fn(spec))
    assert ranking.chosen is not None and ranking.chosen.zone_type == "availability-zone"
    [dropped] = [c for c in ranking.considered if c.offer == local[0]]
    assert dropped.rank is None and dropped.reason.startswith("not an Availability Zone")


def test_zones_carry_the_ids_eks_rules_are_written_in() -> None:
    zones = search_zones.fn(capacity(regions=["us-east-2"]))
    assert {(z.name, z.zone_id) for z in zones["us-east-2"]} >= {("us-east-2a", "use2-az1"), ("us-east-2b", "use2-az2")}


def test_throttling_and_5xx_are_retried() -> None:
    ext.SETTINGS.inject("describe_capacity_block_offerings", "RequestLimitExceeded")
    ext.SETTINGS.inject("describe_capacity_block_offerings", "InternalError")
    offers = search_offers.fn(capacity(regions=["us-east-2"]))
    assert offers
    assert len(ext.calls("describe_capacity_block_offerings")) == 3


def test_validation_is_not_retried_and_says_what_to_change() -> None:
    with pytest.raises(PermanentError, match="capacity.instance_type") as caught:
        # The spec refuses an unknown type itself; built unvalidated here to see what EC2's refusal becomes.
        search_offers.fn(capacity(regions=["us-east-2"]).model_copy(update={"instance_type": "zz9.mega"}))
    assert "InvalidParameterValue" in str(caught.value)
    assert len(ext.calls("describe_capacity_block_offerings")) == 1


def test_insufficient_capacity_on_purchase_is_permanent_and_sent_once() -> None:
    offer = search_offers.fn(capacity(regions=["us-east-2"]))[0]
    ext.SETTINGS.inject("purchase_capacity_block", "InsufficientInstanceCapacity")
    with pytest.raises(PermanentError, match="widen capacity.earliest_start"):
        purchase.fn(offer, "c-nocap")
    assert len(ext.calls("purchase_capacity_block")) == 1


def test_a_5xx_purchase_is_never_retried_blindly() -> None:
    offer = search_offers.fn(capacity(regions=["us-east-2"]))[0]
    ext.SETTINGS.inject("purchase_capacity_block", "InternalError")
    with pytest.raises(PurchaseOutcomeUnknownError, match="looks for a reservation tagged"):
        purchase.fn(offer, "c-5xx")
    assert len(ext.calls("purchase_capacity_block")) == 1


def test_dry_run_preflight() -> None:
    offer = search_offers.fn(capacity(regions=["us-east-2"]))[0]
    preflight_purchase.fn(offer, "c-dry")
    assert ext.calls("purchase_capacity_block") == []
    assert len(ext.calls("purchase_capacity_block", include_dry_run=True)) == 1
    ext.SETTINGS.deny_purchase = True
    with pytest.raises(PermanentError, match="grant the caller's IAM role ec2:PurchaseCapacityBlock"):
        preflight_purchase.fn(offer, "c-dry")


def test_purchase_then_find_by_tag_then_wait_until_active() -> None:
    spec = capacity()
    offer = search_offers.fn(spec)[0]
    ext.SETTINGS.payment_pending_describes = 2
    bought = purchase.fn(offer, "c-buy")
    assert bought.state is ReservationState.PAYMENT_PENDING and bought.campaign_id == "c-buy"
    [found] = find_campaign_reservations.fn(spec, "c-buy")
    assert found.reservation_id == bought.reservation_id and found.upfront_fee == offer.upfront_fee
    assert find_campaign_reservations.fn(spec, "someone-else") == []
    ext.SETTINGS.auto_activate = True
    ready = wait_until_usable.fn(bought, FAST)
    assert ready.state is ReservationState.ACTIVE
    assert describe_reservation_by_id.fn(bought.reservation_id, offer.region) is not None
    assert describe_reservation_by_id.fn("cr-00000000000000000", offer.region) is None


def test_far_off_start_returns_scheduled_and_failures_stop_the_wait() -> None:
    offer = search_offers.fn(capacity(regions=["us-east-2"]))[0]
    bought = purchase.fn(offer, "c-wait")
    scheduled = wait_until_usable.fn(bought, FAST.model_copy(update={"max_activation_wait_seconds": 0}))
    assert scheduled.state is ReservationState.SCHEDULED
    ext.SETTINGS.payment_pending_describes = 1000
    pending = purchase.fn(search_offers.fn(capacity(regions=["us-east-2"]))[0], "c-wait-2")
    with pytest.raises(WaitTimeoutError, match="still payment-pending") as caught:
        wait_until_usable.fn(pending, FAST.model_copy(update={"payment_timeout_seconds": 0.05}))
    assert not isinstance(caught.value, RetryableError)  # a retry would wait longer than asked
    ext.SETTINGS.fail_payment = True
    with pytest.raises(PermanentError, match="payment-failed: AWS could not charge"):
        wait_until_usable.fn(pending, FAST)
    # Only a pending payment fails (docs/aws-capacity.md §1.3): the block seen scheduled was paid and stays so.
    paid = describe_reservation_by_id.fn(bought.reservation_id, bought.region)
    assert paid is not None and paid.state is ReservationState.SCHEDULED


def test_training_plan_purchase_is_named_by_campaign_and_a_second_create_adopts_ours() -> None:
    spec = capacity("sagemaker-training-plan")
    offers = search_offers.fn(spec)
    assert offers and all(o.provider == "sagemaker-training-plan" for o in offers)
    first = purchase.fn(offers[0], "c-plan")
    assert first.reservation_id.endswith(":training-plan/capserve-c-plan")
    again = purchase.fn(offers[1], "c-plan")  # AWS refuses the name: already bought, and it is ours
    assert again.reservation_id == first.reservation_id
    assert len(ext.calls("create_training_plan")) == 2
    [found] = [r for r in find_campaign_reservations.fn(spec, "c-plan")]
    assert found.campaign_id == "c-plan"
    ready = wait_until_usable.fn(first, FAST.model_copy(update={"max_activation_wait_seconds": 0}))
    assert ready.state is ReservationState.SCHEDULED
