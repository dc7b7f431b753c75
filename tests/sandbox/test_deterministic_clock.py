"""The played block's clock moves by its rule, never by the host's speed: the same parties give the same timeline.

Parties here stand for the campaign's runs (they work, then poll: sleep a span of the block) and for a stand-in's
modelled duration; each works a random wall time between its polls, as a loaded host makes them. The block
timeline must come out the same, to the microsecond, whatever those wall times were.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from capserve_sandbox.aws import patched_environ
from capserve_sandbox.clock import CLOCK, SandboxClock
from capserve_sandbox.clock_client import jumping, plugged
from capserve_sandbox.clock_server import clock_server

from capserve.tasks.the_clock import clock


def _play(seed: int) -> dict[str, list[float]]:
    """Two runs polling every 15 and 40 s of the block and a 100-s modelled duration, with random wall work."""
    sim = SandboxClock()
    sim.simulate(fast_rate=5760, near_rate=60, near=timedelta(minutes=3), hold=timedelta(minutes=2))
    sim.register([])
    origin = sim.now()
    pace = random.Random(seed)
    delays = {name: [pace.uniform(0, 0.15) for _ in range(6)] for name in ("a", "b", "model")}
    seen: dict[str, list[float]] = {"a": [], "b": [], "model": []}

    def since() -> float:
        return (sim.now() - origin).total_seconds()

    def run(name: str, poll_s: float, polls: int) -> None:
        sim.work(name)
        for index in range(polls):
            time.sleep(delays[name][index])  # the run's own work: the clock holds meanwhile
            seen[name].append(since())
            sim.sleep(name, "main", poll_s, wait_s=60)
            sim.awake(name, "main")
        seen[name].append(since())
        sim.rest(name)

    def modelled() -> None:
        until = origin + timedelta(seconds=100)
        sim.skip_to("model", until)
        while sim.now() < until:
            time.sleep(0.01)
        time.sleep(delays["model"][0])  # the stand-in acts on the instant (a pod's log line): the clock holds
        seen["model"].append(since())
        sim.skipped("model")

    # Both runs and the stand-in are parties before any of them moves (as a scheduled run is from its start).
    sim.work("a")
    sim.work("b")
    threads = [threading.Thread(target=run, args=("a", 15.0, 5)), threading.Thread(target=run, args=("b", 40.0, 3)),
               threading.Thread(target=modelled)]
    sim.skip_to("model", origin + timedelta(seconds=100))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads)
    return seen


def test_the_same_parties_play_the_same_block_timeline_whatever_the_hosts_speed() -> None:
    first, second = _play(seed=1), _play(seed=2)
    assert first == second
    assert first == {"a": [0, 15, 30, 45, 60, 75], "b": [0, 40, 80, 120], "model": [100]}


@pytest.fixture
def playing() -> Iterator[None]:
    CLOCK.reset()
    CLOCK.simulate(fast_rate=5760, near_rate=60, near=timedelta(minutes=3), hold=timedelta(minutes=2))
    with clock_server() as url, patched_environ(plugged(url)):
        yield
    CLOCK.reset()


def test_a_run_that_works_holds_the_clock_and_its_polls_land_on_their_instants(playing: None) -> None:
    waypoint = (datetime.now(UTC) + timedelta(hours=2)).replace(second=0, microsecond=0)
    clock().plan([waypoint])
    assert clock().begin_at(waypoint) == waypoint  # the clock waited at the run's time for it
    seen = []
    with clock().working():
        for delay in (0.3, 0.0, 0.5):
            time.sleep(delay)  # work a loaded host makes slow: no time of the block
            seen.append(clock().now())
            clock().sleep(15)
    assert seen == [waypoint, waypoint + timedelta(seconds=15), waypoint + timedelta(seconds=30)]


def test_unsimulated_the_campaign_reads_the_clock_the_sandboxs_aws_jumped() -> None:
    """The sandbox's AWS jumps to a reservation's start instead of waiting for it: the campaign's clock shows the
    jump too (one clock, so the stages and the reservation's window agree), and its waits stay the host's."""
    CLOCK.reset()
    try:
        with clock_server() as url, patched_environ(jumping(url)):
            CLOCK.advance(timedelta(hours=6, minutes=35))  # what capserve_sandbox.aws_ext.capacity does
            shown = clock().now()
            assert abs(shown - CLOCK.now()) < timedelta(seconds=5)
            assert shown - datetime.now(UTC) > timedelta(hours=6, minutes=30)
    finally:
        CLOCK.reset()
