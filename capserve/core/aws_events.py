"""AWS's Capacity Block events into Prefect: the EventBridge rule, the SQS queues, and reading a message.

EC2 sends "Capacity Block Delivered" when a block starts and "Capacity Block Expiration Warning" 40
minutes before it ends, to EventBridge in the block's region (docs/events.md §2). Self-hosted Prefect
has no webhooks, so capserve routes them: a rule per campaign (matching its reservation) → one SQS
queue per region (with a dead-letter queue) → the forwarder, which posts each message as a Prefect
event and only then deletes it. These functions build the requests and read messages; the tasks in
``capserve.tasks.aws_events`` send them.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from capserve.core.events import CampaignRefs, CapserveEvent, EventName, campaign_event, event_id
from capserve.core.tags import CAMPAIGN_TAG

# Detail types as EC2 sends them. AWS's pages show both "Capacity Block Delivered" and "Capacity Block
# Reservation Delivered" (and the same for the warning), so the rule matches the common prefix and the
# reader the common suffix (docs/events.md §2).
DETAIL_TYPE_PREFIX = "Capacity Block"
SOURCE = "aws.ec2"
NoticeKind = Literal["delivered", "expiration-warning"]
_SUFFIXES: dict[str, NoticeKind] = {"Delivered": "delivered", "Expiration Warning": "expiration-warning"}

QUEUE_NAME = "capserve-capacity-events"
DEAD_LETTER_QUEUE_NAME = "capserve-capacity-events-dlq"
COMPONENT_TAG = "capserve.io/component"
COMPONENT = "capacity-events"
# A message the forwarder cannot read is received this many times, then SQS moves it to the dead-letter
# queue (its redrive policy): nothing is dropped silently (docs/events.md §2).
MAX_RECEIVES = 5
RETENTION_SECONDS = 4 * 24 * 3600  # SQS's default; the DLQ keeps 14 days (its maximum) for a person to look
DLQ_RETENTION_SECONDS = 14 * 24 * 3600
VISIBILITY_SECONDS = 60  # a message being posted is hidden this long before another receive may see it
LONG_POLL_SECONDS = 20  # SQS's maximum long poll


def rule_name(campaign_id: str) -> str:
    """The campaign's EventBridge rule (deterministic: a re-run converges on the same rule)."""
    return f"capserve-{campaign_id}-capacity-block"


TARGET_ID = "capserve-forwarder-queue"


def event_pattern(reservation_id: str) -> dict[str, Any]:
    """Capacity Block events about one reservation."""
    return {
        "source": [SOURCE],
        "detail-type": [{"prefix": DETAIL_TYPE_PREFIX}],
        "detail": {"capacity-reservation-id": [reservation_id]},
    }


def put_rule_request(campaign_id: str, reservation_id: str) -> dict[str, Any]:
    """``events:PutRule`` for the campaign's rule on the default bus (where EC2 sends its events)."""
    return {
        "Name": rule_name(campaign_id),
        "EventPattern": json.dumps(event_pattern(reservation_id), sort_keys=True),
        "State": "ENABLED",
        "Description": f"Capacity Block events of campaign {campaign_id} to the capserve forwarder",
        "Tags": [{"Key": CAMPAIGN_TAG, "Value": campaign_id}, {"Key": COMPONENT_TAG, "Value": COMPONENT}],
    }


def put_targets_request(campaign_id: str, queue_arn: str) -> dict[str, Any]:
    return {"Rule": rule_name(campaign_id), "Targets": [{"Id": TARGET_ID, "Arn": queue_arn}]}


def queue_arn(region: str, account: str, name: str) -> str:
    return f"arn:aws:sqs:{region}:{account}:{name}"


def dead_letter_queue_attributes() -> dict[str, str]:
    return {"MessageRetentionPeriod": str(DLQ_RETENTION_SECONDS)}


def queue_attributes(region: str, account: str) -> dict[str, str]:
    """The forwarder's queue: long polling, a redrive policy to the DLQ, and a policy letting only capserve's
    rules in this account and region send to it (EventBridge needs it to deliver to SQS)."""
    arn = queue_arn(region, account, QUEUE_NAME)
    policy = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "capserve-rules-send",
                "Effect": "Allow",
                "Principal": {"Service": "events.amazonaws.com"},
                "Action": "sqs:SendMessage",
                "Resource": arn,
                "Condition": {"ArnLike": {"aws:SourceArn": f"arn:aws:events:{region}:{account}:rule/capserve-*"}},
            }
        ],
    }
    redrive = {
        "deadLetterTargetArn": queue_arn(region, account, DEAD_LETTER_QUEUE_NAME),
        "maxReceiveCount": str(MAX_RECEIVES),
    }
    return {
        "MessageRetentionPeriod": str(RETENTION_SECONDS),
        "ReceiveMessageWaitTimeSeconds": str(LONG_POLL_SECONDS),
        "VisibilityTimeout": str(VISIBILITY_SECONDS),
        "RedrivePolicy": json.dumps(redrive, sort_keys=True),
        "Policy": json.dumps(policy, sort_keys=True),
    }


def queue_tags() -> dict[str, str]:
    """The queues are shared by every campaign in the region: tagged as capserve's, not as one campaign's."""
    return {COMPONENT_TAG: COMPONENT}


# ---------------------------------------------------------------- reading a message


class UnreadableMessage(ValueError):
    """A message the forwarder cannot turn into an event: it stays on the queue (then goes to the DLQ)."""


class CapacityNotice(BaseModel):
    """What one Capacity Block event says."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: NoticeKind = Field(description="delivered (the block started) or expiration-warning (end − 40 min).")
    reservation_id: str = Field(min_length=3, max_length=64, pattern=r"^cr-[0-9a-zA-Z]+$", description="cr-…")
    region: str | None = Field(None, max_length=32, description="Region the event came from.")
    occurred: AwareDatetime = Field(description="When EC2 sent it.")
    end: AwareDatetime | None = Field(None, description="The block's end date, when the event says it.")
    aws_event_id: str | None = Field(None, max_length=128, description="EventBridge's event id.")


def read_notice(body: str) -> CapacityNotice:
    """Read an EventBridge event delivered to SQS; raises ``UnreadableMessage`` saying what is wrong."""
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise UnreadableMessage(f"not JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise UnreadableMessage("not a JSON object")
    source = data.get("source")
    # AWS's own example spells the key detail_type; EventBridge's envelope spells it detail-type.
    detail_type = data.get("detail-type", data.get("detail_type"))
    if source != SOURCE or not isinstance(detail_type, str) or not detail_type.startswith(DETAIL_TYPE_PREFIX):
        raise UnreadableMessage(f"not a Capacity Block event (source {source!r}, detail-type {detail_type!r})")
    kind = next((k for suffix, k in _SUFFIXES.items() if detail_type.endswith(suffix)), None)
    if kind is None:
        raise UnreadableMessage(f"unknown Capacity Block event {detail_type!r}")
    detail = data.get("detail")
    if not isinstance(detail, dict) or not isinstance(detail.get("capacity-reservation-id"), str):
        raise UnreadableMessage(f"{detail_type!r} without detail.capacity-reservation-id")
    try:
        return CapacityNotice(
            kind=kind,
            reservation_id=detail["capacity-reservation-id"],
            region=data.get("region") if isinstance(data.get("region"), str) else None,
            occurred=_time(data.get("time")),
            end=_time(detail["end-date"]) if detail.get("end-date") else None,
            aws_event_id=str(data["id"]) if data.get("id") else None,
        )
    except (ValueError, TypeError) as exc:  # pydantic's ValidationError is a ValueError
        raise UnreadableMessage(f"{detail_type!r} with a bad field: {str(exc).splitlines()[0]}") from exc


def _time(value: Any) -> datetime:
    if not isinstance(value, str):
        raise ValueError(f"a time must be an ISO 8601 string, not {value!r}")
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        raise ValueError(f"time {value!r} has no zone")
    return parsed


_NOTICE_EVENTS: dict[NoticeKind, EventName] = {
    "delivered": EventName.CAPACITY_BLOCK_DELIVERED,
    "expiration-warning": EventName.CAPACITY_BLOCK_EXPIRATION_WARNING,
}


def notice_event(notice: CapacityNotice, *, campaign_id: str | None, message_id: str) -> CapserveEvent:
    """The Prefect event for a notice: about the campaign when the reservation is one of ours (found by its
    tag), else about the reservation. Its id comes from EventBridge's event id (or the SQS message id), so a
    message received twice, or posted again after a forwarder restart, is one event in Prefect."""
    name = _NOTICE_EVENTS[notice.kind]
    payload: dict[str, Any] = {"reservation_id": notice.reservation_id, "kind": notice.kind}
    if notice.end is not None:
        payload["end"] = notice.end.isoformat()
    if notice.region:
        payload["region"] = notice.region
    stable = notice.aws_event_id or message_id
    if campaign_id is not None:
        refs = CampaignRefs(campaign_id=campaign_id, reservation_id=notice.reservation_id, region=notice.region)
        made = campaign_event(name, refs, occurred=notice.occurred, payload=payload)
    else:
        payload["campaign"] = None
        made = CapserveEvent(
            event=str(name),
            resource={
                "prefect.resource.id": f"capserve.reservation.{notice.reservation_id}",
                "prefect.resource.name": notice.reservation_id,
            },
            payload=payload,
            occurred=notice.occurred,
            id=event_id("aws", stable),
        )
    return made.model_copy(update={"id": event_id("aws", stable)})
