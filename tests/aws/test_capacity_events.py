"""Capacity Block events into Prefect, end to end on the sandbox: the rule and queues converge, the sandbox
sends the Expiration Warning at end − 40 min through moto's EventBridge to SQS, and the forwarder posts it
(deleting only after the post), leaves what it cannot read for the dead-letter queue, and posts one event
after a restart."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import boto3
import pytest
from capserve_sandbox.aws_ext import capacity as ext
from capserve_sandbox.clock import CLOCK
from prefect.client.orchestration import get_client

from capserve.cli import main
from capserve.core.aws_events import (
    DEAD_LETTER_QUEUE_NAME,
    MAX_RECEIVES,
    QUEUE_NAME,
    UnreadableMessage,
    event_pattern,
    read_notice,
    rule_name,
)
from capserve.core.events import CapserveEvent
from capserve.flows.forward_events import forward_capacity_events
from capserve.tasks.aws_events import (
    converge_capacity_events,
    converge_queues,
    delete_capacity_events,
    forward_once,
    post_event,
)

REGION = "us-east-2"
CAMPAIGN = "k3-demo"



@pytest.fixture
def fresh(sandbox: None) -> Iterator[None]:
    ext.reset()
    CLOCK.reset()
    sqs = boto3.client("sqs", region_name=REGION)
    for name in (QUEUE_NAME, DEAD_LETTER_QUEUE_NAME):
        try:
            sqs.delete_queue(QueueUrl=sqs.get_queue_url(QueueName=name)["QueueUrl"])
        except sqs.exceptions.QueueDoesNotExist:
            pass
    yield
    ext.reset()
    CLOCK.reset()


def buy_block(campaign: str = CAMPAIGN) -> dict[str, Any]:
    ec2 = boto3.client("ec2", region_name=REGION)
    now = CLOCK.now()
    [offering, *_] = ec2.describe_capacity_block_offerings(
        InstanceType="p6-b300.48xlarge", InstanceCount=1, CapacityDurationHours=24,
        StartDateRange=now, EndDateRange=now + timedelta(days=14),
    )["CapacityBlockOfferings"]
    tags = [{"ResourceType": "capacity-reservation", "Tags": [{"Key": "capserve.io/campaign", "Value": campaign}]}]
    return dict(ec2.purchase_capacity_block(
        CapacityBlockOfferingId=offering["CapacityBlockOfferingId"], InstancePlatform="Linux/UNIX",
        TagSpecifications=tags,
    )["CapacityReservation"])


def describe(reservation_id: str) -> None:
    boto3.client("ec2", region_name=REGION).describe_capacity_reservations(CapacityReservationIds=[reservation_id])


class Recorder:
    def __init__(self, fail: int = 0) -> None:
        self.events: list[CapserveEvent] = []
        self.fail = fail

    def __call__(self, event: CapserveEvent) -> None:
        if self.fail:
            self.fail -= 1
            raise ConnectionError("Prefect API unreachable")
        self.events.append(event)


def queue_depth(url: str) -> int:
    attributes = boto3.client("sqs", region_name=REGION).get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]) + int(attributes["ApproximateNumberOfMessagesNotVisible"])


def test_rule_and_queues_converge_tagged_with_a_redrive_policy_and_teardown_deletes_the_rule(fresh: None) -> None:
    block = buy_block()
    first = converge_capacity_events.fn(CAMPAIGN, block["CapacityReservationId"], REGION)
    again = converge_capacity_events.fn(CAMPAIGN, block["CapacityReservationId"], REGION)
    assert first == again == rule_name(CAMPAIGN)
    events = boto3.client("events", region_name=REGION)
    rule = events.describe_rule(Name=rule_name(CAMPAIGN))
    assert json.loads(rule["EventPattern"]) == event_pattern(block["CapacityReservationId"])
    tags = {t["Key"]: t["Value"] for t in events.list_tags_for_resource(ResourceARN=rule["Arn"])["Tags"]}
    assert tags["capserve.io/campaign"] == CAMPAIGN
    [target] = events.list_targets_by_rule(Rule=rule_name(CAMPAIGN))["Targets"]
    queues = converge_queues.fn(REGION)
    assert target["Arn"] == queues.queue_arn
    attributes = boto3.client("sqs", region_name=REGION).get_queue_attributes(
        QueueUrl=queues.queue, AttributeNames=["All"]
    )["Attributes"]
    redrive = json.loads(attributes["RedrivePolicy"])
    assert redrive["deadLetterTargetArn"].endswith(DEAD_LETTER_QUEUE_NAME) and int(redrive["maxReceiveCount"]) == 5
    assert "events.amazonaws.com" in attributes["Policy"]

    assert delete_capacity_events.fn(CAMPAIGN, REGION) is True
    assert delete_capacity_events.fn(CAMPAIGN, REGION) is False  # already gone: nothing to do
    assert rule_name(CAMPAIGN) not in [r["Name"] for r in events.list_rules()["Rules"]]


def test_the_warning_comes_at_end_minus_40_minutes_and_is_forwarded_about_the_campaign(fresh: None) -> None:
    block = buy_block()
    rid = block["CapacityReservationId"]
    converge_capacity_events.fn(CAMPAIGN, rid, REGION)
    queue = converge_queues.fn(REGION).queue
    post = Recorder()

    CLOCK.advance(block["StartDate"] - CLOCK.now() + timedelta(minutes=1))
    describe(rid)
    assert forward_once(REGION, queue, post=post, wait_seconds=1).posted == ["capserve.aws.capacity-block.delivered"]

    CLOCK.advance(block["EndDate"] - timedelta(minutes=41) - CLOCK.now())
    describe(rid)
    assert forward_once(REGION, queue, post=post, wait_seconds=0).posted == []  # not yet: end − 41 min

    CLOCK.advance(timedelta(minutes=1))
    describe(rid)
    describe(rid)  # sent once, however often the sandbox looks
    outcome = forward_once(REGION, queue, post=post, wait_seconds=1)
    assert outcome.posted == ["capserve.aws.capacity-block.expiration-warning"]
    warning = post.events[-1]
    assert warning.resource["prefect.resource.id"] == f"capserve.campaign.{CAMPAIGN}"
    assert {"prefect.resource.id": f"capserve.reservation.{rid}", "prefect.resource.role": "reservation",
            "prefect.resource.name": rid} in warning.related
    assert warning.payload["end"] == block["EndDate"].isoformat()
    assert queue_depth(queue) == 0  # deleted after the post


def test_a_reservation_that_is_not_ours_is_forwarded_about_the_reservation(fresh: None) -> None:
    queue = converge_queues.fn(REGION).queue
    body = json.dumps({
        "id": "e-1", "source": "aws.ec2", "detail-type": "Capacity Block Reservation Expiration Warning",
        "time": "2026-12-02T10:50:00Z", "region": REGION,
        "detail": {"capacity-reservation-id": "cr-00000000000000000", "end-date": "2026-12-02T11:30:00Z"},
    })
    boto3.client("sqs", region_name=REGION).send_message(QueueUrl=queue, MessageBody=body)
    post = Recorder()
    assert forward_once(REGION, queue, post=post, wait_seconds=1).posted == [
        "capserve.aws.capacity-block.expiration-warning"
    ]
    assert post.events[0].resource["prefect.resource.id"] == "capserve.reservation.cr-00000000000000000"


def test_unreadable_messages_stay_until_the_dead_letter_queue_takes_them(fresh: None) -> None:
    queues = converge_queues.fn(REGION)
    sqs = boto3.client("sqs", region_name=REGION)
    # A short visibility timeout so the test need not wait a minute between receives.
    sqs.set_queue_attributes(QueueUrl=queues.queue, Attributes={"VisibilityTimeout": "0"})
    for body in ("not json", json.dumps({"source": "aws.ec2", "detail-type": "Capacity Block Exploded",
                                         "detail": {"capacity-reservation-id": "cr-1"}})):
        sqs.send_message(QueueUrl=queues.queue, MessageBody=body)
    post = Recorder()
    unreadable: list[str] = []
    for _ in range(MAX_RECEIVES + 1):
        unreadable += forward_once(REGION, queues.queue, post=post, wait_seconds=0).unreadable
    assert post.events == [] and len(set(unreadable)) == 2
    assert queue_depth(queues.queue) == 0 and queue_depth(queues.dead_letter) == 2


def test_a_failed_post_keeps_the_message_and_a_restart_posts_the_same_event_once(fresh: None) -> None:
    block = buy_block()
    converge_capacity_events.fn(CAMPAIGN, block["CapacityReservationId"], REGION)
    queues = converge_queues.fn(REGION)
    boto3.client("sqs", region_name=REGION).set_queue_attributes(
        QueueUrl=queues.queue, Attributes={"VisibilityTimeout": "0"}
    )
    CLOCK.advance(block["EndDate"] - timedelta(minutes=40) - CLOCK.now())
    describe(block["CapacityReservationId"])  # delivered and warning, both due now

    failing = Recorder(fail=2)
    outcome = forward_once(REGION, queues.queue, post=failing, wait_seconds=1)
    assert outcome.posted == [] and len(outcome.not_posted) == 2 and queue_depth(queues.queue) == 2

    # "Restart": the real post to the Prefect server, twice for the same message (as if the first
    # forwarder died between its post and its delete): the server keeps one event per id.
    seen: list[CapserveEvent] = []

    def post_and_remember(event: CapserveEvent) -> None:
        post_event(event)
        seen.append(event)

    posted = forward_once(REGION, queues.queue, post=post_and_remember, wait_seconds=1).posted
    assert sorted(posted) == ["capserve.aws.capacity-block.delivered", "capserve.aws.capacity-block.expiration-warning"]
    warning = next(e for e in seen if e.event.endswith("expiration-warning"))
    post_event(warning)
    assert queue_depth(queues.queue) == 0
    stored = asyncio.run(_stored(str(warning.id)))
    assert len(stored) == 1 and stored[0]["resource"]["prefect.resource.id"] == f"capserve.campaign.{CAMPAIGN}"


async def _stored(event_id: str) -> list[dict[str, Any]]:
    # The sandbox's clock is days ahead of the server's: widen the filter's default "last day" window.
    wide = {"id": {"id": [event_id]}, "occurred": {"since": "2000-01-01T00:00:00Z", "until": "2100-01-01T00:00:00Z"}}
    async with get_client() as client:
        for _ in range(60):
            answer = await client._client.post("/events/filter", json={"filter": wide})
            if answer.json()["events"]:
                await asyncio.sleep(1)
                answer = await client._client.post("/events/filter", json={"filter": wide})
                return list(answer.json()["events"])
            await asyncio.sleep(0.5)
    return []


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ("{", "not JSON"),
        ("[1]", "not a JSON object"),
        (json.dumps({"source": "aws.s3", "detail-type": "Capacity Block Delivered"}), "not a Capacity Block event"),
        (json.dumps({"source": "aws.ec2", "detail-type": "Capacity Block Moved"}), "unknown Capacity Block event"),
        (json.dumps({"source": "aws.ec2", "detail-type": "Capacity Block Delivered", "detail": {}}),
         "without detail.capacity-reservation-id"),
        (json.dumps({"source": "aws.ec2", "detail-type": "Capacity Block Delivered", "time": "yesterday",
                     "detail": {"capacity-reservation-id": "cr-1"}}), "bad field"),
    ],
)
def test_read_notice_says_what_is_wrong(body: str, why: str) -> None:
    with pytest.raises(UnreadableMessage, match=why):
        read_notice(body)


def test_both_spellings_of_the_detail_type_are_read() -> None:
    for detail_type in ("Capacity Block Expiration Warning", "Capacity Block Reservation Expiration Warning"):
        notice = read_notice(json.dumps({
            "source": "aws.ec2", "detail_type": detail_type, "time": "2026-12-02T10:50:00Z",
            "detail": {"capacity-reservation-id": "cr-0123", "end-date": "2026-12-02T11:30:00Z"},
        }))
        assert notice.kind == "expiration-warning" and notice.reservation_id == "cr-0123"


def test_the_forwarder_flow_posts_what_is_queued(fresh: None) -> None:
    block = buy_block()
    converge_capacity_events.fn(CAMPAIGN, block["CapacityReservationId"], REGION)
    CLOCK.advance(block["StartDate"] - CLOCK.now())
    describe(block["CapacityReservationId"])
    assert forward_capacity_events(REGION, polls=1, wait_seconds=1) == 1
    assert queue_depth(converge_queues.fn(REGION).queue) == 0


def test_forward_events_refuses_a_bad_region_before_it_starts(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["forward-events", "--region", "not a region"])
    assert exited.value.code == 2 and "is not an AWS region name" in capsys.readouterr().err
