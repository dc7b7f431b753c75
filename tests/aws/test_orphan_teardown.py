"""teardown-orphan on the session's Prefect server and the AWS sandbox: a crashed campaign run is torn down
only when no other run of its campaign is live; otherwise (or when unsure) nothing is deleted.

The runs are made through the Prefect API (a crashed ``serve`` run, a live run of the same campaign), the
campaign's record is in moto's S3; the flow under test is ``capserve.flows.window.teardown_orphan``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from capserve_sandbox.aws import moto_sandbox
from prefect.client.orchestration import get_client
from prefect.client.schemas.objects import State
from prefect.states import Cancelled, Crashed, Running, Scheduled

from capserve.core.lease import Lease
from capserve.core.record import CampaignRecord, record_key
from capserve.core.schedule import campaign_tag
from capserve.core.spec import CampaignSpec, load_spec
from capserve.core.teardown.result import TeardownResult
from capserve.flows.window import teardown_orphan

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kimi-k3-sandbox.yaml"
REGION = "us-east-2"
BUCKET = "capserve-records-orphans"
NOW = datetime.now(UTC)


MADE: list[str] = []


@pytest.fixture
def records(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with moto_sandbox(REGION):
        monkeypatch.setenv("CAPSERVE_RECORDS__BUCKET", BUCKET)
        monkeypatch.setenv("CAPSERVE_RECORDS__REGION", REGION)
        boto3.client("s3", region_name=REGION).create_bucket(
            Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION}
        )
        yield
    # The session's server is shared: leave no run of ours Running or Scheduled for other tests to find.
    with get_client(sync_client=True) as client:
        while MADE:
            client.set_flow_run_state(uuid.UUID(MADE.pop()), Cancelled(), force=True)


def spec(campaign: str) -> CampaignSpec:
    data = load_spec(EXAMPLE).model_dump(mode="json")
    data["name"] = campaign
    return CampaignSpec.model_validate(data)


def store_record(campaign: str) -> None:
    lease = Lease(
        provider="ec2-capacity-block", region=REGION, availability_zone="us-east-2a", reservation_id="cr-0abc",
        start=NOW - timedelta(hours=1), end=NOW + timedelta(days=1), instance_type="p6-b300.48xlarge",
        instance_count=1, upfront_fee=1.0,
    )
    record = CampaignRecord.new(campaign, NOW).with_spec(spec(campaign), now=NOW).with_lease(
        lease, offering_id=None, now=NOW
    )
    boto3.client("s3", region_name=REGION).put_object(
        Bucket=BUCKET, Key=record_key(campaign), Body=record.model_dump_json().encode()
    )


def make_run(flow_name: str, parameters: dict[str, Any], state: State, tags: list[str] | None = None) -> str:
    with get_client(sync_client=True) as client:
        flow_id = client.create_flow_from_name(flow_name)
        deployment = client.create_deployment(flow_id, f"orphan-test-{uuid.uuid4().hex[:8]}")
        run = client.create_flow_run_from_deployment(deployment, parameters=parameters, tags=tags or [])
        client.set_flow_run_state(run.id, state, force=True)
    MADE.append(str(run.id))
    return str(run.id)


def crashed_serve_run(campaign: str) -> str:
    return make_run("serve", {"campaign_id": campaign, "region": REGION, "reservation_id": "cr-0abc"}, Crashed())


def test_a_crashed_run_whose_campaign_has_no_live_run_is_torn_down(records: None) -> None:
    store_record("orphan-alone")
    # The lease's drain, scheduled for the end of the block, is not a reason to wait; nor is another campaign.
    window = {"campaign_id": "orphan-alone", "region": REGION, "reservation_id": "cr-0abc"}
    make_run("drain", window, Scheduled(scheduled_time=NOW + timedelta(days=1)), [campaign_tag("orphan-alone")])
    make_run("drain", {**window, "campaign_id": "orphan-other"}, Running(), [campaign_tag("orphan-other")])
    done = teardown_orphan(crashed_serve_run("orphan-alone"))
    assert isinstance(done, TeardownResult), done
    assert (done.campaign_id, done.region, done.reason) == ("orphan-alone", REGION, "orphan")


def test_a_live_run_of_the_campaign_leaves_everything_standing(records: None) -> None:
    store_record("orphan-busy")
    crashed = crashed_serve_run("orphan-busy")
    live = make_run("campaign", {"spec": spec("orphan-busy").model_dump(mode="json")}, Running())
    ended = teardown_orphan(crashed, return_state=True)
    assert (ended.type.value, ended.name) == ("CANCELLED", "LeftAlone"), ended
    assert live in (ended.message or "") and "nothing was torn down" in (ended.message or "")


def test_a_run_that_is_not_crashed_keeps_its_campaign(records: None) -> None:
    store_record("orphan-healthy")
    healthy = make_run("serve", {"campaign_id": "orphan-healthy", "region": REGION, "reservation_id": "cr-0abc"},
                       Running())
    ended = teardown_orphan(healthy, return_state=True)  # started by hand with the wrong id
    assert (ended.type.value, ended.name) == ("CANCELLED", "LeftAlone"), ended
    assert healthy in (ended.message or "")


def test_a_run_it_cannot_read_for_sure_is_not_torn_down(records: None) -> None:
    crashed = make_run("campaign", {"spec": {"name": "half-a-spec"}}, Crashed())
    ended = teardown_orphan(crashed, return_state=True)
    assert (ended.type.value, ended.name) == ("CANCELLED", "Unsure"), ended
    assert "no longer validates" in (ended.message or "")
    no_record = teardown_orphan(crashed_serve_run("orphan-unknown"), return_state=True)
    assert no_record.type.value == "FAILED" and "no record of campaign" in (no_record.message or ""), no_record
