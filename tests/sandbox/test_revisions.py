"""The demo's mid-block revisions: placed in the block's longest quiet stretch, published on the block's clock."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from capserve_sandbox.clock import CLOCK, SandboxClock
from capserve_sandbox.hub import HubState, local_hub
from capserve_sandbox.hub.checkpoint import TINY_K3
from capserve_sandbox.openai_server import MODEL_MARKER_FILE
from capserve_sandbox.revisions import PUBLISH_BEFORE_WATCH, REDEPLOY_ROOM, Publication, RevisionSchedule

from capserve.core.schedule import PlannedRun, expected_work, planned_runs
from capserve.core.spec import TeardownSpec
from tests.unit.test_schedule import lease

NEAR = timedelta(minutes=3)
START = datetime(2026, 12, 3, 11, 30, tzinfo=UTC)  # a block starts at 11:30 UTC


def lease_waypoints() -> tuple[list[datetime], list[tuple[datetime, datetime]]]:
    """What a 24-hour block's campaign registers: serve, drain, teardown, and where its runs are expected to work."""
    block = lease(start=START)
    planned = planned_runs("demo", block, TeardownSpec())
    return [run.scheduled_at for run in planned], expected_work(planned, block.end)


def test_revisions_go_between_serving_and_draining_each_with_room_for_its_redeploy() -> None:
    waypoints, spans = lease_waypoints()
    schedule = RevisionSchedule([True, False], near=NEAR)

    more_waypoints = schedule.place(waypoints, spans)

    good, bad = schedule.publications
    assert (good.good, bad.good) == (True, False)
    serve_ends = max(end for start, end in spans if start == START)
    drain = sorted(waypoints)[1]
    assert serve_ends < good.publish_at < good.watch_at < good.watch_at + REDEPLOY_ROOM < bad.publish_at
    assert bad.watch_at + REDEPLOY_ROOM + NEAR < drain - NEAR
    for publication in (good, bad):
        assert publication.watch_at - publication.publish_at == PUBLISH_BEFORE_WATCH
    assert more_waypoints == [good.watch_at, bad.watch_at]


def test_no_room_means_no_revision_and_nothing_added() -> None:
    start = START
    waypoints = [start, start + timedelta(hours=2)]  # a two-hour stretch cannot hold two redeploys
    schedule = RevisionSchedule([True, False], near=NEAR)
    assert schedule.place(waypoints, []) == []
    assert schedule.publications == []
    assert RevisionSchedule([], near=NEAR).place(*lease_waypoints()) == []


@pytest.fixture
def clock() -> Iterator[None]:
    CLOCK.reset()
    yield
    CLOCK.reset()


def test_the_clock_adds_the_revisions_to_the_first_registration_only(clock: None) -> None:
    schedule = RevisionSchedule([True], near=NEAR)
    CLOCK.simulate(fast_rate=5760, near_rate=60, near=NEAR, extend=schedule.place)
    waypoints, spans = lease_waypoints()

    CLOCK.register(waypoints, spans)
    window = CLOCK.schedule()
    assert window is not None

    (publication,) = schedule.publications
    assert publication.watch_at in window.waypoints
    CLOCK.register(waypoints, spans)  # a re-run registers the same again: no second plan
    assert schedule.publications == [publication]


def test_each_revision_is_published_once_when_its_time_comes(tmp_path: Path) -> None:
    root = tmp_path / "tiny-k3"
    root.mkdir()
    (root / "config.json").write_text("{}")
    states: list[HubState] = []
    with local_hub({TINY_K3.repo: root}, states=states):
        hub = states[0]
        publish_in_turn(hub)


def publish_in_turn(hub: HubState) -> None:
    first = hub.repos[TINY_K3.repo].sha
    schedule = RevisionSchedule([True, False], near=NEAR)
    schedule.place(*lease_waypoints())
    good, bad = schedule.publications

    assert schedule.publish_due(good.publish_at - timedelta(seconds=1), hub) == []
    assert schedule.publish_due(good.publish_at, hub) == [good]
    assert schedule.publish_due(good.publish_at + timedelta(minutes=5), hub) == []  # once
    assert good.sha == hub.repos[TINY_K3.repo].sha != first
    assert schedule.publish_due(bad.publish_at, hub) == [bad]
    marker = json.loads((hub.repos[TINY_K3.repo].root / MODEL_MARKER_FILE).read_text())
    assert marker["quality_accuracy"] == 0.0  # the bad one fails the quality gate
    # New weights, the same architecture: config.json (which vLLM's compile cache hashes) is as it was.
    assert (hub.repos[TINY_K3.repo].root / "config.json").read_text() == "{}"


def _a_block_with_one_revision(hold: timedelta) -> tuple[SandboxClock, tuple[PlannedRun, ...], Publication]:
    """A simulated clock holding a lease's scheduled runs and one good revision's publication."""
    sim = SandboxClock()
    schedule = RevisionSchedule([True], near=NEAR)
    sim.simulate(fast_rate=5760, near_rate=60, near=NEAR, hold=hold, extend=schedule.place)
    start = (sim.now() + timedelta(days=1)).replace(minute=30, second=0, microsecond=0)
    block = lease(start=start)
    planned = planned_runs("demo", block, TeardownSpec())
    sim.register([run.scheduled_at for run in planned], expected_work(planned, block.end))
    (publication,) = schedule.publications
    return sim, planned, publication


def test_a_redeploy_the_automation_starts_after_a_watch_begins_at_the_watchs_instant() -> None:
    """The automation starts the redeploy in wall time, after the watch's run ended: the block must wait for it
    there (neither jump to the drain nor creep with the host's seconds), so every machine plays it at the watch."""
    sim, planned, publication = _a_block_with_one_revision(hold=timedelta(minutes=2))
    for index, waypoint in enumerate(sorted(run.scheduled_at for run in planned)):
        if waypoint > publication.watch_at:
            break
        assert sim.started(waypoint, f"run-{index}", wait_s=60)[0]
        sim.rest(f"run-{index}")

    assert sim.started(publication.watch_at, "watcher", wait_s=60)[0]
    sim.work("watcher")
    sim.rest("watcher")
    time.sleep(0.5)  # the automation's wall seconds: the redeploy's run is not there yet
    assert sim.now() == publication.watch_at
    assert sim.work("redeploy") == publication.watch_at
    sim.rest("redeploy")
    assert sim.now() > publication.watch_at  # the redeploy done, the block goes on


def test_a_watch_that_starts_nothing_holds_the_block_no_longer_than_the_hold() -> None:
    sim, _, publication = _a_block_with_one_revision(hold=timedelta(seconds=0.3))
    sim.advance(publication.watch_at - sim.now())
    assert sim.started(publication.watch_at, "watcher", wait_s=60)[0]
    sim.rest("watcher")
    time.sleep(1.2)  # past the hold (the liveness check runs once a second)
    assert sim.now() > publication.watch_at


def test_the_watches_runs_are_scheduled_apart_so_each_takes_the_watchers_slot_in_the_blocks_order() -> None:
    """Both watch runs within one worker prefetch race for the hub-watcher deployment's one slot: a later watch
    that wins it waits for the clock, which waits at the earlier watch for a run that cannot start (a demo lost
    its good revision so)."""
    sim = SandboxClock()
    schedule = RevisionSchedule([True, False], near=NEAR)
    sim.simulate(fast_rate=5760, near_rate=60, near=NEAR, hold=timedelta(minutes=2), extend=schedule.place)
    start = (sim.now() + timedelta(days=1)).replace(minute=30, second=0, microsecond=0)
    block = lease(start=start)
    planned = planned_runs("demo", block, TeardownSpec())
    sim.register([run.scheduled_at for run in planned], expected_work(planned, block.end))

    good, bad = schedule.publications
    apart = sim.wall_time_to_schedule(bad.watch_at) - sim.wall_time_to_schedule(good.watch_at)
    assert apart >= timedelta(seconds=60)  # two of the worker's 30-s prefetches
