"""The campaign's clock, as a port: the one thing the product asks for "now" and for "let this span of the block pass".

Every module of the product asks ``capserve.tasks.the_clock.clock()`` for an object of this shape and never
knows which it is. On AWS it is ``HostClock``: the host's time, ``time.sleep``, nothing to register or wait
for (Prefect starts a scheduled run at its time, and time is time). A stand-in environment may plug in a clock
of its own at one seam (``capserve.tasks.the_clock``); the product's code is the same either way.

What a clock must answer:

- ``now()``: the time on the block's clock;
- ``sleep(block_s)``: return once ``block_s`` have passed on it (a poll's pause);
- ``waiting(block_s)``: a context for a wait on the outside (a watch window) during which up to ``block_s`` of the
  block may pass; it gives the wall seconds the wait may last (on AWS ``block_s``);
- ``wall_time_of(block_time)``: the wall time to stamp a fact that just happened at ``block_time`` with;
- ``plan(due, working)``: before the campaign's scheduled runs are created, the instants they are due and the
  spans of the block in which its runs are expected to work; ``wall_time_to_schedule(at)``: the wall time to
  give Prefect for a run due at ``at`` on the block;
- ``begin_at(waypoint)``: a scheduled run's first act (``waypoint``: the instant it is due); when it began on the
  block (a clock may hold at a run's due instant until the run has begun);
- ``working()``: a context for real work on the block (a scheduled run, a redeploy): a clock may hold while a
  run works.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime: ...

    def sleep(self, block_s: float) -> None: ...

    def waiting(self, block_s: float) -> AbstractContextManager[float]: ...

    def wall_time_of(self, block_time: datetime) -> datetime: ...

    def plan(self, due: Iterable[datetime], working: Iterable[tuple[datetime, datetime]] = ()) -> None: ...

    def wall_time_to_schedule(self, at: datetime) -> datetime: ...

    def begin_at(self, waypoint: datetime) -> datetime: ...

    def working(self) -> AbstractContextManager[None]: ...


class HostClock:
    """The host's clock: the block's time is the wall time (AWS)."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def sleep(self, block_s: float) -> None:
        if block_s > 0:
            time.sleep(block_s)

    @contextmanager
    def _wait(self, block_s: float) -> Iterator[float]:
        yield block_s

    def waiting(self, block_s: float) -> AbstractContextManager[float]:
        return self._wait(block_s)

    def wall_time_of(self, block_time: datetime) -> datetime:
        return block_time

    def plan(self, due: Iterable[datetime], working: Iterable[tuple[datetime, datetime]] = ()) -> None:
        del due, working  # nothing to prepare: Prefect fires each run at its time

    def wall_time_to_schedule(self, at: datetime) -> datetime:
        return at

    def begin_at(self, waypoint: datetime) -> datetime:
        del waypoint  # Prefect started the run at its time
        return self.now()

    @contextmanager
    def _work(self) -> Iterator[None]:
        yield

    def working(self) -> AbstractContextManager[None]:
        return self._work()


HOST = HostClock()
