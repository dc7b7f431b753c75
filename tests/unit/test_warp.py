"""The simulated window's clock: a 24 h block plays in minutes, every waypoint lands at its time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from capserve_sandbox.warp import WarpedWindow

WALL0 = datetime(2026, 12, 1, 4, 0, tzinfo=UTC)
START = datetime(2026, 12, 1, 11, 30, tzinfo=UTC)
END = START + timedelta(days=1)
WAYPOINTS = (START, END - timedelta(minutes=45), END - timedelta(minutes=40), END - timedelta(minutes=35),
             END - timedelta(minutes=30))


def window() -> WarpedWindow:
    return WarpedWindow(anchor_wall=WALL0, anchor_sim=START - timedelta(minutes=10), waypoints=WAYPOINTS)


def test_a_whole_block_plays_in_a_few_minutes_of_wall_time() -> None:
    clock = window()
    played = clock.to_wall(END) - clock.to_wall(START - timedelta(minutes=10))
    assert timedelta(minutes=1) < played < timedelta(minutes=3)


def test_near_a_waypoint_a_few_wall_seconds_are_about_a_simulated_minute() -> None:
    clock = window()
    for point in WAYPOINTS:
        at = clock.to_wall(point)
        assert abs((clock.to_sim(at) - point).total_seconds()) < 1e-3  # microsecond rounding
        late = clock.to_sim(at + timedelta(seconds=3))  # a worker's poll plus a process start
        assert timedelta(0) < late - point < timedelta(minutes=1, seconds=1)


def test_between_waypoints_the_clock_runs_fast() -> None:
    clock = window()
    noon_wall = clock.to_wall(START + timedelta(hours=12))
    assert clock.to_sim(noon_wall + timedelta(seconds=10)) - (START + timedelta(hours=12)) == timedelta(hours=4)


def test_wall_and_simulated_time_map_back_and_forth() -> None:
    clock = window()
    for minutes in (0, 5, 9, 10, 11, 600, 1400, 1405, 1410, 1440):
        sim = START - timedelta(minutes=10) + timedelta(minutes=minutes)
        assert abs((clock.to_sim(clock.to_wall(sim)) - sim).total_seconds()) < 1e-3


def test_adding_waypoints_never_moves_one_already_scheduled() -> None:
    clock = WarpedWindow(anchor_wall=WALL0, anchor_sim=START, waypoints=(START + timedelta(hours=2),))
    later = clock.with_waypoints([START + timedelta(hours=5)], now_wall=WALL0 + timedelta(seconds=1))
    assert later.to_wall(START + timedelta(hours=2)) == clock.to_wall(START + timedelta(hours=2))
    with pytest.raises(ValueError, match="would move the waypoint"):
        clock.with_waypoints([START + timedelta(hours=1)], now_wall=WALL0 + timedelta(seconds=1))


def test_times_before_the_anchor_are_refused() -> None:
    with pytest.raises(ValueError, match="before this window's anchor"):
        window().to_wall(START - timedelta(hours=1))


def test_a_span_runs_at_the_near_rate_throughout() -> None:
    serve = (START, START + timedelta(hours=2))
    bare = WarpedWindow(anchor_wall=WALL0, anchor_sim=START - timedelta(minutes=10))
    clock = bare.with_waypoints(WAYPOINTS, now_wall=WALL0, spans=[serve])
    assert clock.rate_at(START + timedelta(hours=1)) == clock.near_rate
    assert clock.rate_at(START + timedelta(hours=3)) == clock.fast_rate
    wall = clock.to_wall(serve[1]) - clock.to_wall(serve[0])
    assert wall == timedelta(hours=2) / clock.near_rate
    back = clock.to_sim(clock.to_wall(START + timedelta(minutes=17)))
    assert abs(back - (START + timedelta(minutes=17))) < timedelta(milliseconds=1)


def test_a_span_added_before_a_registered_waypoint_is_refused() -> None:
    with pytest.raises(ValueError, match="would move the waypoint"):
        window().with_waypoints([], now_wall=WALL0, spans=[(START + timedelta(hours=1), START + timedelta(hours=3))])
    with pytest.raises(ValueError, match="must end after it starts"):
        window().with_waypoints([], now_wall=WALL0, spans=[(START, START)])


def test_real_time_is_the_identity() -> None:
    clock = WarpedWindow.real_time(WALL0)
    later = WALL0 + timedelta(hours=5, seconds=3)
    assert clock.to_sim(later) == later and clock.to_wall(later) == later
    assert not clock.simulated and window().simulated


HOLD = timedelta(minutes=2)


def gated() -> WarpedWindow:
    """The lease's waypoints registered on a window that holds at them (each is a gate until its run starts)."""
    bare = WarpedWindow(anchor_wall=WALL0, anchor_sim=START - timedelta(minutes=10), hold=HOLD)
    return bare.with_waypoints(WAYPOINTS, now_wall=WALL0)


def test_registered_waypoints_are_gates_only_on_a_window_that_holds() -> None:
    assert gated().gates == WAYPOINTS
    assert window().with_waypoints([END], now_wall=WALL0).gates == ()


def test_the_clock_stops_at_a_gate_until_its_run_has_started() -> None:
    clock = gated()
    reached = clock.to_wall(START)
    late = reached + timedelta(seconds=36)  # a busy machine started the serve run 36 s after its wall time
    assert clock.to_sim(late) == START  # what the run sees when it starts: its own time, not 36 minutes on
    assert clock.held_at(late) == START
    released = clock.release(START, late)
    assert released.to_sim(late) == START and START not in released.gates
    assert released.to_sim(late + timedelta(seconds=3)) - START == timedelta(seconds=3) * clock.near_rate  # on
    # Every later waypoint comes as much later in wall time: its run, scheduled before, is early and waits.
    drain = END - timedelta(minutes=45)
    moved = released.to_wall(drain) - clock.to_wall(drain)
    assert abs(moved - timedelta(seconds=36)) < timedelta(milliseconds=1)


def test_a_gate_holds_at_most_its_hold_and_the_late_run_shows_it() -> None:
    clock = gated()
    reached = clock.to_wall(START)
    assert clock.to_sim(reached + HOLD) == START
    after = reached + HOLD + timedelta(seconds=2)
    moved_on = START + timedelta(seconds=2) * clock.near_rate
    assert abs(clock.to_sim(after) - moved_on) < timedelta(milliseconds=1) and clock.held_at(after) is None
    released = clock.release(START, after)  # the run came after all: nothing left to let go
    assert released.to_sim(after) == clock.to_sim(after) and released.gates == WAYPOINTS[1:]


def test_a_run_may_not_release_its_gate_before_the_clock_gets_there() -> None:
    clock = gated()
    early = clock.to_wall(START) - timedelta(seconds=1)
    assert clock.to_sim(early) < START
    with pytest.raises(ValueError, match="has not reached"):
        clock.release(START, early)


def test_the_latest_a_waypoint_comes_is_after_every_hold_before_it() -> None:
    clock = gated()
    drain = END - timedelta(minutes=45)
    assert clock.latest_wall(drain) == clock.to_wall(drain) + HOLD  # the serve gate's hold, whole
    assert clock.latest_wall(START) == clock.to_wall(START)


def test_reanchoring_inside_a_hold_keeps_the_clock_and_its_bound() -> None:
    clock = gated()
    inside = clock.to_wall(START) + timedelta(seconds=30)
    again = clock.reanchored(inside)
    assert (again.anchor_wall, again.anchor_sim) == (clock.to_wall(START), START)
    for seconds in (0, 60, 119, 121, 200, 3000):
        wall = inside + timedelta(seconds=seconds)
        assert abs(again.to_sim(wall) - clock.to_sim(wall)) < timedelta(milliseconds=1)
    # Registering more while held neither moves a scheduled waypoint nor lets the held gate go.
    more = clock.with_waypoints([END + timedelta(hours=2)], now_wall=inside)
    assert more.to_sim(inside) == START and START in more.gates
    assert END + timedelta(hours=2) in more.gates


def test_while_work_runs_the_clock_goes_no_faster_than_near_a_waypoint() -> None:
    clock = window()
    noon = clock.to_wall(START + timedelta(hours=12))  # far from any waypoint: 1440× when nothing works
    working = clock.working(True, noon)
    assert working.busy and working.rate_at(START + timedelta(hours=12)) == working.near_rate
    assert working.to_sim(noon) == clock.to_sim(noon)  # the clock does not jump …
    assert working.to_sim(noon + timedelta(seconds=10)) - clock.to_sim(noon) == timedelta(seconds=10) * clock.near_rate
    assert working.to_wall(END) == clock.to_wall(END)  # … and where runs are scheduled is the earliest still
    idle = working.working(False, noon + timedelta(seconds=10))
    assert idle.to_sim(noon + timedelta(seconds=11)) - idle.to_sim(noon + timedelta(seconds=10)) == timedelta(
        seconds=clock.fast_rate
    )


def test_a_busy_rate_below_the_near_rate_counts_work_at_that_rate_in_a_span_and_beside_a_waypoint() -> None:
    serving = (START, START + timedelta(hours=2))  # the serve run's span: near_rate when nothing works
    clock = window().model_copy(update={"spans": (serving,), "near_rate": 60.0, "busy_rate": 10.0})
    at_start = clock.to_wall(START)
    working = clock.working(True, at_start)
    ten_seconds = working.to_sim(at_start + timedelta(seconds=10)) - working.to_sim(at_start)
    assert abs(ten_seconds - timedelta(seconds=100)) < timedelta(milliseconds=1)  # 10×, not 60× (ten block minutes)
    assert working.rate_at(START + timedelta(minutes=1)) == 10.0
    skipping = working.skipping(START + timedelta(minutes=75), at_start)  # a modelled duration still skips fast
    assert skipping.rate_at(START + timedelta(minutes=10)) == clock.fast_rate
    assert working.to_wall(END) == clock.to_wall(END)  # where runs are scheduled does not move
    idle = working.working(False, at_start + timedelta(seconds=10))
    assert idle.rate_at(START + timedelta(minutes=5)) == clock.near_rate  # back in the span at near_rate


def test_a_skip_runs_fast_through_work_and_spans_to_its_instant_then_the_clock_is_as_before() -> None:
    clock = window().model_copy(update={"spans": ((START, START + timedelta(hours=2)),)})  # the serve run's
    at_start = clock.to_wall(START)
    working = clock.working(True, at_start)  # the serve run works: near wall time …
    loaded = START + timedelta(minutes=75)  # … but a modelled vLLM start has nothing real to wait for
    skipping = working.skipping(loaded, at_start)
    assert skipping.rate_at(START + timedelta(minutes=10)) == clock.fast_rate
    one_second = skipping.to_sim(at_start + timedelta(seconds=1)) - START
    assert abs(one_second - timedelta(seconds=clock.fast_rate)) < timedelta(milliseconds=5)  # 24 minutes, not one
    after = skipping.to_wall(loaded)  # earliest: scheduled runs never move, so where runs go ignores the skip
    assert after == working.to_wall(loaded)
    reached = at_start + timedelta(seconds=75 * 60 / clock.fast_rate)
    assert abs(skipping.to_sim(reached) - loaded) < timedelta(milliseconds=5)
    beyond = reached + timedelta(seconds=10)
    assert abs(skipping.to_sim(beyond) - loaded - timedelta(seconds=10) * clock.near_rate) < timedelta(seconds=1)
    assert skipping.skipping(START, reached).skip_until is None  # a skip to a passed instant is none


def test_a_gate_inside_a_skip_still_holds_until_its_run_starts() -> None:
    clock = gated()
    before = clock.to_wall(START) - timedelta(seconds=1)
    skipping = clock.skipping(START + timedelta(hours=1), before)
    assert skipping.to_sim(before + timedelta(seconds=30)) == START  # held at the serve run's gate
    released = skipping.release(START, before + timedelta(seconds=30))
    one_second = released.to_sim(before + timedelta(seconds=31)) - START
    assert abs(one_second - timedelta(seconds=clock.fast_rate)) < timedelta(milliseconds=5)
