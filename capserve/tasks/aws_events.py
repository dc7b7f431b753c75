"""Capacity Block events from AWS into Prefect: converge the rule and queues, forward messages, delete the rule.

The requests are built in ``capserve.core.aws_events`` (docs/events.md §2). The forwarder's rules:

- a message is deleted from SQS **only after** Prefect accepted its event (``POST /api/events``);
- a message it cannot read (not JSON, not a Capacity Block event, a bad field) is logged and left on the
  queue: SQS shows it again after the visibility timeout and, after ``MAX_RECEIVES`` receives, moves it
  to the dead-letter queue (the redrive policy), where a person can look; nothing is lost silently;
- the event's id comes from EventBridge's event id, so a message posted again (a restart between the post
  and the delete, or EventBridge delivering twice) is one event in Prefect, which keeps the first of a
  given id.

Receiving, posting and deleting are plain functions, not Prefect tasks: the forwarder long-polls all day,
and a task run per empty poll would flood the orchestrator's history.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from botocore.exceptions import ClientError
from prefect.client.orchestration import get_client
from pydantic import BaseModel, ConfigDict, Field

from capserve.core.aws_events import (
    DEAD_LETTER_QUEUE_NAME,
    LONG_POLL_SECONDS,
    QUEUE_NAME,
    TARGET_ID,
    UnreadableMessage,
    dead_letter_queue_attributes,
    notice_event,
    put_rule_request,
    put_targets_request,
    queue_attributes,
    queue_tags,
    read_notice,
    rule_name,
)
from capserve.core.errors import RetryableError
from capserve.core.events import CapserveEvent
from capserve.core.tags import CAMPAIGN_TAG
from capserve.tasks.aws import client, convert, error_code
from capserve.tasks.events import event_body
from capserve.tasks.resilience import aws_task

_log = logging.getLogger(__name__)
RULE_GONE = frozenset({"ResourceNotFoundException"})
QUEUE_GONE = frozenset({"AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"})
RESERVATION_GONE = frozenset({"InvalidCapacityReservationId.NotFound", "InvalidCapacityReservationId.Malformed"})


class QueueUrls(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    queue: str = Field(min_length=1, max_length=2048, description="The forwarder's queue URL.")
    queue_arn: str = Field(min_length=1, max_length=2048, description="Its ARN (the rule's target).")
    dead_letter: str = Field(min_length=1, max_length=2048, description="The dead-letter queue URL.")


@aws_task("converge-capacity-event-queues")
def converge_queues(region: str) -> QueueUrls:
    """The region's forwarder queue and its dead-letter queue, created or brought to their attributes."""
    sqs = client("sqs", region)
    try:
        dlq_url = sqs.create_queue(QueueName=DEAD_LETTER_QUEUE_NAME, tags=queue_tags())["QueueUrl"]
        sqs.set_queue_attributes(QueueUrl=dlq_url, Attributes=dead_letter_queue_attributes())
        dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        account = dlq_arn.split(":")[4]
        url = sqs.create_queue(QueueName=QUEUE_NAME, tags=queue_tags())["QueueUrl"]
        sqs.set_queue_attributes(QueueUrl=url, Attributes=queue_attributes(region, account))
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    except Exception as exc:
        raise convert(exc, f"the capacity event queues in {region}", fix="allow sqs:CreateQueue, "
                      "sqs:SetQueueAttributes, sqs:GetQueueAttributes and sqs:TagQueue") from exc
    return QueueUrls(queue=url, queue_arn=arn, dead_letter=dlq_url)


@aws_task("converge-capacity-event-rule")
def converge_capacity_events(campaign_id: str, reservation_id: str, region: str) -> str:
    """The campaign's EventBridge rule for its reservation, targeting the region's queue; returns the rule name."""
    queues = converge_queues.fn(region)
    events = client("events", region)
    try:
        events.put_rule(**put_rule_request(campaign_id, reservation_id))
        events.put_targets(**put_targets_request(campaign_id, queues.queue_arn))
    except Exception as exc:
        raise convert(exc, f"the EventBridge rule {rule_name(campaign_id)} in {region}",
                      fix="allow events:PutRule, events:PutTargets and events:TagResource") from exc
    return rule_name(campaign_id)


@aws_task("delete-capacity-event-rule")
def delete_capacity_events(campaign_id: str, region: str) -> bool:
    """Delete the campaign's rule (its target first, as EventBridge requires); False when it was already gone.
    The queues are the region's, shared by every campaign, and stay."""
    events, name = client("events", region), rule_name(campaign_id)
    try:
        events.remove_targets(Rule=name, Ids=[TARGET_ID])
        events.delete_rule(Name=name)
    except ClientError as exc:
        if error_code(exc) in RULE_GONE:
            return False
        raise convert(exc, f"deleting the EventBridge rule {name} in {region}",
                      fix="allow events:RemoveTargets and events:DeleteRule") from exc
    return True


# ---------------------------------------------------------------- the forwarder


class ForwardOutcome(BaseModel):
    """What one poll did with the messages it received."""

    model_config = ConfigDict(extra="forbid")

    posted: list[str] = Field(default_factory=list, description="Event names posted (their messages deleted).")
    unreadable: list[str] = Field(default_factory=list, description="Message ids left for the dead-letter queue.")
    not_posted: list[str] = Field(default_factory=list, description="Message ids whose post failed (kept).")


Post = Callable[[CapserveEvent], None]


def post_event(event: CapserveEvent) -> None:
    """Send one event to the Prefect API and wait for its answer (the forwarder deletes only after this)."""
    try:
        with get_client(sync_client=True) as prefect:
            answer = prefect.request("POST", "/events", json=[event_body(event)])
            answer.raise_for_status()
    except Exception as exc:
        raise RetryableError(f"posting {event.event} to the Prefect API failed ({type(exc).__name__}); "
                             "the message stays on the queue and is posted on a later poll") from exc


def forward_once(
    region: str,
    queue_url: str,
    *,
    post: Post = post_event,
    wait_seconds: int = LONG_POLL_SECONDS,
) -> ForwardOutcome:
    """One long poll: each message read, posted, then deleted; unreadable or unposted ones stay on the queue."""
    sqs = client("sqs", region)
    try:
        answer = sqs.receive_message(
            QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=wait_seconds,
            MessageSystemAttributeNames=["ApproximateReceiveCount"],
        )
    except Exception as exc:
        raise convert(exc, f"receiving from {queue_url}", fix="allow sqs:ReceiveMessage") from exc
    messages: list[dict[str, Any]] = answer.get("Messages", [])
    outcome = ForwardOutcome()
    campaigns = campaigns_of(region, _reservations_in(messages))
    for message in messages:
        message_id = str(message["MessageId"])
        try:
            notice = read_notice(str(message.get("Body", "")))
        except UnreadableMessage as why:
            receives = message.get("Attributes", {}).get("ApproximateReceiveCount", "?")
            _log.warning("capacity event message %s is unreadable (%s); left on the queue, receive %s, the "
                         "dead-letter queue takes it after the redrive limit", message_id, why, receives)
            outcome.unreadable.append(message_id)
            continue
        event = notice_event(notice, campaign_id=campaigns.get(notice.reservation_id), message_id=message_id)
        try:
            post(event)
        except Exception:  # noqa: BLE001 - whatever stops the post, the message stays on the queue for the next poll (logged)
            _log.exception("could not post %s (message %s): it stays on the queue", event.event, message_id)
            outcome.not_posted.append(message_id)
            continue
        _delete_message(sqs, queue_url, message)
        outcome.posted.append(event.event)
    return outcome


def _reservations_in(messages: Iterable[dict[str, Any]]) -> set[str]:
    found: set[str] = set()
    for message in messages:
        try:
            found.add(read_notice(str(message.get("Body", ""))).reservation_id)
        except UnreadableMessage:
            continue
    return found


def campaigns_of(region: str, reservation_ids: Iterable[str]) -> dict[str, str]:
    """reservation id → campaign id, from the reservations' campaign tag (reservations not ours are left out)."""
    ec2, found = client("ec2", region), {}
    for reservation_id in sorted(reservation_ids):
        try:
            answer = ec2.describe_capacity_reservations(CapacityReservationIds=[reservation_id])
        except ClientError as exc:
            if error_code(exc) in RESERVATION_GONE:
                continue
            raise convert(exc, f"reading the tags of {reservation_id}",
                          fix="allow ec2:DescribeCapacityReservations") from exc
        for reservation in answer.get("CapacityReservations", []):
            tags = {t["Key"]: t["Value"] for t in reservation.get("Tags") or []}
            if CAMPAIGN_TAG in tags:
                found[reservation_id] = tags[CAMPAIGN_TAG]
    return found


def _delete_message(sqs: Any, queue_url: str, message: dict[str, Any]) -> None:
    try:
        sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])
    except ClientError as exc:
        if error_code(exc) in QUEUE_GONE:
            return
        # Posted but not deleted: the message comes back and is posted again with the same event id, which
        # Prefect stores once.
        _log.warning("message %s was posted but could not be deleted (%s)", message["MessageId"], error_code(exc))
