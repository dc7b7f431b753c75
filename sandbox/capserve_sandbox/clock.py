"""The sandbox's clock: the one notion of "now" shared by every sandbox stand-in.

Reservations, training plans, EKS clusters and node groups move through their states on this clock,
so tests can jump a reservation to ``active`` or past its end without waiting. It is process-global
because the moto server runs in this process; tests reset it.

It runs in one of two modes:

- *offset* (the default): wall time plus whatever tests or auto-activation added with ``advance``;
- *simulated* (``simulate``): a ``WarpedWindow`` (``capserve.core.warp``), fast between waypoints and
  near wall time around them, so a 24-hour block plays in minutes. Campaigns register their waypoints
  (the scheduled runs' times) through ``capserve_sandbox.clock_server`` before scheduling them, and read
  the mapping from there to put Prefect's wall-clock schedule on the block's timeline. Each waypoint is a
  gate: the clock stops there until its run says it has started (``started``), at most ``hold``, so a run
  a busy machine starts late does not fire late on the block; and while a run says it works on the block
  (``working``), the clock runs no faster than near wall time.

A stand-in that models a duration nothing real fills (``skip_to``: a node group launching, vLLM loading the
checkpoint it stands for) lets the clock run fast to the instant it ends (``WarpedWindow.skip_until``): to
the earliest such instant still ahead, then the next, so real work between two of them is not sped up.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta

from capserve_sandbox.warp import WarpedWindow

Spans = list[tuple[datetime, datetime]]
Extension = Callable[[Sequence[datetime], Sequence[tuple[datetime, datetime]]], tuple[list[datetime], Spans]]


class SandboxClock:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._offset = timedelta(0)
        self._warp: WarpedWindow | None = None
        # simulate()'s rates (fast, near, near span, hold, busy), until the first waypoints are registered
        self._rates: tuple[float, float, timedelta, timedelta, float | None] | None = None
        self._extend: Extension | None = None
        self._work: set[str] = set()  # what works on the block now (``working``)
        self._skips: dict[str, datetime] = {}  # modelled durations under way: who, and the instant each ends

    def now(self) -> datetime:
        wall = datetime.now(UTC)
        with self._lock:
            if self._warp is None:
                return wall + self._offset
            self._next_skip(wall)
            return self._warp.to_sim(wall)

    def skip_to(self, token: str, until: datetime) -> None:
        """A modelled duration (``token``'s) ends at ``until`` on this clock: while nothing else is modelled to end
        sooner, the clock runs fast until then. Only a simulated window skips; elsewhere nothing changes."""
        wall = datetime.now(UTC)
        with self._lock:
            self._skips[token] = until
            if self._warp is not None:
                self._next_skip(wall)

    def skipped(self, token: str) -> None:
        """``token``'s modelled duration is over (or abandoned): the clock no longer skips for it."""
        wall = datetime.now(UTC)
        with self._lock:
            self._skips.pop(token, None)
            if self._warp is not None:
                self._next_skip(wall)

    def _next_skip(self, wall: datetime) -> None:
        """Skip to the earliest modelled end still ahead (the lock is held)."""
        assert self._warp is not None
        shows = self._warp.to_sim(wall)
        ahead = [until for until in self._skips.values() if until > shows]
        wanted = min(ahead) if ahead else None
        if wanted != self._warp.skip_until:
            self._warp = self._warp.skipping(wanted, wall)

    @property
    def simulated(self) -> bool:
        with self._lock:
            return self._warp is not None

    @property
    def playing(self) -> bool:
        """A simulated block is playing: its runs are scheduled, so the clock runs fast between them (and skips)."""
        with self._lock:
            return self._warp is not None and self._rates is None

    def window(self) -> WarpedWindow:
        """The mapping between wall time and this clock (rate 1 with the offset when not simulating)."""
        wall = datetime.now(UTC)
        with self._lock:
            if self._warp is not None:
                self._next_skip(wall)
                return self._warp
            return WarpedWindow.real_time(wall, shows=wall + self._offset)

    def advance(self, delta: timedelta) -> datetime:
        """Move the sandbox's "now" forward (never backward: AWS states only move forward)."""
        if delta < timedelta(0):
            raise ValueError("the sandbox clock only moves forward")
        wall = datetime.now(UTC)
        with self._lock:
            if self._warp is not None:
                # A jump moves every later waypoint with it: only tests do this, before anything is scheduled.
                sim = self._warp.to_sim(wall) + delta
                gates = tuple(gate for gate in self._warp.gates if gate >= sim)  # jumped over: none to wait for
                self._warp = self._warp.model_copy(update={"anchor_wall": wall, "anchor_sim": sim, "gates": gates})
            else:
                self._offset += delta
        return self.now()

    def simulate(
        self, *, fast_rate: float, near_rate: float, near: timedelta, hold: timedelta = timedelta(0),
        busy_rate: float | None = None, extend: Extension | None = None,
    ) -> WarpedWindow:
        """Simulate: wall time until the first waypoints are registered (nothing is scheduled yet, and a campaign's
        planning and purchase must not cost hours of the window), then fast between waypoints and at
        ``near_rate`` around them, stopping at each (for ``hold`` at most) until its run has started, and at
        ``busy_rate`` (None: ``near_rate``) while real work runs on the block.
        ``extend`` sees the first registration and adds waypoints and spans of the sandbox's own
        (``capserve_sandbox.revisions``): the mapping cannot change once runs are scheduled on it."""
        wall = datetime.now(UTC)
        with self._lock:
            start = self._warp.to_sim(wall) if self._warp is not None else wall + self._offset
            self._warp = WarpedWindow.real_time(wall, shows=start)
            self._rates = (fast_rate, near_rate, near, hold, busy_rate)
            self._extend = extend
            return self._warp

    def register(
        self, waypoints: Iterable[datetime], spans: Iterable[tuple[datetime, datetime]] = ()
    ) -> WarpedWindow:
        """Slow down around more simulated instants and over more spans; refused if an earlier one would move.

        Without simulation there is nothing to slow down: the mapping (rate 1) is returned unchanged.
        """
        wall = datetime.now(UTC)
        with self._lock:
            if self._warp is None:
                return WarpedWindow.real_time(wall, shows=wall + self._offset)
            if self._rates is not None:  # the first waypoints: from now on the window plays fast
                if self._extend is not None:
                    waypoints, spans = list(waypoints), list(spans)
                    more_waypoints, more_spans = self._extend(waypoints, spans)
                    waypoints, spans = waypoints + more_waypoints, spans + more_spans
                fast_rate, near_rate, near, hold, busy_rate = self._rates
                self._warp = WarpedWindow(
                    anchor_wall=wall, anchor_sim=self._warp.to_sim(wall), fast_rate=fast_rate, near_rate=near_rate,
                    near=near, hold=hold, busy_rate=busy_rate, busy=bool(self._work),
                )
                self._rates = None
            self._warp = self._warp.with_waypoints(waypoints, now_wall=wall, spans=spans)
            return self._warp

    def started(self, waypoint: datetime) -> tuple[bool, datetime, WarpedWindow]:
        """The run scheduled for ``waypoint`` has started: let the clock go on from there. (False, now, mapping)
        while the clock has not reached the waypoint yet (the run is early: it waits), else (True, the time it
        started at on this clock, the mapping from now on)."""
        wall = datetime.now(UTC)
        with self._lock:
            if self._warp is None:
                return True, wall + self._offset, WarpedWindow.real_time(wall, shows=wall + self._offset)
            if self._warp.to_sim(wall) < waypoint:
                return False, self._warp.to_sim(wall), self._warp
            self._warp = self._warp.release(waypoint, wall)
            return True, self._warp.to_sim(wall), self._warp

    def working(self, token: str, *, busy: bool) -> WarpedWindow:
        """Real work (``token``: a run's) began on the block, or ended: while any runs, the clock runs no faster
        than near wall time, so work a busy machine slows down does not cost hours of the block."""
        wall = datetime.now(UTC)
        with self._lock:
            if busy:
                self._work.add(token)
            else:
                self._work.discard(token)
            if self._warp is None:
                return WarpedWindow.real_time(wall, shows=wall + self._offset)
            self._warp = self._warp.working(bool(self._work), wall)
            return self._warp

    def reset(self) -> None:
        with self._lock:
            self._offset = timedelta(0)
            self._warp = None
            self._rates = None
            self._extend = None
            self._work = set()
            self._skips = {}


CLOCK = SandboxClock()
