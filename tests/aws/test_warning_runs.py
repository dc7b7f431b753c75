"""The runs AWS's expiration warning starts (drain, then teardown) act only on the block that was warned about."""

from __future__ import annotations

import boto3
from prefect.client.schemas.objects import StateType

from capserve.core.record import CampaignRecord, record_key
from capserve.core.stages import Stage
from capserve.flows.window import drain, scheduled_teardown
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
