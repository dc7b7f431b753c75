"""The prepare run's judge of a recorded lease against AWS's reservation (capserve.core.capacity.lease_check)."""

from __future__ import annotations

from datetime import UTC, datetime

from capserve.core.capacity.lease_check import lease_problems
from capserve.core.capacity.states import Reservation, ReservationState
from capserve.core.lease import Lease
from capserve.core.tags import CAMPAIGN_TAG

NOW = datetime(2027, 1, 10, 9, 0, tzinfo=UTC)
START, END = datetime(2027, 1, 10, 11, 30, tzinfo=UTC), datetime(2027, 1, 11, 11, 30, tzinfo=UTC)
LEASE = Lease(provider="ec2-capacity-block", region="us-east-2", availability_zone="us-east-2a",
              reservation_id="cr-0abc", start=START, end=END, instance_type="p6-b300.48xlarge", instance_count=2,
              upfront_fee=1.0)


def aws(**changes: object) -> Reservation:
    base: dict[str, object] = dict(
        provider="ec2-capacity-block", region="us-east-2", reservation_id="cr-0abc", availability_zone="us-east-2a",
        state=ReservationState.SCHEDULED, instance_type="p6-b300.48xlarge", instance_count=2, start=START, end=END,
        tags={CAMPAIGN_TAG: "c1"},
    )
    base.update(changes)
    return Reservation.model_validate(base)


def test_the_reservation_bought_for_the_campaign_as_recorded_passes() -> None:
    assert lease_problems(LEASE, aws(), campaign_id="c1", now=NOW) == []
    assert lease_problems(LEASE, aws(state=ReservationState.ACTIVE), campaign_id="c1", now=NOW) == []


def test_every_mismatch_is_named() -> None:
    found = aws(availability_zone="us-east-2b", instance_type="p5.48xlarge", instance_count=1,
                state=ReservationState.CANCELLED, tags={CAMPAIGN_TAG: "other"})
    problems = lease_problems(LEASE, found, campaign_id="c1", now=NOW)
    assert problems == [
        "reservation cr-0abc is tagged for campaign 'other', not 'c1'",
        "reservation cr-0abc is cancelled, not scheduled or active: the reservation was cancelled: buy a new one",
        "reservation cr-0abc is in us-east-2b, the record says us-east-2a",
        "reservation cr-0abc reserves p5.48xlarge, the record says p6-b300.48xlarge",
        "reservation cr-0abc reserves 1 instance(s), the record says 2",
    ]


def test_a_missing_reservation_and_a_missing_tag() -> None:
    assert lease_problems(LEASE, None, campaign_id="c1", now=NOW) == [
        "reservation cr-0abc does not exist in us-east-2 (AWS answered NotFound)"
    ]
    [untagged] = lease_problems(LEASE, aws(tags={}), campaign_id="c1", now=NOW)
    assert "carries no 'c1' campaign tag" in untagged
    # A reservation the spec named (not bought by capserve) carries no campaign tag.
    adopted = LEASE.model_copy(update={"provider": "existing-reservation"})
    assert lease_problems(adopted, aws(tags={}), campaign_id="c1", now=NOW) == []


def test_payment_pending_is_a_problem_only_where_nothing_waits_for_it() -> None:
    pending = aws(state=ReservationState.PAYMENT_PENDING)
    [problem] = lease_problems(LEASE, pending, campaign_id="c1", now=NOW)
    assert "is payment-pending, not scheduled or active" in problem
    assert lease_problems(LEASE, pending, campaign_id="c1", now=NOW, pending_ok=True) == []


def test_a_training_plan_in_the_recorded_zone_passes() -> None:
    plan = aws(provider="sagemaker-training-plan", availability_zone="us-east-2a,us-east-2b")
    assert lease_problems(LEASE, plan, campaign_id="c1", now=NOW) == []
