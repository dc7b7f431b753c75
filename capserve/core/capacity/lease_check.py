"""Is the recorded lease still the reservation AWS holds? Judged before the prepare run builds anything.

The prepare run starts ``cluster_lead`` before the block and builds VPC, NAT gateway, IAM roles and the EKS
control plane, which bill until the teardown at the block's end. Between the purchase and that run the
reservation can stop being usable: the upfront payment failed (``payment-failed``), AWS cancelled or failed it,
or the record names a reservation this account does not have. Only ``scheduled`` and ``active`` are
reservations AWS will deliver (EC2 API reference, CapacityReservation.State; SageMaker DescribeTrainingPlan
Status: docs/aws-capacity.md §1.3), and the capacity is in one Availability Zone with one instance type and
count, which the cluster's private subnet and node group are built for (docs/preflight.md §5).

Pure: the reservation as AWS describes it (or None: NotFound) in, a list of problems out.
"""

from __future__ import annotations

from datetime import datetime

from capserve.core.capacity.states import Reservation, ReservationState
from capserve.core.lease import Lease

# The states in which AWS will deliver (or is delivering) the capacity.
DELIVERABLE = frozenset({ReservationState.SCHEDULED, ReservationState.ACTIVE})


def lease_problems(
    lease: Lease, found: Reservation | None, *, campaign_id: str, now: datetime, pending_ok: bool = False
) -> list[str]:
    """Why ``found`` (AWS's answer for ``lease.reservation_id``) cannot carry the lease; empty when it can.

    ``pending_ok``: ``payment-pending`` is no problem (the serve run waits for the payment, boundedly); the
    prepare run, which builds what bills, wants the payment confirmed first."""
    rid, region = lease.reservation_id, lease.region
    if found is None:
        return [f"reservation {rid} does not exist in {region} (AWS answered NotFound)"]
    problems: list[str] = []
    tagged = found.campaign_id
    if tagged is not None and tagged != campaign_id:
        problems.append(f"reservation {rid} is tagged for campaign {tagged!r}, not {campaign_id!r}")
    elif tagged is None and lease.provider != "existing-reservation":
        # A reservation capserve bought carries the campaign tag from its purchase request.
        problems.append(f"reservation {rid} carries no {campaign_id!r} campaign tag: it is not the one bought")
    if found.state not in DELIVERABLE and not (pending_ok and found.state is ReservationState.PAYMENT_PENDING):
        hint = found.state.failure_hint() or "AWS has not confirmed it; wait until it is scheduled"
        problems.append(f"reservation {rid} is {found.state.value}, not scheduled or active: {hint}")
    elif found.end <= now:
        problems.append(f"reservation {rid} ended at {found.end.isoformat()}")
    zones = found.availability_zone.split(",")
    if lease.availability_zone not in zones:
        problems.append(
            f"reservation {rid} is in {found.availability_zone}, the record says {lease.availability_zone}"
        )
    types = found.instance_type.split(",")
    if lease.instance_type not in types:
        problems.append(f"reservation {rid} reserves {found.instance_type}, the record says {lease.instance_type}")
    if found.instance_count < lease.instance_count:
        problems.append(
            f"reservation {rid} reserves {found.instance_count} instance(s), the record says {lease.instance_count}"
        )
    return problems
