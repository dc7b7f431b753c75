"""Runs started for a recorded lease never buy: a serve run that fires after its block ended, or one a worker
starts after a person cancelled it, ends without reaching the capacity APIs."""

from __future__ import annotations

from datetime import timedelta

import boto3
from capserve_sandbox.aws_ext import capacity as ext
from prefect.client.orchestration import get_client
from prefect.client.schemas.objects import StateType
from prefect.flow_engine import run_flow
from prefect.states import Cancelled, Running, Scheduled

from capserve.core.lease import Lease
from capserve.core.record import CampaignRecord, record_key
from capserve.flows.window import serve
from capserve.tasks.scheduling import cancelled_before_start
from tests.aws.test_orphan_teardown import BUCKET, NOW, REGION, records, spec

__all__ = ["records"]  # the fixture, used by name

CAPACITY_CALLS = ("describe_capacity_block_offerings", "purchase_capacity_block")


def _store(campaign: str, *, start_hours: float, end_hours: float) -> Lease:
    lease = Lease(
        provider="ec2-capacity-block", region=REGION, availability_zone="us-east-2a", reservation_id="cr-0abc",
        start=NOW + timedelta(hours=start_hours), end=NOW + timedelta(hours=end_hours),
        instance_type="p6-b300.48xlarge", instance_count=1, upfront_fee=1.0,
    )
    record = CampaignRecord.new(campaign, NOW).with_spec(spec(campaign), now=NOW).with_lease(
        lease, offering_id=None, now=NOW
    )
    boto3.client("s3", region_name=REGION).put_object(
        Bucket=BUCKET, Key=record_key(campaign), Body=record.model_dump_json().encode()
    )
    return lease


def _capacity_calls() -> list[str]:
    return [c.operation for op in CAPACITY_CALLS for c in ext.calls(op, include_dry_run=True)]


def test_a_serve_run_that_fires_after_its_block_ended_buys_nothing(records: None) -> None:
    _store("fired-late", start_hours=-30, end_hours=-6)  # the worker was down for a day
    state = serve("fired-late", REGION, "cr-0abc", return_state=True)
    assert (state.type, state.name) == (StateType.CANCELLED, "Expired"), state
    assert "nothing was bought" in (state.message or "")
    assert _capacity_calls() == []


def test_a_serve_run_started_after_it_was_cancelled_does_nothing(records: None) -> None:
    _store("cancelled-then-started", start_hours=-1, end_hours=23)
    parameters = {"campaign_id": "cancelled-then-started", "region": REGION, "reservation_id": "cr-0abc"}
    with get_client(sync_client=True) as client:
        run = client.create_flow_run(serve, parameters=parameters, state=Scheduled())
        client.set_flow_run_state(run.id, Cancelled(message="cancelled in the UI"), force=True)
        run = client.read_flow_run(run.id)
    # What a worker that had fetched the run before the cancel does: it starts the run anyway.
    state = run_flow(serve, flow_run=run, parameters=parameters, return_type="state")
    assert (state.type, state.name) == (StateType.CANCELLED, "Cancelled"), state
    assert "cancelled at" in (state.message or "")
    assert _capacity_calls() == []


def test_a_run_never_cancelled_may_act(records: None) -> None:
    with get_client(sync_client=True) as client:
        run = client.create_flow_run(serve, parameters={"campaign_id": "x", "region": REGION, "reservation_id": "y"},
                                     state=Scheduled())
        client.set_flow_run_state(run.id, Running(), force=True)
    assert cancelled_before_start(str(run.id)) == ""
    assert cancelled_before_start(None) == ""
