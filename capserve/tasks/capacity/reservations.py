"""Reading reservations: ours by the campaign tag, anyone's by id, and waiting until one is usable."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from capserve.core.capacity.requests import (
    describe_training_plan_request,
    region_from_arn,
    reservation_by_id_request,
    reservations_by_campaign_request,
    training_plan_name,
    training_plan_name_from_arn,
)
from capserve.core.capacity.settings import CapacitySettings
from capserve.core.capacity.states import (
    Reservation,
    reservation_from_ec2,
    reservation_from_training_plan,
)
from capserve.core.errors import PermanentError, RetryableError
from capserve.core.spec import CapacitySpec
from capserve.tasks.aws import client
from capserve.tasks.capacity.errors import capacity_error, is_not_found
from capserve.tasks.resilience import NO_RETRIES, aws_task
from capserve.tasks.run_log import run_logger
from capserve.tasks.the_clock import clock
from capserve.tasks.waiting import wait_until


def capacity_reservations_by_tag(campaign_id: str, region: str) -> list[Reservation]:
    """Every capacity reservation in ``region`` tagged with the campaign, in any state."""
    ec2 = client("ec2", region)
    try:
        pages = ec2.get_paginator("describe_capacity_reservations").paginate(
            **reservations_by_campaign_request(campaign_id)
        )
        raw = [item for page in pages for item in page.get("CapacityReservations", [])]
    except Exception as exc:
        raise capacity_error(
            exc, f"looking up capacity reservations tagged {campaign_id} in {region}",
            iam_action="ec2:DescribeCapacityReservations",
        ) from exc
    return [reservation_from_ec2(region, item) for item in raw]


def capacity_reservation(region: str, reservation_id: str) -> Reservation | None:
    """One capacity reservation by id; None only for AWS's NotFound codes."""
    ec2 = client("ec2", region)
    try:
        page: dict[str, Any] = ec2.describe_capacity_reservations(**reservation_by_id_request(reservation_id))
    except Exception as exc:
        if is_not_found(exc, "ec2"):
            return None
        raise capacity_error(
            exc, f"describing capacity reservation {reservation_id} in {region}",
            iam_action="ec2:DescribeCapacityReservations",
        ) from exc
    items = page.get("CapacityReservations", [])
    return reservation_from_ec2(region, items[0]) if items else None


def training_plan(region: str, name: str) -> Reservation | None:
    """One training plan by name, with its tags; None only for ResourceNotFound."""
    sagemaker = client("sagemaker", region)
    try:
        raw: dict[str, Any] = sagemaker.describe_training_plan(**describe_training_plan_request(name))
        tags = sagemaker.list_tags(ResourceArn=raw["TrainingPlanArn"]).get("Tags", [])
    except Exception as exc:
        if is_not_found(exc, "sagemaker"):
            return None
        raise capacity_error(
            exc, f"describing training plan {name} in {region}",
            iam_action="sagemaker:DescribeTrainingPlan and sagemaker:ListTags",
        ) from exc
    return reservation_from_training_plan(region, raw, {t["Key"]: t.get("Value", "") for t in tags})


def describe(reservation: Reservation) -> Reservation:
    """The same reservation, as AWS reports it now."""
    if reservation.provider == "sagemaker-training-plan":
        fresh = training_plan(reservation.region, training_plan_name_from_arn(reservation.reservation_id))
    else:
        fresh = capacity_reservation(reservation.region, reservation.reservation_id)
    if fresh is None:
        raise PermanentError(
            f"{reservation.reservation_id} in {reservation.region} no longer exists: AWS returned NotFound"
        )
    return fresh


@aws_task(name="find-campaign-reservations")
def find_campaign_reservations(capacity: CapacitySpec, campaign_id: str) -> list[Reservation]:
    """What this campaign already owns, searched in every region of the spec concurrently."""
    if capacity.provider == "sagemaker-training-plan":
        name = training_plan_name(campaign_id)

        def lookup(region: str) -> list[Reservation]:
            plan = training_plan(region, name)
            return [plan] if plan is not None else []
    else:

        def lookup(region: str) -> list[Reservation]:
            return capacity_reservations_by_tag(campaign_id, region)

    with ThreadPoolExecutor(max_workers=min(len(capacity.regions), 8), thread_name_prefix="owned") as pool:
        return [r for found in pool.map(lookup, capacity.regions) for r in found]


@aws_task(name="describe-reservation")
def describe_reservation_by_id(reservation_id: str, default_region: str) -> Reservation | None:
    """A reservation named by id (cr-… in ``default_region``) or by training plan ARN (its own region)."""
    if reservation_id.startswith("arn:"):
        return training_plan(region_from_arn(reservation_id), training_plan_name_from_arn(reservation_id))
    return capacity_reservation(default_region, reservation_id)


@aws_task(name="wait-until-usable", policy=NO_RETRIES)  # a wait (docs/design.md §6)
def wait_until_usable(reservation: Reservation, settings: CapacitySettings) -> Reservation:
    """Follow AWS's states until ``active``; a far-off start returns the ``scheduled`` reservation instead.

    Two bounded waits: payment (``payment-pending`` → ``scheduled``) within ``payment_timeout_seconds``,
    then, if the start is near, until ``active`` by start + ``activation_grace_seconds``. Terminal
    states (payment-failed, failed, expired, cancelled…) stop at once with what to do. Production
    code never reads the sandbox clock: it only follows the state AWS reports.
    """

    seen = [reservation]  # the last answer, kept through a transient failure

    def check() -> Reservation:
        try:
            current = describe(reservation)
        except RetryableError as exc:  # asked again at the next poll, inside the same deadline
            run_logger(__name__).info("reservation %s: %s; asking again", reservation.reservation_id, exc)
            return seen[0]
        seen[0] = current
        if current.state.is_terminal:
            raise PermanentError(f"{current.reservation_id} is {current.state.value}: {current.state.failure_hint()}")
        return current

    def seconds_to_start(current: Reservation) -> float:
        return (current.start - clock().now()).total_seconds()

    def still(wanted: str) -> Callable[[Reservation], str]:
        return lambda r: f"{r.reservation_id} is still {r.state.value} (starts {r.start.isoformat()}), wanted {wanted}"

    def wait(wanted: str, done: Callable[[Reservation], bool], deadline: float, hint: bool = False) -> Reservation:
        return wait_until(
            check,
            done=done,
            describe=still(wanted),
            what=f"reservation {reservation.reservation_id}",
            timeout_s=deadline,
            initial_s=settings.poll_initial_seconds,
            max_s=settings.poll_max_seconds,
            jitter=settings.poll_jitter,
            next_wait=seconds_to_start if hint else lambda _: None,
        )

    paid = wait("scheduled or active (payment confirmed)", lambda r: r.state.is_confirmed,
                settings.payment_timeout_seconds)
    if paid.state.is_usable or seconds_to_start(paid) > settings.max_activation_wait_seconds:
        return paid
    deadline = max(seconds_to_start(paid), 0.0) + settings.activation_grace_seconds
    return wait("active", lambda r: r.state.is_usable, deadline, hint=True)
