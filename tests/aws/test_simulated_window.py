"""The sandbox's simulated window: the clock the campaign reads, the waypoints it registers, AWS's end − 30 min."""

from __future__ import annotations

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
from capserve_sandbox.warp import WarpedWindow

from capserve.core.errors import PermanentError
from capserve.core.schedule import ScheduledStage, planned_runs, slow_spans
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
    assert clock().pace() is None
    # A scheduled run's start has nothing to wait for: Prefect started it at its time.
    assert before <= clock().begin_at(before + timedelta(days=1)) <= datetime.now(UTC)


def test_the_clock_keeps_wall_time_until_the_campaign_registers_its_runs(simulated: str) -> None:
    # Planning and purchase happen before any waypoint: they must not cost hours of the block.
    assert abs(clock().now() - datetime.now(UTC)) < timedelta(seconds=5)
    start = datetime.now(UTC).replace(hour=11, minute=30, second=0, microsecond=0) + timedelta(days=1)
    lease = _lease(start)
    planned = planned_runs("c1", lease, TeardownSpec())
    window = _register([run.scheduled_at for run in planned], slow_spans(planned, lease.end))
    assert window.simulated and window.fast_rate == 5760
    walls = {run.stage: window.to_wall(run.scheduled_at) for run in planned}
    # The whole block, purchase to teardown, in minutes of wall time; each run at its simulated minute.
    assert walls[ScheduledStage.TEARDOWN] - datetime.now(UTC) < timedelta(minutes=4)
    unheld = window.model_copy(update={"gates": ()})  # as when every run says it has begun the moment it fires
    for run in planned:
        assert abs(unheld.to_sim(walls[run.stage]) - run.scheduled_at) < timedelta(seconds=1)
        assert run.scheduled_at in window.gates  # and when one is late, the clock waits for it there
        assert window.rate_at(run.scheduled_at) == 60  # near wall time where a run starts
    # The serve run's work and the hard teardown run slowly too.
    assert window.rate_at(lease.start + timedelta(minutes=60)) == 60
    assert window.rate_at(lease.end - timedelta(minutes=31)) == 60
    assert window.rate_at(lease.start + timedelta(hours=8)) == 5760


def test_a_run_a_busy_machine_starts_late_still_begins_at_its_time_on_the_block(simulated: str) -> None:
    start = (datetime.now(UTC) + timedelta(hours=2)).replace(second=0, microsecond=0)
    window = _register([start])
    # Prefect starts the run at this wall time; the machine is busy and its process gets going 5 s later,
    # which at the near rate (60×) would be 5 minutes of the block, and far more once the clock runs fast.
    _sleep_until(window.to_wall(start) + timedelta(seconds=5))
    assert clock().now() == start  # the clock waits at the run's time …
    assert clock().begin_at(start) == start  # … until the run says it has begun: on time on the block
    assert _window().gates == ()  # then it runs on


def test_a_run_that_an_earlier_hold_made_early_waits_for_its_time(simulated: str) -> None:
    start = (datetime.now(UTC) + timedelta(hours=2)).replace(second=0, microsecond=0)
    drain = start + timedelta(hours=1)
    window = _register([start, drain])
    _sleep_until(window.to_wall(start) + timedelta(seconds=3))
    assert clock().begin_at(start) == start  # three seconds late: every later waypoint comes 3 s later
    _sleep_until(window.to_wall(drain))  # where Prefect starts the drain run (scheduled before the hold)
    assert clock().begin_at(drain) == drain  # it waits for the clock, which waits at drain for it


def _window() -> WarpedWindow:
    return clock().window()  # type: ignore[attr-defined, no-any-return]  # the sandbox's HttpClock


def _register(waypoints: list[datetime], spans: list[tuple[datetime, datetime]] | None = None) -> WarpedWindow:
    clock().plan(waypoints, spans or [])
    return _window()


def _sleep_until(wall: datetime) -> None:
    time.sleep(max((wall - datetime.now(UTC)).total_seconds(), 0))


def test_a_waypoint_that_would_move_a_scheduled_run_is_refused_with_a_reason(simulated: str) -> None:
    start = datetime.now(UTC) + timedelta(days=1)
    _register([start + timedelta(hours=20)])
    with pytest.raises(PermanentError, match="would move the waypoint"):
        _register([], [(start, start + timedelta(hours=2))])


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


def _play_past_a_waypoint() -> None:
    """Make the clock play a block, and let its one waypoint's run start: no gate holds the clock afterwards
    (it would stop there, at most ``hold``, whatever the test is waiting for)."""
    waypoint = (datetime.now(UTC) + timedelta(hours=2)).replace(second=0, microsecond=0)
    _register([waypoint])
    clock().begin_at(waypoint)


def test_the_clock_knows_while_a_run_works_on_the_block(simulated: str) -> None:
    _register([(datetime.now(UTC) + timedelta(hours=2)).replace(second=0, microsecond=0)])
    with clock().working():
        assert _window().busy
    assert not _window().busy


def test_on_a_played_block_eks_takes_the_modelled_minutes_and_the_clock_skips_through_them(simulated: str) -> None:
    from capserve_sandbox.aws_ext import eks as eks_ext

    _play_past_a_waypoint()
    eks_ext.BEHAVIOUR.modelled = eks_ext.ModelledDurations(control_plane_s=900, system_nodes_s=300, gpu_nodes_s=1800)
    eks_ext.BEHAVIOUR.describes_until_active = 1  # the unmodelled rule would make it ACTIVE at the first look
    ec2, eks = boto3.client("ec2", region_name=REGION), boto3.client("eks", region_name=REGION)
    vpc = ec2.create_vpc(CidrBlock="10.8.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.8.0.0/20", AvailabilityZone=f"{REGION}a")["Subnet"]["SubnetId"]
    try:
        with clock().working():  # the serve run works: without the skip, 15 minutes at near wall time
            before = CLOCK.now()
            eks.create_cluster(name="played", roleArn="arn:aws:iam::123456789012:role/x",
                               resourcesVpcConfig={"subnetIds": [subnet]})
            after = CLOCK.now()
            skip = _window().skip_until
            # The skip ends 900 s after the create (a busy machine may make the call itself last minutes here).
            assert skip is not None and before + timedelta(seconds=900) <= skip <= after + timedelta(seconds=900)
            deadline = time.monotonic() + 120  # a bound against a hang, not a timing check
            while eks.describe_cluster(name="played")["cluster"]["status"] != "ACTIVE":
                assert time.monotonic() < deadline, "the control plane never became ACTIVE"
                time.sleep(0.05)
            assert CLOCK.now() - before >= timedelta(seconds=900)
            assert _window().skip_until is None  # skipped through: the clock is as before
    finally:
        eks_ext.BEHAVIOUR = eks_ext.Behaviour()


def test_a_poll_on_a_played_block_waits_its_interval_on_the_block_not_on_this_host(simulated: str) -> None:
    """A 15-s poll at 60 simulated seconds per wall second would see a control plane that is ACTIVE at 15 min
    only a quarter of an hour later: the pause is 15 s of the block."""
    from capserve_sandbox.aws_ext import eks as eks_ext

    from capserve.tasks.cluster.eks import existing_cluster

    _play_past_a_waypoint()
    eks_ext.BEHAVIOUR.modelled = eks_ext.ModelledDurations(control_plane_s=900, system_nodes_s=300, gpu_nodes_s=1800)
    ec2, eks = boto3.client("ec2", region_name=REGION), boto3.client("eks", region_name=REGION)
    vpc = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.9.0.0/20", AvailabilityZone=f"{REGION}a")["Subnet"]["SubnetId"]
    try:
        with clock().working():
            before = CLOCK.now()
            eks.create_cluster(name="polled", roleArn="arn:aws:iam::123456789012:role/x",
                               resourcesVpcConfig={"subnetIds": [subnet]})
            found = existing_cluster.fn("polled", REGION, timeout_s=3600, poll_s=15)
            seen_after = CLOCK.now() - before
    finally:
        eks_ext.BEHAVIOUR = eks_ext.Behaviour()
    assert found.name == "polled"
    # ACTIVE at 900 s; seen within a few polls of it (each poll's round trip also runs at 60×, so a busy machine
    # adds minutes), not the 15 minutes a 15-s pause on this host puts after it.
    assert timedelta(seconds=900) <= seen_after < timedelta(seconds=900 + 450), seen_after
