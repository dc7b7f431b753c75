"""A simulated window's clock: fast between a lease's waypoints, near wall time around them.

A 24-hour Capacity Block cannot be watched in real time, but every run scheduled for it must still fire
at its (simulated) time to the minute. A worker polls every few seconds and needs a few more to start a
process (docs/prefect.md §11): at a constant 1440× that delay alone would be over an hour of simulated
time. So the simulated clock runs at ``fast_rate`` between waypoints and at ``near_rate`` within ``near``
of each one: with 20× there, a 3-second start is one simulated minute.

The mapping is piecewise linear from an anchor (a wall time and the simulated time at that moment).
Prefect schedules in wall time: ``to_wall`` turns a waypoint into the ``scheduled_time`` of its run,
``to_sim`` turns a wall instant into the simulated "now". Waypoints are registered before their runs are
scheduled; registering more may never move a waypoint already registered (its run is on the server).
A *span* is a longer stretch at ``near_rate`` (the serve run's work after the block starts: bring-up,
rollout and evaluation take real seconds, which at ``fast_rate`` would be hours of the block).

A waypoint is also a *gate*: the clock stops there until the run scheduled for it says it has started
(``release``), at most ``hold`` wall seconds, then runs on from the waypoint. A busy machine that starts a
run late therefore delays the whole block instead of making the run fire late on it; every later waypoint
comes that much later in wall time, so a later run that Prefect starts at its scheduled wall time may find
the clock short of its waypoint: it waits on the clock until then (``capserve.tasks.clock``). So
``to_wall`` is the *earliest* wall instant the clock can show a time (no gate holds on the way: where
runs are scheduled), and ``to_sim`` the clock itself, which holds at every gate not yet released.

While real work runs on the block (``busy``: a scheduled run, a redeploy), the clock runs at ``busy_rate``
(``near_rate`` unless set lower) everywhere: a slow stretch sized for the work would otherwise end under work
that a busy machine made slower, and each further wall second of it be hours of the block. A sandbox sets
``busy_rate`` below ``near_rate`` so its own work's seconds count about what the same calls cost on AWS
(moto and the fake Kubernetes answer in milliseconds where AWS takes a fraction of a second) while a poll
of the block still costs a fraction of a wall second. Like a hold, this only makes the clock later than
``to_wall``.

A *skip* lets the clock run at ``fast_rate`` up to a simulated instant, through spans and work alike: a
sandbox stand-in that models a duration nothing real fills (a node group launching, vLLM loading a
checkpoint it stands for) asks the clock to skip to the instant that duration ends, so the block shows the
modelled minutes without the demo waiting for them in wall time. Gates still hold on the way: a skip
brings the clock to a later waypoint earlier than its run's scheduled wall time, and the gate keeps it
there until the run starts.

On AWS the campaign's clock is the host's: ``WarpedWindow.real_time()``, rate 1 everywhere, the same
code with an identity mapping.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field


class WarpedWindow(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    anchor_wall: AwareDatetime = Field(description="A wall-clock instant …")
    anchor_sim: AwareDatetime = Field(description="… and the simulated time at that instant.")
    fast_rate: float = Field(1440.0, ge=1, le=100_000, description="Simulated seconds per wall second between.")
    near_rate: float = Field(20.0, ge=1, le=1000, description="Simulated seconds per wall second near a waypoint.")
    near: timedelta = Field(
        timedelta(minutes=2), ge=timedelta(0), le=timedelta(hours=2),
        description="Simulated time either side of a waypoint that runs at near_rate.",
    )
    waypoints: tuple[AwareDatetime, ...] = Field((), max_length=1000, description="Simulated instants, sorted.")
    spans: tuple[tuple[AwareDatetime, AwareDatetime], ...] = Field(
        (), max_length=100, description="Simulated intervals (start, end) that also run at near_rate."
    )
    gates: tuple[AwareDatetime, ...] = Field(
        (), max_length=1000, description="Waypoints not reached yet, or held at now, whose run has not started."
    )
    hold: timedelta = Field(
        timedelta(0), ge=timedelta(0), le=timedelta(hours=1),
        description="The longest the clock stays at a gate (wall time); 0: waypoints are not gates.",
    )
    busy_rate: float | None = Field(
        None, ge=1, le=1000, description="Simulated seconds per wall second while busy (None: near_rate)."
    )
    busy: bool = Field(False, description="Real work runs on the block: no faster than busy_rate anywhere.")
    skip_until: AwareDatetime | None = Field(
        None, description="Up to this simulated instant the clock runs at fast_rate, spans and work aside."
    )

    @classmethod
    def real_time(cls, now: datetime, *, shows: datetime | None = None) -> WarpedWindow:
        """Rate 1 everywhere: the identity (the campaign's clock on AWS), or a clock that ``shows`` another time
        at the wall instant ``now`` and keeps that offset."""
        return cls(anchor_wall=now, anchor_sim=shows or now, fast_rate=1.0, near_rate=1.0, near=timedelta(0))

    @property
    def simulated(self) -> bool:
        return self.fast_rate != 1.0 or self.near_rate != 1.0 or self.anchor_wall != self.anchor_sim

    def slow_spans(self) -> list[tuple[datetime, datetime]]:
        """The simulated intervals that run at ``near_rate`` (merged where they overlap)."""
        around = [(point - self.near, point + self.near) for point in self.waypoints]
        spans: list[tuple[datetime, datetime]] = []
        for start, end in sorted([*around, *self.spans]):
            if spans and start <= spans[-1][1]:
                spans[-1] = (spans[-1][0], max(spans[-1][1], end))
            else:
                spans.append((start, end))
        return spans

    def _pieces(self, *, earliest: bool = False) -> list[tuple[datetime, datetime | None, float, float]]:
        """(sim start, sim end or None for open-ended, rate, hold) from the anchor on: the clock stays at the
        start ``hold`` wall seconds (a gate: 0 elsewhere), then runs at ``rate`` to the end. ``earliest``: as
        fast as the clock can go (no gate holding, no work slowing it)."""
        working = self.busy and not earliest
        fast = min(self.fast_rate, self._working_rate) if working else self.fast_rate
        near = min(self.near_rate, self._working_rate) if working else self.near_rate
        moving: list[tuple[datetime, datetime | None, float]] = []
        cursor = self.anchor_sim
        # Where runs are scheduled (``earliest``) ignores skips: they come and go after the runs are on the server.
        if not earliest and self.skip_until is not None and self.skip_until > cursor:
            moving.append((cursor, self.skip_until, self.fast_rate))
            cursor = self.skip_until
        for start, end in self.slow_spans():
            if end <= cursor:
                continue
            if start > cursor:
                moving.append((cursor, start, fast))
                cursor = start
            moving.append((cursor, end, near))
            cursor = end
        moving.append((cursor, None, fast))
        gates = sorted(gate for gate in self.gates if gate >= self.anchor_sim)
        hold = 0.0 if earliest else self.hold.total_seconds()
        pieces: list[tuple[datetime, datetime | None, float, float]] = []
        for begin, until, rate in moving:  # split at the gates, so each gate starts a piece
            for gate in gates:
                if begin < gate and (until is None or gate < until):
                    pieces.append((begin, gate, rate, hold if begin in gates else 0.0))
                    begin = gate
            pieces.append((begin, until, rate, hold if begin in gates else 0.0))
        return pieces

    def to_wall(self, sim: datetime) -> datetime:
        """The earliest wall instant at which the clock can show ``sim`` (not before the anchor): when no gate holds
        it on the way. A run for ``sim`` is scheduled there; a gate that held the clock makes it get there later."""
        if sim < self.anchor_sim:
            raise ValueError(f"{sim.isoformat()} is before this window's anchor {self.anchor_sim.isoformat()}")
        wall_seconds = 0.0
        for start, end, rate, _hold in self._pieces(earliest=True):
            stop = sim if end is None else min(sim, end)
            if stop <= start:
                break
            wall_seconds += (stop - start).total_seconds() / rate
        return self.anchor_wall + timedelta(seconds=wall_seconds)

    def latest_wall(self, sim: datetime) -> datetime:
        """The latest wall instant at which the clock shows ``sim`` if nothing changes (every gate before it holding
        as long as it may; work that keeps the clock near wall time may end later still)."""
        if sim < self.anchor_sim:
            raise ValueError(f"{sim.isoformat()} is before this window's anchor {self.anchor_sim.isoformat()}")
        return self._reached(sim)

    def to_sim(self, wall: datetime) -> datetime:
        """The simulated time at the wall instant ``wall`` (not before the anchor), holding at every gate."""
        if wall < self.anchor_wall:
            raise ValueError(f"{wall.isoformat()} is before this window's anchor {self.anchor_wall.isoformat()}")
        left = (wall - self.anchor_wall).total_seconds()
        for start, end, rate, hold in self._pieces():
            if left <= hold:
                return start
            left -= hold
            span = None if end is None else (end - start).total_seconds() / rate
            if span is None or left <= span:
                return start + timedelta(seconds=left * rate)
            left -= span
        raise AssertionError("the last piece is open-ended")

    def held_at(self, wall: datetime) -> datetime | None:
        """The gate the clock stands at at ``wall`` (waiting for its run), or None."""
        left = (wall - self.anchor_wall).total_seconds()
        for start, end, rate, hold in self._pieces():
            if left < 0:
                return None
            if left <= hold:
                return start if hold > 0 else None
            left -= hold
            if end is None:
                return None
            left -= (end - start).total_seconds() / rate
        return None

    def reanchored(self, now_wall: datetime) -> WarpedWindow:
        """The same clock, anchored at ``now_wall`` (or where the hold it stands in began), without the gates it
        has passed."""
        held = self.held_at(now_wall)
        if held is not None:  # the hold began when the clock reached the gate: keep that, it bounds the hold
            wall, sim = self._reached(held), held
        else:
            wall, sim = now_wall, self.to_sim(now_wall)
        gates = tuple(gate for gate in self.gates if gate >= sim)
        return self.model_copy(update={"anchor_wall": wall, "anchor_sim": sim, "gates": gates})

    def _reached(self, sim: datetime) -> datetime:
        """The wall instant the clock reaches ``sim`` (every earlier gate holding its longest)."""
        wall_seconds = 0.0
        for start, end, rate, hold in self._pieces():
            if start >= sim:
                break
            wall_seconds += hold
            stop = sim if end is None else min(sim, end)
            wall_seconds += (stop - start).total_seconds() / rate
        return self.anchor_wall + timedelta(seconds=wall_seconds)

    def release(self, gate: datetime, now_wall: datetime) -> WarpedWindow:
        """The run for ``gate`` has started at ``now_wall``: the clock runs on from there (from the gate, when it
        stood there). Refused before the clock has reached the gate (the run must wait for it)."""
        clock = self.reanchored(now_wall)
        if clock.anchor_sim < gate:
            raise ValueError(f"the clock has not reached {gate.isoformat()} yet (it shows {clock.to_sim(now_wall)})")
        if gate not in clock.gates:  # not a gate, released already, or its hold ran out: nothing to let go
            return clock
        return clock.model_copy(update={
            "anchor_wall": now_wall, "gates": tuple(other for other in clock.gates if other != gate),
        })

    def rate_at(self, sim: datetime) -> float:
        """Simulated seconds per wall second at the simulated instant ``sim`` (outside a hold)."""
        if self.skip_until is not None and self.anchor_sim <= sim < self.skip_until:
            return self.fast_rate
        if self.busy:
            return min(self.near_rate, self.fast_rate, self._working_rate)
        slow = any(start <= sim < end for start, end in self.slow_spans())
        return min(self.near_rate, self.fast_rate) if slow else self.fast_rate

    @property
    def _working_rate(self) -> float:
        return self.near_rate if self.busy_rate is None else self.busy_rate

    def working(self, busy: bool, now_wall: datetime) -> WarpedWindow:
        """The same clock from ``now_wall`` on, with real work running on the block (``busy``) or none."""
        if busy == self.busy:
            return self
        return self.reanchored(now_wall).model_copy(update={"busy": busy})

    def skipping(self, until: datetime | None, now_wall: datetime) -> WarpedWindow:
        """The same clock from ``now_wall`` on, running at ``fast_rate`` up to the simulated ``until`` (None: no skip).
        A skip to an instant the clock has passed is none."""
        clock = self.reanchored(now_wall)
        if until is not None and until <= clock.anchor_sim:
            until = None
        if until == clock.skip_until:
            return clock
        return clock.model_copy(update={"skip_until": until})

    def with_waypoints(
        self, added: Iterable[datetime], *, now_wall: datetime, spans: Iterable[tuple[datetime, datetime]] = ()
    ) -> WarpedWindow:
        """Register more waypoints (and spans), re-anchored at ``now_wall``; refused if an earlier waypoint would
        move. A new waypoint not passed yet is a gate (when the window holds at all)."""
        added = list(added)
        clock = self.reanchored(now_wall)
        new = sorted({*self.waypoints, *added})
        new_spans = sorted({*self.spans, *spans})
        if any(end <= start for start, end in new_spans):
            raise ValueError("a span must end after it starts")
        fresh = {point for point in added if point not in self.waypoints and point >= clock.anchor_sim}
        gates = sorted({*clock.gates, *fresh}) if self.hold > timedelta(0) else []
        anchored = clock.model_copy(update={"waypoints": tuple(new), "spans": tuple(new_spans), "gates": tuple(gates)})
        for point in self.waypoints:
            if point >= anchored.anchor_sim and abs(
                (anchored.to_wall(point) - clock.to_wall(point)).total_seconds()
            ) > 0.001:
                raise ValueError(
                    f"registering {', '.join(p.isoformat() for p in added) or 'these spans'} would move the waypoint "
                    f"{point.isoformat()}, whose run is already scheduled: register a lease's waypoints "
                    "together, before scheduling"
                )
        return anchored
