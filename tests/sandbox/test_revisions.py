"""The demo's mid-block revisions: placed in the block's longest quiet stretch, published on the block's clock."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from capserve_sandbox.clock import CLOCK
from capserve_sandbox.hub import HubState, local_hub
from capserve_sandbox.hub.checkpoint import TINY_K3
from capserve_sandbox.openai_server import MODEL_MARKER_FILE
from capserve_sandbox.revisions import PUBLISH_BEFORE_WATCH, REDEPLOY_SPAN, RevisionSchedule

from capserve.core.schedule import expected_work, planned_runs
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

    more_waypoints, more_spans = schedule.place(waypoints, spans)

    good, bad = schedule.publications
    assert (good.good, bad.good) == (True, False)
    serve_ends = max(end for start, end in spans if start == START)
    drain = sorted(waypoints)[1]
    assert serve_ends < good.publish_at < good.watch_at < good.watch_at + REDEPLOY_SPAN < bad.publish_at
    assert bad.watch_at + REDEPLOY_SPAN + NEAR < drain - NEAR
    for publication in (good, bad):
        # published inside the slow stretch around its watch, so the ticker is on time
        assert publication.watch_at - publication.publish_at == PUBLISH_BEFORE_WATCH < NEAR
    assert more_waypoints == [good.watch_at, bad.watch_at]
    assert more_spans == [(p.watch_at, p.watch_at + REDEPLOY_SPAN) for p in (good, bad)]


def test_no_room_means_no_revision_and_nothing_added() -> None:
    start = START
    waypoints = [start, start + timedelta(hours=2)]  # a two-hour stretch cannot hold two redeploys
    schedule = RevisionSchedule([True, False], near=NEAR)
    assert schedule.place(waypoints, []) == ([], [])
    assert schedule.publications == []
    assert RevisionSchedule([], near=NEAR).place(*lease_waypoints()) == ([], [])


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
    assert window.rate_at(publication.publish_at) == 60  # near wall time from publication to redeploy's end
    assert window.rate_at(publication.watch_at + REDEPLOY_SPAN - timedelta(minutes=1)) == 60
    assert window.rate_at(publication.watch_at + REDEPLOY_SPAN + timedelta(hours=1)) == 5760
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
