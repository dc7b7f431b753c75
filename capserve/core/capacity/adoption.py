"""Is an existing reservation good enough to adopt instead of buying? And the lease it becomes."""

from __future__ import annotations

from datetime import datetime

from capserve.core.capacity.states import Reservation
from capserve.core.lease import Lease
from capserve.core.spec import CapacitySpec, Provider


def adoption_problems(
    reservation: Reservation, capacity: CapacitySpec, *, now: datetime, campaign_id: str | None = None
) -> list[str]:
    """Everything that rules the reservation out, each saying what to change; empty means adoptable.

    For reservations found by the campaign tag (``campaign_id`` given) the window is not re-checked
    against the spec: the reservation is already paid for and relative windows ("now+14d") move on
    every run. A reservation named in the spec must fit the spec's window when the spec gives one.
    """
    problems: list[str] = []
    rid = reservation.reservation_id
    if campaign_id is not None and reservation.campaign_id != campaign_id:
        problems.append(f"{rid} is tagged for campaign {reservation.campaign_id!r}, not {campaign_id!r}")
    if reservation.state.is_terminal:
        problems.append(f"{rid} is {reservation.state.value}: {reservation.state.failure_hint()}")
    if reservation.end <= now:
        problems.append(f"{rid} ended at {reservation.end.isoformat()}: buy a new reservation")
    if reservation.instance_type != capacity.instance_type:
        problems.append(
            f"{rid} reserves {reservation.instance_type}, the spec asks for {capacity.instance_type}: "
            "fix capacity.instance_type or the reservation id"
        )
    if reservation.instance_count < capacity.instance_count:
        problems.append(
            f"{rid} reserves {reservation.instance_count} instance(s), the spec needs {capacity.instance_count}: "
            "lower capacity.instance_count or use a larger reservation"
        )
    if campaign_id is None:
        if capacity.earliest_start is not None and reservation.end <= capacity.earliest_start:
            problems.append(f"{rid} ends before capacity.earliest_start")
        if capacity.latest_end is not None and reservation.start >= capacity.latest_end:
            problems.append(f"{rid} starts after capacity.latest_end")
    return problems


def lease_from_reservation(
    reservation: Reservation, *, provider: Provider, adopted: bool, fee: float | None = None
) -> Lease:
    """The lease later stages plan around. ``fee`` overrides what the reservation reports (e.g. the offer's fee)."""
    paid = fee if fee is not None else (reservation.upfront_fee or 0.0)
    return Lease(
        provider=provider,
        region=reservation.region,
        availability_zone=reservation.availability_zone,
        reservation_id=reservation.reservation_id,
        start=reservation.start,
        end=reservation.end,
        instance_type=reservation.instance_type,
        instance_count=reservation.instance_count,
        upfront_fee=paid,
        adopted=adopted,
    )
