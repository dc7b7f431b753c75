"""The sandbox's played block through the product's port: the clock the campaign asks, the runs it schedules, its
polls, AWS's end − 30 min."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from capserve_sandbox.aws import patched_environ
from capserve_sandbox.aws_ext import capacity as ext
from capserve_sandbox.clock import CLOCK
from capserve_sandbox.clock_client import plugged
from capserve_sandbox.clock_server import clock_server

from capserve.core.errors import PermanentError
from capserve.core.schedule import ScheduledStage, expected_work, planned_runs
from capserve.core.spec import TeardownSpec
from capserve.tasks.the_clock import CLOCK_ENV, clock
from tests.aws.test_moto_ext_capacity import buy, offerings

REGION = "us-east-2"



@pytest.fixture
def simulated(sandbox: None) -> Iterator[str]:
    ext.reset()
    CLOCK.reset()
    CLOCK.simulate(fast_rate=5760, near_rate=60, near=timedelta(minutes=3), hold=timedelta(minutes=5))
    with clock_server() as url, patched_environ(plugged(url)):
        yield url
    ext.reset()
    CLOCK.reset()


def test_without_a_clock_url_the_campaign_clock_is_the_hosts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CLOCK_ENV, raising=False)
    before = datetime.now(UTC)
    assert before <= clock().now() <= datetime.now(UTC)
    # A scheduled run's start has nothing to wait for: Prefect started it at its time.
    assert before <= clock().begin_at(before + timedelta(days=1)) <= datetime.now(UTC)


def test_the_clock_keeps_wall_time_until_the_campaign_registers_its_runs(simulated: str) -> None:
    # Planning and purchase happen before any waypoint: they must not cost hours of the block.
    assert abs(clock().now() - datetime.now(UTC)) < timedelta(seconds=5)
    start = datetime.now(UTC).replace(hour=11, minute=30, second=0, microsecond=0) + timedelta(days=1)
    lease = _lease(start)
    planned = planned_runs("c1", lease, TeardownSpec())
    clock().plan([run.scheduled_at for run in planned], expected_work(planned, lease.end))
    walls = {run.stage: clock().wall_time_to_schedule(run.scheduled_at) for run in planned}
    # The whole block, purchase to teardown, is scheduled within minutes of wall time, in the runs' order.
    assert walls[ScheduledStage.TEARDOWN] - datetime.now(UTC) < timedelta(minutes=4)
    assert sorted(walls.values()) == [walls[run.stage] for run in sorted(planned, key=lambda run: run.scheduled_at)]
    # Nothing works: the clock has jumped to the first run's time, and holds there until that run starts.
    first = min(run.scheduled_at for run in planned)
    assert clock().now() == first
    time.sleep(0.3)
    assert clock().now() == first


def test_a_run_a_busy_machine_starts_late_still_begins_at_its_time_on_the_block(simulated: str) -> None:
    start = (datetime.now(UTC) + timedelta(hours=2)).replace(second=0, microsecond=0)
    clock().plan([start])
    # Prefect starts the run at this wall time; the machine is busy and its process gets going 5 s later.
    _sleep_until(clock().wall_time_to_schedule(start) + timedelta(seconds=5))
    assert clock().now() == start  # the clock waits at the run's time …
    assert clock().begin_at(start) == start  # … until the run says it has begun: on time on the block
    with clock().working():
        time.sleep(0.3)  # the run gets going, works: the clock holds
        assert clock().now() == start


def test_a_run_that_an_earlier_run_made_early_waits_for_its_time(simulated: str) -> None:
    start = (datetime.now(UTC) + timedelta(hours=2)).replace(second=0, microsecond=0)
    drain = start + timedelta(hours=1)
    clock().plan([start, drain])
    assert clock().begin_at(start) == start
    waiting: list[datetime] = []
    early = threading.Thread(target=lambda: waiting.append(clock().begin_at(drain)))
    with clock().working():
        early.start()  # Prefect started the drain run while the serve run still works: it waits for the clock
        time.sleep(0.5)
        assert waiting == [] and clock().now() == start
    early.join(timeout=60)
    assert waiting == [drain]


def _sleep_until(wall: datetime) -> None:
    time.sleep(max((wall - datetime.now(UTC)).total_seconds(), 0))


def test_a_waypoint_that_would_move_a_scheduled_run_is_refused_with_a_reason(simulated: str) -> None:
    start = datetime.now(UTC) + timedelta(days=1)
    with clock().working():  # the clock holds where the campaign schedules
        clock().plan([start + timedelta(hours=20)])
        with pytest.raises(PermanentError, match="would move the waypoint"):
            clock().plan([start])  # its slow stretch before the registered one would move it


def test_aws_terminates_what_still_runs_at_end_minus_30_on_the_simulated_clock(simulated: str) -> None:
    ec2 = boto3.client("ec2", region_name=REGION)
    bought = buy(ec2, offerings(ec2)[0])
    terminated: list[dict[str, Any]] = []
    ext.TERMINATION_HOOKS.append(lambda r: terminated.append(r) or ["node-gpu-0"])
    try:
        CLOCK.advance(bought["EndDate"] - timedelta(minutes=31) - CLOCK.now())
        assert ext.terminate_due() == [] and terminated == []
        CLOCK.advance(timedelta(minutes=2))
        done = ext.terminate_due()
        assert [(d.reservation_id, d.terminated) for d in done] == [(bought["CapacityReservationId"], ("node-gpu-0",))]
        assert done[0].at == bought["EndDate"] - timedelta(minutes=30)
        assert ext.terminate_due() == []  # once
    finally:
        ext.TERMINATION_HOOKS.clear()


def _lease(start: datetime) -> Any:
    from capserve.core.lease import Lease

    return Lease(
        provider="ec2-capacity-block", region=REGION, availability_zone=f"{REGION}a", reservation_id="cr-0abc",
        start=start, end=start + timedelta(days=1), instance_type="p6-b300.48xlarge", instance_count=1,
        upfront_fee=1.0,
    )


def _begin_a_run() -> datetime:
    """Play a block, and start its one waypoint's run: the test is that run from here on."""
    waypoint = (datetime.now(UTC) + timedelta(hours=2)).replace(second=0, microsecond=0)
    clock().plan([waypoint])
    return clock().begin_at(waypoint)


def test_on_a_played_block_eks_takes_the_modelled_minutes_and_the_polls_see_it_at_its_instant(simulated: str) -> None:
    from capserve_sandbox.aws_ext import eks as eks_ext

    eks_ext.BEHAVIOUR.modelled = eks_ext.ModelledDurations(control_plane_s=900, system_nodes_s=300, gpu_nodes_s=1800)
    eks_ext.BEHAVIOUR.describes_until_active = 1  # the unmodelled rule would make it ACTIVE at the first look
    ec2, eks = boto3.client("ec2", region_name=REGION), boto3.client("eks", region_name=REGION)
    vpc = ec2.create_vpc(CidrBlock="10.8.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.8.0.0/20", AvailabilityZone=f"{REGION}a")["Subnet"]["SubnetId"]
    try:
        before = _begin_a_run()
        with clock().working():
            eks.create_cluster(name="played", roleArn="arn:aws:iam::123456789012:role/x",
                               resourcesVpcConfig={"subnetIds": [subnet]})
            assert CLOCK.stops() == [before + timedelta(seconds=900)]  # the clock held while the run worked
            polls = 0
            while eks.describe_cluster(name="played")["cluster"]["status"] != "ACTIVE":
                polls += 1
                assert polls < 100, "the control plane never became ACTIVE"
                clock().sleep(15)
            assert (polls, clock().now() - before) == (60, timedelta(seconds=900))
            assert CLOCK.stops() == []  # landed on, and passed
    finally:
        eks_ext.BEHAVIOUR = eks_ext.Behaviour()


def test_a_boto3_waiter_on_a_played_block_pauses_on_the_block_not_on_this_host(simulated: str) -> None:
    """A waiter's 15-s pause is 15 s of the block: the cluster ACTIVE at 900 s is seen at 900 s exactly."""
    from capserve_sandbox.aws_ext import eks as eks_ext

    from capserve.tasks.cluster.eks import existing_cluster

    eks_ext.BEHAVIOUR.modelled = eks_ext.ModelledDurations(control_plane_s=900, system_nodes_s=300, gpu_nodes_s=1800)
    ec2, eks = boto3.client("ec2", region_name=REGION), boto3.client("eks", region_name=REGION)
    vpc = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.9.0.0/20", AvailabilityZone=f"{REGION}a")["Subnet"]["SubnetId"]
    try:
        before = _begin_a_run()
        with clock().working():
            eks.create_cluster(name="polled", roleArn="arn:aws:iam::123456789012:role/x",
                               resourcesVpcConfig={"subnetIds": [subnet]})
            found = existing_cluster.fn("polled", REGION, timeout_s=3600, poll_s=15)
            seen_after = clock().now() - before
    finally:
        eks_ext.BEHAVIOUR = eks_ext.Behaviour()
    assert found.name == "polled"
    assert seen_after == timedelta(seconds=900)
