"""`capserve status` without a name: every campaign recorded in the home region, its block, where it is and what it
has paid so far, from the records alone."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import boto3
import pytest

from capserve.cli import main
from capserve.cli.exit_codes import ExitCode
from capserve.core.lease import Lease
from capserve.core.record import CampaignRecord, StageEntry, record_key
from capserve.core.stages import Stage, StageStatus
from capserve.core.status import campaign_line

REGION = "us-east-2"
BUCKET = "capserve-records-list"
NOW = datetime.now(UTC)


def lease(start: datetime, fee: float) -> Lease:
    return Lease(provider="ec2-capacity-block", region=REGION, availability_zone="us-east-2a", reservation_id="cr-1",
                 start=start, end=start + timedelta(days=1), instance_type="p6-b300.48xlarge", instance_count=1,
                 upfront_fee=fee)


def test_the_state_of_a_campaign_follows_its_stages_and_its_block() -> None:
    waiting = CampaignRecord.new("a", NOW).with_lease(lease(NOW + timedelta(hours=2), 2832.0), offering_id=None,
                                                      now=NOW)
    line = campaign_line(waiting, REGION, NOW)
    assert line.state == "waiting for the block (starts in 2h00m)" and line.spent_usd == 2832.0
    assert line.block.startswith("us-east-2a ") and line.block.endswith(" UTC")
    done = waiting.with_stage(Stage.TEARDOWN, StageEntry(status=StageStatus.COMPLETED))
    assert campaign_line(done, REGION, NOW).state == "torn down"
    failed = waiting.with_stage(Stage.BRING_UP, StageEntry(status=StageStatus.FAILED))
    assert campaign_line(failed, REGION, NOW).state == "failed: bring_up"
    assert campaign_line(CampaignRecord.new("b", NOW), REGION, NOW).block == "none bought"


@pytest.mark.usefixtures("sandbox")
def test_status_without_a_name_lists_every_recorded_campaign(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CAPSERVE_RECORDS__BUCKET", BUCKET)
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION})
    records = [
        CampaignRecord.new("team-a", NOW).with_lease(lease(NOW - timedelta(hours=1), 2832.0), offering_id=None,
                                                     now=NOW),
        CampaignRecord.new("team-b", NOW),
    ]
    for r in records:
        s3.put_object(Bucket=BUCKET, Key=record_key(r.campaign_id), Body=r.model_dump_json().encode())

    assert main(["status", "--region", REGION, "--json"]) == ExitCode.OK
    listed = json.loads(capsys.readouterr().out)
    assert [(c["campaign_id"], c["spent_usd"]) for c in listed] == [("team-a", 2832.0), ("team-b", 0.0)]
    assert listed[0]["state"].startswith("in its block (") and listed[1]["state"] == "no block yet"
    assert main(["status", "--region", REGION]) == ExitCode.OK
    out = capsys.readouterr().out
    assert "team-a" in out and "team-b" in out and "2,832.00" in out


def test_status_without_a_name_or_a_region_asks_for_the_region(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "CAPSERVE_RECORDS__REGION"):
        monkeypatch.delenv(name, raising=False)
    assert main(["status"]) == ExitCode.BAD_INPUT
    assert "--region" in capsys.readouterr().err
