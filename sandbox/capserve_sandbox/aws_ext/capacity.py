"""EC2 Capacity Blocks and SageMaker training plans for the sandbox's moto (5.2.5 implements neither).

Shaped by botocore's service model: moto serialises an ``ActionResult(dict)`` with the operation's own
output shape (XML for EC2, JSON for SageMaker) and parses requests with its input shape, so a request
botocore would refuse never reaches here and a response field AWS does not have is never sent.

Behaviour, as AWS documents it (EC2 user guide, capacity-blocks*.html; SageMaker API reference):
- offerings start and end at 11:30 UTC, whole days, at most 6 per search, one zone each, upfront fee;
  each says its ``ZoneType``, and a region in ``SETTINGS.local_zones`` also offers one block in that
  Local Zone (``ZoneType: local-zone``), as AWS does for Local Zones the account opted into;
- a purchase needs no token and can buy the same thing twice (it is our job not to); DryRun answers
  ``DryRunOperation`` or ``UnauthorizedOperation``; the reservation carries the purchase's tags;
- reservations go ``payment-pending`` → ``scheduled`` → ``active`` → ``expired`` on
  ``capserve_sandbox.clock.CLOCK``, or ``payment-pending`` → ``payment-failed`` (only a payment still pending can
  fail: a block seen scheduled has been paid); training plans go Pending → Scheduled → Active → Expired, or
  Pending → Failed; an id the account does not hold answers ``InvalidCapacityReservationId.NotFound``;
- at end − 30 min EC2 terminates the instances still running in the block (docs/aws-capacity.md §1.4):
  every hook in ``TERMINATION_HOOKS`` is called with the reservation (the fake Kubernetes then loses the
  nodes of that instance type and their pods) and what it terminated is kept in ``TERMINATIONS``;
- EC2 tells EventBridge (the default bus of the block's region) "Capacity Block Delivered" at the start
  and "Capacity Block Expiration Warning" at end − 40 min, once each (docs/events.md §2): here through
  moto's own ``put_events``, so the rules and SQS targets capserve creates are what routes them. The
  sandbox notices time passing on every describe of reservations, or when ``deliver_due_events()`` is
  called (a clock that jumps past both sends both, in order).

Knobs for tests and the demo live in ``SETTINGS`` (see ``CapacitySandboxSettings``); every call is
recorded in ``CALLS`` so tests can count purchases. ``reset()`` clears state, calls and knobs.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime, timedelta
from typing import Any

from moto.core.exceptions import ServiceException
from moto.core.responses import ActionResult
from moto.ec2.exceptions import EC2ClientError
from moto.ec2.responses import EC2Response
from moto.events.models import events_backends
from moto.sagemaker.exceptions import (
    ResourceInUseException,
    ResourceNotFound,
    SagemakerClientError,
    ValidationError,
)
from moto.sagemaker.responses import SageMakerResponse

from capserve_sandbox.clock import CLOCK
from capserve_sandbox.gates import GATES

# Illustrative on-demand-like hourly block prices per instance (third-party, volatile: only the API's
# UpfrontFee is truth, docs/aws-capacity.md §1.6). Chosen so the K3 demo's 24 h block (~$2.8–3.0k) sits
# under its budget.
HOURLY_PRICE_USD = {
    "p5.48xlarge": 31.464,
    "p5e.48xlarge": 34.608,
    "p5en.48xlarge": 36.184,
    "p6-b200.48xlarge": 44.90,
    "p6-b300.48xlarge": 118.00,
}
# Small, deterministic price differences between regions and AZs so ranking has something to decide.
REGION_FACTOR = {"us-east-1": 1.00, "us-east-2": 1.00, "us-west-2": 1.04}
AZ_FACTOR = {"a": 1.000, "b": 1.015, "c": 1.030}
# A Local Zone's block, as made up as the rest, priced under its region's AZs: a ranking that ignored
# ZoneType would buy it there (tests/aws/test_capacity_tasks.py checks that capserve's does not).
LOCAL_ZONE_FACTOR = 0.97

BLOCK_HOUR, BLOCK_MINUTE = 11, 30  # every Capacity Block starts and ends at 11:30 UTC
MAX_OFFERINGS = 6  # DescribeCapacityBlockOfferings returns at most 6 (docs/aws-capacity.md §1.1)
MAX_AHEAD = timedelta(weeks=8)  # blocks can be reserved up to 8 weeks ahead
WARNING_BEFORE_END = timedelta(minutes=40)  # the Expiration Warning (docs/aws-capacity.md §1.4)
TERMINATION_BEFORE_END = timedelta(minutes=30)  # EC2 terminates what still runs (docs/aws-capacity.md §1.4)


@dataclass
class CapacitySandboxSettings:
    """Knobs. ``auto_activate``: the first describe of a scheduled reservation moves CLOCK to its start,
    so it turns active without anyone waiting (the demo turns this on)."""

    auto_activate: bool = False
    payment_pending_describes: int = 0  # describes that still answer payment-pending after a purchase
    fail_payment: bool = False  # payments still pending fail: payment-failed instead of scheduled (paid ones stay)
    deny_purchase: bool = False  # purchases (and their DryRun) answer UnauthorizedOperation
    regions_without_capacity: set[str] = field(default_factory=set)
    azs: tuple[str, ...] = ("a", "b")
    # Region → a Local Zone the account has opted into. DescribeCapacityBlockOfferings returns offerings
    # there too, with ZoneType "local-zone" (botocore ec2 model: CapacityBlockOffering.ZoneType, and
    # AllAvailabilityZones: "… and Local Zones you are opted into"): one, on the first start day.
    local_zones: dict[str, str] = field(default_factory=lambda: {"us-west-2": "us-west-2-lax-1a"})
    # operation name → error codes to answer on the next calls, one per call (fault injection).
    faults: dict[str, list[str]] = field(default_factory=dict)
    # Run right after a purchase has been recorded and before its response is sent.
    on_purchase: Callable[[str], None] | None = None

    def inject(self, operation: str, code: str, times: int = 1) -> None:
        self.faults.setdefault(operation, []).extend([code] * times)


@dataclass(frozen=True)
class Call:
    service: str
    operation: str
    region: str
    params: dict[str, Any]

    @property
    def dry_run(self) -> bool:
        return bool(self.params.get("DryRun"))


@dataclass(frozen=True)
class Termination:
    """What EC2's end − 30 min termination of a block found still running."""

    reservation_id: str
    at: datetime
    terminated: tuple[str, ...]


SETTINGS = CapacitySandboxSettings()
CALLS: list[Call] = []
TERMINATION_HOOKS: list[Callable[[dict[str, Any]], list[str]]] = []
TERMINATIONS: list[Termination] = []
_LOCK = threading.RLock()
# (account, region) → id → object. Module-level (not on moto's backends) so reset() reaches everything.
_OFFERINGS: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
_RESERVATIONS: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
_PLAN_OFFERINGS: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
_PLANS: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
# (account, region) → offering ids bought: the ids are derived from the block's zone, type and times, so a later
# search would list a bought block again (and a second buyer could buy it) unless they are remembered.
_SOLD: dict[tuple[str, str], set[str]] = {}

# Error codes and the HTTP status AWS answers them with (EC2 API reference, "Error codes": server errors
# include InsufficientInstanceCapacity and InternalError; RequestLimitExceeded is a 503).
_STATUS = {
    "RequestLimitExceeded": 503,
    "InternalError": 500,
    "Unavailable": 503,
    "InsufficientInstanceCapacity": 500,
    "InsufficientCapacity": 500,
    "ThrottlingException": 400,
    "InternalFailure": 500,
}


def calls(operation: str | None = None, *, include_dry_run: bool = False) -> list[Call]:
    """Recorded calls (optionally of one operation), DryRun calls left out unless asked for."""
    with _LOCK:
        return [
            c
            for c in CALLS
            if (operation is None or c.operation == operation) and (include_dry_run or not c.dry_run)
        ]


def reset() -> None:
    """Forget every offering, reservation, plan, recorded call and knob (SETTINGS is reset in place)."""
    with _LOCK:
        for table in (_OFFERINGS, _RESERVATIONS, _PLAN_OFFERINGS, _PLANS, _SOLD):
            table.clear()
        CALLS.clear()
        TERMINATIONS.clear()
        defaults = CapacitySandboxSettings()
        for knob in fields(CapacitySandboxSettings):
            setattr(SETTINGS, knob.name, getattr(defaults, knob.name))


def _utc(value: Any) -> datetime | None:
    """moto's request parsing yields naive datetimes (or ISO strings / epoch numbers); make them aware UTC."""
    if value is None or value == "":
        return None
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value, UTC)
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if not isinstance(value, datetime):
        raise EC2ClientError("InvalidParameterValue", f"not a timestamp: {value!r}")
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _block_starts(lower: datetime, upper: datetime, hours: int) -> list[datetime]:
    """Every 11:30 UTC start at or after ``lower`` whose block ends by ``upper``."""
    start = lower.astimezone(UTC).replace(hour=BLOCK_HOUR, minute=BLOCK_MINUTE, second=0, microsecond=0)
    if start < lower:
        start += timedelta(days=1)
    starts: list[datetime] = []
    while start + timedelta(hours=hours) <= upper and len(starts) < MAX_OFFERINGS:
        starts.append(start)
        start += timedelta(days=1)
    return starts


def _fee(instance_type: str, region: str, zone_factor: float, count: int, hours: int) -> float:
    hourly = HOURLY_PRICE_USD[instance_type] * REGION_FACTOR.get(region, 1.02) * zone_factor
    return round(hourly * count * hours, 2)


def _valid_duration(hours: int) -> bool:
    days, rest = divmod(hours, 24)
    return rest == 0 and 1 <= days <= 182 and (days <= 14 or days % 7 == 0)


def _server_error(resp: Any, exc: Exception, status: int) -> tuple[str, dict[str, Any]]:
    """Serialise ``exc`` as the service's error envelope, with a 5xx status moto would not choose itself."""
    _, headers, body = resp.serialized(ActionResult(exc))
    headers["status"] = status
    return body, headers


def _injected(service: str, code: str, operation: str) -> ServiceException:
    error = EC2ClientError if service == "ec2" else SagemakerClientError
    return error(code, f"sandbox fault injected into {operation}")


def _operation(service: str) -> Callable[[Callable[[Any], Any]], Callable[[Any], Any]]:
    """Record each call, answer an injected fault if one is queued, else run the operation."""

    def wrap(body: Callable[[Any], Any]) -> Callable[[Any], Any]:
        name = body.__name__

        def handler(self: Any) -> Any:
            params = dict(getattr(self, "params", {}) or {})
            with _LOCK:
                CALLS.append(Call(service=service, operation=name, region=self.region, params=params))
                queued = SETTINGS.faults.get(name) or []
                code = queued.pop(0) if queued else None
            if code is not None:
                return _server_error(self, _injected(service, code, name), _STATUS.get(code, 400))
            return body(self)

        handler.__name__ = name
        return handler

    return wrap


# ---------------------------------------------------------------- EC2: Capacity Blocks


def _key(resp: Any) -> tuple[str, str]:
    return (resp.current_account, resp.region)


@_operation("ec2")
def describe_capacity_block_offerings(self: Any) -> Any:
    self.error_on_dryrun()
    instance_type = self._get_param("InstanceType")
    count = int(self._get_param("InstanceCount") or 1)
    hours = int(self._get_param("CapacityDurationHours"))
    if instance_type not in HOURLY_PRICE_USD:
        raise EC2ClientError(
            "InvalidParameterValue",
            f"Capacity Blocks are not offered for instance type {instance_type}; "
            f"supported: {', '.join(sorted(HOURLY_PRICE_USD))}",
        )
    if not 1 <= count <= 64:
        raise EC2ClientError("InvalidParameterValue", f"InstanceCount must be 1..64, got {count}")
    if not _valid_duration(hours):
        raise EC2ClientError("InvalidParameterValue", f"CapacityDurationHours {hours} is not a valid block duration")
    now = CLOCK.now()
    lower = max(_utc(self._get_param("StartDateRange")) or now, now)
    upper = min(_utc(self._get_param("EndDateRange")) or now + MAX_AHEAD, now + MAX_AHEAD)
    offerings: list[dict[str, Any]] = []
    if self.region not in SETTINGS.regions_without_capacity:
        local_zone = SETTINGS.local_zones.get(self.region)
        for day, start in enumerate(_block_starts(lower, upper, hours)):
            zones = [(f"{self.region}{s}", "availability-zone", AZ_FACTOR.get(s, 1.05)) for s in SETTINGS.azs]
            if local_zone and day == 0:
                zones.append((local_zone, "local-zone", LOCAL_ZONE_FACTOR))
            for zone, zone_type, factor in zones:
                digest = hashlib.sha1(
                    f"{zone}|{instance_type}|{count}|{hours}|{start.isoformat()}".encode(), usedforsecurity=False
                )
                offering_id = "cbo-" + digest.hexdigest()[:17]
                fee = _fee(instance_type, self.region, factor, count, hours)
                offerings.append(
                    {
                        "CapacityBlockOfferingId": offering_id,
                        "InstanceType": instance_type,
                        "AvailabilityZone": zone,
                        "InstanceCount": count,
                        "StartDate": start,
                        "EndDate": start + timedelta(hours=hours),
                        "CapacityBlockDurationHours": hours,
                        "CapacityBlockDurationMinutes": 0,
                        "UpfrontFee": f"{fee:.2f}",
                        "CurrencyCode": "USD",
                        "Tenancy": "default",
                        "ZoneType": zone_type,
                    }
                )
    with _LOCK:
        sold = _SOLD.get(_key(self), set())
        offerings = [o for o in offerings if o["CapacityBlockOfferingId"] not in sold][:MAX_OFFERINGS]
        _OFFERINGS.setdefault(_key(self), {}).update({o["CapacityBlockOfferingId"]: o for o in offerings})
    return ActionResult(_page(self, "CapacityBlockOfferings", offerings))


def _page(resp: Any, key: str, items: list[dict[str, Any]]) -> dict[str, Any]:
    """MaxResults / NextToken paging over a computed list (the token is the next index)."""
    size = int(resp._get_param("MaxResults") or 0) or len(items) or 1
    first = int(resp._get_param("NextToken") or 0)
    page: dict[str, Any] = {key: items[first : first + size]}
    if first + size < len(items):
        page["NextToken"] = str(first + size)
    return page


def _campaign_tags(resp: Any) -> list[dict[str, str]]:
    specs = resp._get_param("TagSpecifications") or []
    tags: list[dict[str, str]] = []
    for spec in specs:
        if spec.get("ResourceType") != "capacity-reservation":
            raise EC2ClientError(
                "InvalidParameterValue",
                f"'{spec.get('ResourceType')}' is not a valid taggable resource type for this operation.",
            )
        tags += [{"Key": t["Key"], "Value": t.get("Value", "")} for t in spec.get("Tags") or []]
    return tags


@_operation("ec2")
def purchase_capacity_block(self: Any) -> Any:
    if SETTINGS.deny_purchase:
        raise EC2ClientError(
            "UnauthorizedOperation", "You are not authorized to perform this operation (ec2:PurchaseCapacityBlock)."
        )
    tags = _campaign_tags(self)
    offering_id = self._get_param("CapacityBlockOfferingId")
    with _LOCK:
        offering = _OFFERINGS.get(_key(self), {}).get(offering_id)
        if offering is None:
            raise EC2ClientError(
                "InvalidCapacityBlockOfferingId.NotFound", f"The capacity block offering {offering_id} does not exist"
            )
        self.error_on_dryrun()
        # Claimed in the same locked step as the look-up: of two buyers of one offering (moto serves requests on
        # threads), the second gets NotFound, as from AWS, instead of a second reservation for the same block.
        _OFFERINGS[_key(self)].pop(offering_id, None)
        _SOLD.setdefault(_key(self), set()).add(offering_id)
    reservation_id = "cr-" + uuid.uuid4().hex[:17]
    reservation = {
        "CapacityReservationId": reservation_id,
        "OwnerId": self.current_account,
        "CapacityReservationArn": (
            f"arn:aws:ec2:{self.region}:{self.current_account}:capacity-reservation/{reservation_id}"
        ),
        "InstanceType": offering["InstanceType"],
        "InstancePlatform": self._get_param("InstancePlatform"),
        "AvailabilityZone": offering["AvailabilityZone"],
        "Tenancy": "default",
        "TotalInstanceCount": offering["InstanceCount"],
        "EbsOptimized": True,
        "EphemeralStorage": False,
        "StartDate": offering["StartDate"],
        "EndDate": offering["EndDate"],
        "EndDateType": "limited",
        "InstanceMatchCriteria": "targeted",
        "CreateDate": CLOCK.now().replace(microsecond=0),
        "Tags": tags,
        "ReservationType": "capacity-block",
        "CapacityBlockId": "cb-" + uuid.uuid4().hex[:17],
        "_payment_describes": SETTINGS.payment_pending_describes,
    }
    with _LOCK:
        _RESERVATIONS.setdefault(_key(self), {})[reservation_id] = reservation
    if SETTINGS.on_purchase is not None:
        SETTINGS.on_purchase(reservation_id)
    GATES.wait("purchase", reservation_id)  # bought, the answer not yet sent (fault matrix)
    view = _reservation_view(reservation, advance=False)
    view["State"] = "payment-pending"  # AWS answers a purchase before the fee has been charged
    view["AvailableInstanceCount"] = 0
    return ActionResult({"CapacityReservation": view})


def _clock_state(start: datetime, end: datetime, *, advance: bool) -> str:
    now = CLOCK.now()
    if now < start and advance and SETTINGS.auto_activate:
        now = CLOCK.advance(start - now)
    if now < start:
        return "scheduled"
    return "active" if now < end else "expired"


def _payment(item: dict[str, Any], *, advance: bool) -> str:
    """Where the upfront payment stands: "pending", "failed" or "paid". Only a pending payment can fail: a block
    is released (payment-failed) when the fee is not processed within 12 hours of the purchase, and a
    scheduled or active block has been paid (docs/aws-capacity.md §1.3)."""
    if item.get("_paid"):
        return "paid"
    if item.get("_payment_failed") or SETTINGS.fail_payment:
        item["_payment_failed"] = True
        return "failed"
    if item["_payment_describes"] > 0:
        item["_payment_describes"] -= 1 if advance else 0
        return "pending"
    if advance:  # the first describe after the pending ones: the fee went through
        item["_paid"] = True
    return "paid"


def _reservation_view(reservation: dict[str, Any], *, advance: bool) -> dict[str, Any]:
    """The reservation as DescribeCapacityReservations shows it now (a describe may move it along)."""
    payment = _payment(reservation, advance=advance)
    if payment == "pending":
        state = "payment-pending"
    elif payment == "failed":
        state = "payment-failed"
    else:
        state = _clock_state(reservation["StartDate"], reservation["EndDate"], advance=advance)
    view = {k: v for k, v in reservation.items() if not k.startswith("_")}
    view["State"] = state
    view["AvailableInstanceCount"] = reservation["TotalInstanceCount"] if state == "active" else 0
    return view


def _matches(view: dict[str, Any], filters: dict[str, list[str]]) -> bool:
    tags = {t["Key"]: t["Value"] for t in view.get("Tags") or []}
    for name, values in filters.items():
        if name.startswith("tag:"):
            actual = tags.get(name.removeprefix("tag:"))
        elif name == "state":
            actual = view["State"]
        elif name == "instance-type":
            actual = view["InstanceType"]
        elif name == "availability-zone":
            actual = view["AvailabilityZone"]
        else:
            raise EC2ClientError("InvalidParameterValue", f"The filter '{name}' is invalid")
        if actual not in values:
            return False
    return True


@_operation("ec2")
def describe_capacity_reservations(self: Any) -> Any:
    self.error_on_dryrun()
    ids = self._get_param("CapacityReservationIds") or []
    filters = self._filters_from_querystring()
    with _LOCK:
        table = _RESERVATIONS.get(_key(self), {})
        missing = [i for i in ids if i not in table]
        if missing:
            raise EC2ClientError(
                "InvalidCapacityReservationId.NotFound", f"The capacity reservation ID '{missing[0]}' does not exist"
            )
        chosen = [table[i] for i in ids] if ids else list(table.values())
        # Only the reservations this caller asked about may move the clock (auto_activate): a campaign looking for
        # its own tag must not start another campaign's block by listing it on the way.
        others = {k: v for k, v in filters.items() if k != "state"}
        chosen = [r for r in chosen if _matches(_reservation_view(r, advance=False), others)]
        views = [_reservation_view(r, advance=True) for r in chosen]
    deliver_due_events()
    terminate_due()
    return ActionResult(_page(self, "CapacityReservations", [v for v in views if _matches(v, filters)]))


def _due_events(reservation: dict[str, Any], now: datetime) -> list[tuple[str, datetime]]:
    """(detail type, when) of the events this reservation owes by ``now`` and has not sent."""
    if reservation.get("_payment_failed"):
        return []
    sent: set[str] = reservation.setdefault("_sent", set())
    owed = [
        ("Capacity Block Delivered", reservation["StartDate"]),
        ("Capacity Block Expiration Warning", reservation["EndDate"] - WARNING_BEFORE_END),
    ]
    due = [(kind, at) for kind, at in owed if at <= now and kind not in sent]
    sent.update(kind for kind, _ in due)
    return due


def terminate_due() -> list[Termination]:
    """At end − 30 min (on CLOCK) terminate each block's instances, once: what a teardown left behind goes."""
    now = CLOCK.now()
    due = []
    with _LOCK:
        for table in _RESERVATIONS.values():
            for reservation in table.values():
                at = reservation["EndDate"] - TERMINATION_BEFORE_END
                if at <= now and not reservation.get("_terminated") and not reservation.get("_payment_failed"):
                    reservation["_terminated"] = True
                    due.append((reservation, at))
    done = []
    for reservation, at in due:
        found = [name for hook in TERMINATION_HOOKS for name in hook(reservation)]
        done.append(Termination(reservation_id=reservation["CapacityReservationId"], at=at, terminated=tuple(found)))
    with _LOCK:
        TERMINATIONS.extend(done)
    return done


def deliver_due_events() -> int:
    """Put every Capacity Block event due on CLOCK, and not sent yet, on moto's default event bus of the
    reservation's account and region; returns how many were sent."""
    now = CLOCK.now()
    entries: list[tuple[str, str, dict[str, Any]]] = []
    with _LOCK:
        for (account, region), table in _RESERVATIONS.items():
            for reservation in table.values():
                for kind, at in _due_events(reservation, now):
                    entries.append((account, region, {
                        "Source": "aws.ec2",
                        "DetailType": kind,
                        "Resources": [reservation["CapacityReservationArn"]],
                        "Detail": json.dumps({
                            "capacity-reservation-id": reservation["CapacityReservationId"],
                            "end-date": reservation["EndDate"].isoformat(),
                        }),
                        "Time": at.timestamp(),
                    }))
    for account, region, entry in entries:
        events_backends[account][region].put_events([entry])
    return len(entries)


# ---------------------------------------------------------------- SageMaker: training plans


@_operation("sagemaker")
def search_training_plan_offerings(self: Any) -> Any:
    instance_type = str(self._get_param("InstanceType") or "")
    plain_type = instance_type.removeprefix("ml.")
    count = int(self._get_param("InstanceCount") or 1)
    hours = int(self._get_param("DurationHours") or 24)
    if plain_type not in HOURLY_PRICE_USD:
        raise ValidationError(f"Training plans are not offered for {instance_type}")
    now = CLOCK.now()
    lower = max(_utc(self._get_param("StartTimeAfter")) or now, now)
    upper = min(_utc(self._get_param("EndTimeBefore")) or now + MAX_AHEAD, now + MAX_AHEAD)
    offerings: list[dict[str, Any]] = []
    if self.region not in SETTINGS.regions_without_capacity:
        for start in _block_starts(lower, upper, hours)[:3]:
            digest = hashlib.sha256(f"{self.region}|{instance_type}|{count}|{hours}|{start.isoformat()}".encode())
            offerings.append(
                {
                    "TrainingPlanOfferingId": "tpo-" + digest.hexdigest()[:40],
                    "TargetResources": self._get_param("TargetResources") or ["hyperpod-cluster"],
                    "RequestedStartTimeAfter": lower,
                    "RequestedEndTimeBefore": upper,
                    "DurationHours": hours,
                    "DurationMinutes": 0,
                    "UpfrontFee": f"{_fee(plain_type, self.region, AZ_FACTOR['a'], count, hours):.2f}",
                    "CurrencyCode": "USD",
                    "ReservedCapacityOfferings": [
                        {
                            "InstanceType": instance_type,
                            "InstanceCount": count,
                            "AvailabilityZone": f"{self.region}a",
                            "DurationHours": hours,
                            "DurationMinutes": 0,
                            "StartTime": start,
                            "EndTime": start + timedelta(hours=hours),
                        }
                    ],
                }
            )
    with _LOCK:
        _PLAN_OFFERINGS.setdefault(_key(self), {}).update({o["TrainingPlanOfferingId"]: o for o in offerings})
    return ActionResult({"TrainingPlanOfferings": offerings})


@_operation("sagemaker")
def create_training_plan(self: Any) -> Any:
    name = self._get_param("TrainingPlanName")
    offering_id = self._get_param("TrainingPlanOfferingId")
    with _LOCK:
        plans = _PLANS.setdefault(_key(self), {})
        if name in plans:
            raise ResourceInUseException(message=f"Training plan {name} already exists")
        offering = _PLAN_OFFERINGS.get(_key(self), {}).pop(offering_id, None)
        if offering is None:
            raise ValidationError(message=f"Invalid TrainingPlanOfferingId {offering_id}")
        segment = offering["ReservedCapacityOfferings"][0]
        arn = f"arn:aws:sagemaker:{self.region}:{self.current_account}:training-plan/{name}"
        plans[name] = {
            "TrainingPlanArn": arn,
            "TrainingPlanName": name,
            "DurationHours": offering["DurationHours"],
            "DurationMinutes": 0,
            "StartTime": segment["StartTime"],
            "EndTime": segment["EndTime"],
            "UpfrontFee": offering["UpfrontFee"],
            "CurrencyCode": "USD",
            "TotalInstanceCount": segment["InstanceCount"],
            "InUseInstanceCount": 0,
            "TargetResources": offering["TargetResources"],
            "ReservedCapacitySummaries": [
                {
                    "ReservedCapacityArn": f"{arn}/reserved-capacity/1",
                    "InstanceType": segment["InstanceType"],
                    "TotalInstanceCount": segment["InstanceCount"],
                    "Status": "Scheduled",
                    "AvailabilityZone": segment["AvailabilityZone"],
                    "DurationHours": offering["DurationHours"],
                    "DurationMinutes": 0,
                    "StartTime": segment["StartTime"],
                    "EndTime": segment["EndTime"],
                }
            ],
            "_tags": [{"Key": t["Key"], "Value": t.get("Value", "")} for t in self._get_param("Tags") or []],
            "_payment_describes": SETTINGS.payment_pending_describes,
        }
    return ActionResult({"TrainingPlanArn": arn})


_PLAN_STATUS = {"scheduled": "Scheduled", "active": "Active", "expired": "Expired"}


def _plan_view(plan: dict[str, Any], *, advance: bool) -> dict[str, Any]:
    payment = _payment(plan, advance=advance)
    if payment == "pending":
        status = "Pending"
    elif payment == "failed":
        status = "Failed"
    else:
        status = _PLAN_STATUS[_clock_state(plan["StartTime"], plan["EndTime"], advance=advance)]
    view = {k: v for k, v in plan.items() if not k.startswith("_")}
    view["Status"] = status
    view["AvailableInstanceCount"] = plan["TotalInstanceCount"] if status == "Active" else 0
    for summary in view["ReservedCapacitySummaries"]:
        summary["Status"] = status
    return view


@_operation("sagemaker")
def describe_training_plan(self: Any) -> Any:
    name = self._get_param("TrainingPlanName")
    with _LOCK:
        plan = _PLANS.get(_key(self), {}).get(name)
        if plan is None:
            raise ResourceNotFound(message=f"Training plan {name} does not exist")
        return ActionResult(_plan_view(plan, advance=True))


@_operation("sagemaker")
def list_training_plans(self: Any) -> Any:
    with _LOCK:
        views = [_plan_view(p, advance=False) for p in _PLANS.get(_key(self), {}).values()]
    keep = ("TrainingPlanArn", "TrainingPlanName", "Status", "StartTime", "EndTime", "UpfrontFee", "CurrencyCode",
            "TotalInstanceCount", "AvailableInstanceCount", "InUseInstanceCount", "TargetResources",
            "DurationHours", "DurationMinutes", "ReservedCapacitySummaries")
    return ActionResult({"TrainingPlanSummaries": [{k: v[k] for k in keep if k in v} for v in views]})


# Whatever answered ListTags before this extension took over (moto, or another extension): ARNs that are
# not training plans go there. Captured at install time, so extensions installed earlier stay in the chain.
_NEXT_LIST_TAGS: list[Callable[[Any], Any]] = [SageMakerResponse.list_tags]


def _list_tags(self: Any) -> Any:
    """moto's ListTags knows nothing of training plans: answer for ours, defer to moto for the rest."""
    arn = str(self._get_param("ResourceArn") or "")
    if ":training-plan/" not in arn:
        return _NEXT_LIST_TAGS[0](self)
    with _LOCK:
        plan = _PLANS.get(_key(self), {}).get(arn.rpartition("training-plan/")[2])
    if plan is None or plan["TrainingPlanArn"] != arn:
        raise ResourceNotFound(message=f"{arn} does not exist")
    return ActionResult({"Tags": plan["_tags"]})


AUTO_ACTIVATE_ENV = "CAPSERVE_SANDBOX_AUTO_ACTIVATE"


def install() -> None:
    """Add the operations to moto's response classes (moto looks methods up by name on every request).

    ``CAPSERVE_SANDBOX_AUTO_ACTIVATE=1`` in the environment turns ``SETTINGS.auto_activate`` on (the demo's knob).
    """
    if os.environ.get(AUTO_ACTIVATE_ENV) == "1":
        SETTINGS.auto_activate = True
    for operation in (describe_capacity_block_offerings, purchase_capacity_block, describe_capacity_reservations):
        setattr(EC2Response, operation.__name__, operation)
    for operation in (search_training_plan_offerings, create_training_plan, describe_training_plan,
                      list_training_plans):
        setattr(SageMakerResponse, operation.__name__, operation)
    if SageMakerResponse.list_tags is not _list_tags:
        _NEXT_LIST_TAGS[0] = SageMakerResponse.list_tags
        SageMakerResponse.list_tags = _list_tags  # type: ignore[method-assign]


def reservations() -> list[dict[str, Any]]:
    """Every reservation bought in this sandbox (id, region, tags), for harnesses counting purchases."""
    with _LOCK:
        return [
            {"reservation_id": rid, "region": region, "tags": {t["Key"]: t["Value"] for t in r["Tags"]}}
            for (_, region), table in _RESERVATIONS.items()
            for rid, r in table.items()
        ]


def reservation_now(account_id: str, region: str, reservation_id: str) -> dict[str, Any] | None:
    """The reservation as DescribeCapacityReservations would show it now, without moving the clock (None: this
    sandbox sold no such reservation), for the stand-ins that launch into it (EKS's node groups)."""
    with _LOCK:
        reservation = _RESERVATIONS.get((account_id, region), {}).get(reservation_id)
        return _reservation_view(reservation, advance=False) if reservation is not None else None
