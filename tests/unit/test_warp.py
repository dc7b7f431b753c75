"""Where a played block's runs are scheduled: a 24 h block plays in minutes, every waypoint lands at its time."""

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


def test_real_time_is_the_identity() -> None:
    clock = WarpedWindow.real_time(WALL0)
    later = WALL0 + timedelta(hours=5, seconds=3)
    assert clock.to_sim(later) == later and clock.to_wall(later) == later
    assert not clock.simulated and window().simulated

