"""The runs AWS's expiration warning starts (drain, then teardown) act only on the block that was warned about."""

from __future__ import annotations

import asyncio
from typing import Any

import boto3
import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.objects import StateType
from prefect.events.worker import EventsWorker

from capserve.core.record import CampaignRecord, record_key
from capserve.core.settings import Settings
from capserve.core.stages import Stage
from capserve.core.teardown.result import TeardownResult
from capserve.flows import window
from capserve.flows.window import drain, scheduled_teardown
from capserve.tasks import settings as settings_module
from capserve.tasks.settings import process_settings
from tests.aws.test_orphan_teardown import BUCKET, REGION, records, store_record

__all__ = ["records"]  # the fixture, used by name


def test_a_late_warning_about_a_block_the_campaign_no_longer_holds_does_nothing(records: None) -> None:
    store_record("moved-on")  # the campaign holds cr-0abc now; the warning is about its previous block
    for flow in (drain, scheduled_teardown):
        state = flow("moved-on", REGION, reservation_id="cr-0previous", reason="expiration-warning",
                     return_state=True)
        assert (state.type, state.name) == (StateType.CANCELLED, "Stale"), state
        assert "cr-0abc" in (state.message or "")
    body = boto3.client("s3", region_name=REGION).get_object(Bucket=BUCKET, Key=record_key("moved-on"))["Body"]
    record = CampaignRecord.model_validate_json(body.read())
    assert record.fired == {} and record.stages == {}  # nothing drained, nothing stamped


def test_a_warning_about_the_held_block_drains_it_without_posing_as_the_scheduled_drain(records: None) -> None:
    store_record("warned")
    result = drain("warned", REGION, reservation_id="cr-0abc", reason="expiration-warning")
    assert result.note == "no cluster of the campaign was found"  # type: ignore[union-attr]
    body = boto3.client("s3", region_name=REGION).get_object(Bucket=BUCKET, Key=record_key("warned"))["Body"]
    record = CampaignRecord.model_validate_json(body.read())
    assert record.stages[Stage.DRAIN].detail.startswith("expiration-warning: ")
    assert record.fired == {}  # the report's schedule shows when the lease's own drain run fired, not this one


def test_the_scheduled_teardown_sends_a_teardown_event_saying_why_and_what_it_deleted(records: None) -> None:
    store_record("torn-down")
    result = scheduled_teardown("torn-down", REGION, reservation_id="cr-0abc", reason="expiration-warning")
    assert isinstance(result, TeardownResult), result
    EventsWorker.drain_all()
    [event] = asyncio.run(_teardown_events("torn-down"))
    assert event["event"] == "capserve.teardown.done"
    assert event["payload"]["reason"] == "expiration-warning"
    assert event["payload"]["deleted_resources"] == list(result.deleted)[:50]
    assert {r["prefect.resource.id"] for r in event["related"]} >= {"capserve.reservation.cr-0abc"}


def test_a_scheduled_teardown_reads_the_environments_settings_once_and_hands_them_down(
    records: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run reads the environment's settings at its start (they say where the record is) and puts the recorded
    spec's on top; the teardown it runs is given them and reads the environment no more (it read them twice)."""
    store_record("read-once")
    process_settings()  # what is fixed per process (retries, clients) is read once per process, before this run
    real, reads = settings_module.settings_from_environment, []

    def counted(environ: Any = None) -> Settings:
        reads.append(environ)
        return real(environ)

    monkeypatch.setattr(settings_module, "settings_from_environment", counted)
    monkeypatch.setattr(window, "settings_from_environment", counted)
    result = scheduled_teardown("read-once", REGION, reservation_id="cr-0abc", reason="expiration-warning")
    assert isinstance(result, TeardownResult), result
    assert len(reads) == 1


async def _teardown_events(campaign: str) -> list[dict[str, Any]]:
    """The campaign's teardown events on the session's server (the persister writes in batches: wait, boundedly)."""
    query = {"filter": {
        "event": {"prefix": ["capserve.teardown."]},
        "resource": {"id": [f"capserve.campaign.{campaign}"]},
    }, "limit": 10}
    async with get_client() as client:
        for _ in range(60):
            found = (await client._client.post("/events/filter", json=query)).json()["events"]
            if found:
                return list(found)
            await asyncio.sleep(0.5)
    return []
