"""Where a played block's runs are scheduled in wall time: fast between a lease's waypoints, near wall time around them.

Prefect schedules in wall time; the sandbox's clock (``capserve_sandbox.clock``) moves by its own rule (it holds while
the campaign works, and jumps to the next thing due when nothing does), so no mapping says where it will be at a
wall instant. This one says where to *schedule* each run so that it starts about when the clock reaches its
waypoint, and the demo does not wait longer than it must: ``fast_rate`` simulated seconds per wall second
between waypoints, ``near_rate`` within ``near`` of each one. The clock holds at each waypoint until its run has
started, so a run started late is not late on the block, and one started early waits for the clock there.

The mapping is piecewise linear from an anchor (a wall time and the simulated time at that moment); registering
more waypoints may never move one already registered (its run is on the server).
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

    @classmethod
    def real_time(cls, now: datetime, *, shows: datetime | None = None) -> WarpedWindow:
        """Rate 1 everywhere: a clock that ``shows`` a time (default: ``now``) at the wall instant ``now`` and keeps
        that offset."""
        return cls(anchor_wall=now, anchor_sim=shows or now, fast_rate=1.0, near_rate=1.0, near=timedelta(0))

    @property
    def simulated(self) -> bool:
        return self.fast_rate != 1.0 or self.near_rate != 1.0 or self.anchor_wall != self.anchor_sim

    def slow_spans(self) -> list[tuple[datetime, datetime]]:
        """The simulated intervals that run at ``near_rate`` (merged where they overlap)."""
        around = [(point - self.near, point + self.near) for point in self.waypoints]
        spans: list[tuple[datetime, datetime]] = []
        for start, end in sorted(around):
            if spans and start <= spans[-1][1]:
                spans[-1] = (spans[-1][0], max(spans[-1][1], end))
            else:
                spans.append((start, end))
        return spans

    def _pieces(self) -> list[tuple[datetime, datetime | None, float]]:
        """(sim start, sim end or None for open-ended, rate) from the anchor on."""
        pieces: list[tuple[datetime, datetime | None, float]] = []
        cursor = self.anchor_sim
        for start, end in self.slow_spans():
            if end <= cursor:
                continue
            if start > cursor:
                pieces.append((cursor, start, self.fast_rate))
                cursor = start
            pieces.append((cursor, end, self.near_rate))
            cursor = end
        pieces.append((cursor, None, self.fast_rate))
        return pieces

    def to_wall(self, sim: datetime) -> datetime:
        """The wall instant at which this mapping shows ``sim`` (not before the anchor): where a run for it goes."""
        if sim < self.anchor_sim:
            raise ValueError(f"{sim.isoformat()} is before this window's anchor {self.anchor_sim.isoformat()}")
        wall_seconds = 0.0
        for start, end, rate in self._pieces():
            stop = sim if end is None else min(sim, end)
            if stop <= start:
                break
            wall_seconds += (stop - start).total_seconds() / rate
        return self.anchor_wall + timedelta(seconds=wall_seconds)

    def to_sim(self, wall: datetime) -> datetime:
        """The simulated time this mapping shows at the wall instant ``wall`` (not before the anchor)."""
        if wall < self.anchor_wall:
            raise ValueError(f"{wall.isoformat()} is before this window's anchor {self.anchor_wall.isoformat()}")
        left = (wall - self.anchor_wall).total_seconds()
        for start, end, rate in self._pieces():
            span = None if end is None else (end - start).total_seconds() / rate
            if span is None or left <= span:
                return start + timedelta(seconds=left * rate)
            left -= span
        raise AssertionError("the last piece is open-ended")

    def with_waypoints(self, added: Iterable[datetime], *, now_wall: datetime) -> WarpedWindow:
        """Register more waypoints, re-anchored at ``now_wall``; refused if an earlier waypoint would move."""
        added = list(added)
        clock = self.model_copy(update={"anchor_wall": now_wall, "anchor_sim": self.to_sim(now_wall)})
        new = sorted({*self.waypoints, *added})
        anchored = clock.model_copy(update={"waypoints": tuple(new)})
        for point in self.waypoints:
            if point >= anchored.anchor_sim and abs(
                (anchored.to_wall(point) - clock.to_wall(point)).total_seconds()
            ) > 0.001:
                raise ValueError(
                    f"registering {', '.join(p.isoformat() for p in added)} would move the waypoint "
                    f"{point.isoformat()}, whose run is already scheduled: register a lease's waypoints "
                    "together, before scheduling"
                )
        return anchored
