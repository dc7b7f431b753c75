"""A clock for tests that ask what a flow does at another time: the host's clock moved to that time, plugged in at
the clock's one seam (``capserve.tasks.the_clock.using``), where the sandbox plugs its own. Flows take no ``now``."""

from __future__ import annotations

from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta

from capserve.core.clock import Clock, HostClock
from capserve.tasks.the_clock import using


class ShiftedClock(HostClock):
    """The host's clock, ``by`` ahead (behind when negative); it runs at the host's pace."""

    def __init__(self, by: timedelta) -> None:
        self.by = by

    def now(self) -> datetime:
        return super().now() + self.by


def moved_to(at: datetime) -> AbstractContextManager[Clock]:
    """Inside the block, the campaign's clock reads ``at`` at its start and runs on from there."""
    return using(ShiftedClock(at - datetime.now(UTC)))
