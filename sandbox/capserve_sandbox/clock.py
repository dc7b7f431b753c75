"""The sandbox's clock: AWS's time as the stand-ins see it, and, when the sandbox plays a block, the campaign's.

Without simulation it is the wall clock plus an offset that only moves forward (``advance``: the sandbox's AWS
jumps it to a reservation's start instead of waiting, and tests jump it past an end).

When the sandbox plays a block (``simulate``), the clock keeps wall time until the campaign registers its
scheduled runs' instants (planning and purchase must not cost hours of the block), then it *plays*, and from
there it moves by one rule, never by how fast the host runs (as Temporal's time-skipping test server, kopf's
looptime and SimPy move time: only when everyone waits, straight to the next thing due):

- a **party** is a process of the campaign (``capserve_sandbox.clock_client``) or a stand-in's modelled duration;
  a party *works* (a scheduled run or a redeploy between its start and its end) or *sleeps until* an instant of
  the block (a poll's pause, the end of a modelled duration);
- while any party works, the clock **holds**: the work a busy host does slowly costs no time of the block;
- when none works, the clock **jumps** to the next *stop*: the earliest instant a party sleeps until, or a
  registered waypoint whose run has not started (a *gate*); with no stop ahead it runs at ``fast_rate``;
- a sleeper whose instant has come works again (it holds the clock there) until it sleeps again or ends, so
  the number of polls before an outcome, and the instant each is made, do not depend on the host;
- a gate holds until its run has started (``started``), ``hold`` of wall time at most after the later of the
  clock's arrival and the run's scheduled wall time (a run that never starts does not stop the block forever);
- a *followed* waypoint's run starts another by an event (a Hub watch: the automation redeploys what it found, in
  wall time): from its start the clock holds until another party works (the redeploy), ``hold`` at most, so the
  redeploy starts at the watch's instant whatever the automation's wall seconds were;
- a modelled duration (``skip_to``: a node group launching, vLLM loading the checkpoint it stands for, an S3
  copy) is a sleeper: the clock lands on its end exactly; a duration that the stand-in evaluates lazily when
  asked (EKS's describe) does not hold the clock once passed (``holds=False``).

The runs are still scheduled in wall time by Prefect (``WarpedWindow``: fast between waypoints, near wall time
around them), so each run starts about when the clock reaches its gate, or before it and waits there.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from capserve_sandbox.warp import WarpedWindow

_log = logging.getLogger(__name__)

# The sandbox's own waypoints, from the campaign's first registration (waypoints, spans): each a followed one.
Extension = Callable[[Sequence[datetime], Sequence[tuple[datetime, datetime]]], list[datetime]]

# How often the clock checks that the processes holding it still run (a killed run must not stop the block).
_LIVENESS_EVERY_S = 1.0

# Followed runs (Hub watches) share their deployment's one concurrency slot, which a run takes when the worker
# submits it (up to its prefetch, 30 s, before its time) and keeps while it waits for the clock: scheduled this far
# apart in wall time, each takes the slot in the block's order, never a later watch before an earlier one (which
# would then wait for a slot the later one keeps until the clock passes the earlier: the block would lose it).
# Two prefetches and a process start under load. [inf]
_FOLLOWED_APART = timedelta(seconds=90)


@dataclass
class _Party:
    working: bool = False  # between a run's start and its end
    sleeps: dict[str, datetime] = field(default_factory=dict)  # thread (or "") → the instant it sleeps until
    holds_when_due: bool = True  # False: a stop the clock lands on and passes (a lazily evaluated duration)
    modelled: bool = False  # a stand-in's modelled duration (``skip_to``)
    soft: set[str] = field(default_factory=set)  # threads whose sleep is a wait on the outside (``waiting``)
    pid: int | None = None  # the campaign's process (None: a stand-in in the sandbox's own)
    unadopted_until: float | None = None  # a run started (``started``) that has not said it works yet: until then
    follows: str | None = None  # a followed run's token: this party holds until another party works

    def holding(self, shows: datetime, *, modelled_ahead: bool) -> bool:
        due = [thread for thread, until in self.sleeps.items() if until <= shows]
        if due:
            # A wait on the outside (a watch) need not stop the clock while a modelled duration is what it waits for.
            return self.holds_when_due and not (modelled_ahead and all(thread in self.soft for thread in due))
        return self.working and not self.sleeps


@dataclass
class _Gate:
    scheduled_wall: datetime  # where Prefect starts its run
    arrived_wall: datetime | None = None  # when the clock got there


class SandboxClock:
    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._offset = timedelta(0)
        self._plan: WarpedWindow | None = None  # simulating: the mapping runs are scheduled on
        self._rates: tuple[float, float, timedelta, timedelta] | None = None  # until the first registration
        self._hold = timedelta(0)
        self._extend: Extension | None = None
        self._shows: datetime | None = None  # playing: the clock's time
        self._moved_wall = datetime.now(UTC)
        self._parties: dict[str, _Party] = {}
        self._gates: dict[datetime, _Gate] = {}
        self._followed: dict[datetime, datetime] = {}  # a followed waypoint → the wall time its run is scheduled at
        self._checked = 0.0

    # -- reading -------------------------------------------------------------------------------------------

    def now(self) -> datetime:
        with self._lock:
            return self._now(datetime.now(UTC))

    def _now(self, wall: datetime) -> datetime:
        # Callers read ``wall`` under the lock: read before it, it could precede an anchor another thread set meanwhile
        # (the tick thread once died on exactly that).
        if self._plan is None:
            return wall + self._offset
        if self._shows is None:
            return self._plan.to_sim(wall)
        self._advance(wall)
        return self._shows

    @property
    def simulated(self) -> bool:
        with self._lock:
            return self._plan is not None

    @property
    def playing(self) -> bool:
        """A simulated block is playing: its runs are scheduled, so the clock moves by the rule (and skips)."""
        with self._lock:
            return self._shows is not None

    def stops(self) -> list[datetime]:
        """The instants parties sleep until (modelled durations and polls still ahead or due), in order."""
        with self._lock:
            return sorted(until for party in self._parties.values() for until in party.sleeps.values())

    def schedule(self) -> WarpedWindow | None:
        """The mapping runs are scheduled on (None: not simulating)."""
        with self._lock:
            return self._plan

    def wall_time_to_schedule(self, at: datetime) -> datetime:
        """The wall time to give Prefect for a run due at ``at`` on this clock (it reaches ``at`` about then)."""
        with self._lock:
            wall = datetime.now(UTC)
            if self._plan is None:
                return at - self._offset
            if at in self._followed:
                return max(self._followed[at], wall)
            shows = self._now(wall)
            plan = self._plan.model_copy(update={"anchor_wall": wall, "anchor_sim": shows})
            return plan.to_wall(max(at, shows))

    # -- the rule --------------------------------------------------------------------------------------------

    def _advance(self, wall: datetime) -> None:
        """Move a playing clock to ``wall`` by the rule (the lock is held)."""
        assert self._shows is not None and self._plan is not None  # noqa: S101 - narrows the type for mypy
        self._forget_the_gone()
        while True:
            shows = self._shows
            for token in [t for t, p in self._parties.items() if not p.holds_when_due and p.sleeps
                          and min(p.sleeps.values()) <= shows]:
                del self._parties[token]  # passed exactly: the stand-in reads the clock when asked
            modelled_ahead = any(party.modelled and any(until > shows for until in party.sleeps.values())
                                 for party in self._parties.values())
            if any(party.holding(shows, modelled_ahead=modelled_ahead) for party in self._parties.values()):
                break
            if self._held_at_gate(shows, wall):
                break
            ahead = [until for party in self._parties.values() for until in party.sleeps.values() if until > shows]
            ahead += [gate for gate in self._gates if gate > shows]
            elapsed = max((wall - self._moved_wall).total_seconds(), 0.0)
            if not ahead:
                self._shows = shows + timedelta(seconds=elapsed * self._plan.fast_rate)
                break
            self._shows = min(ahead)
            self._lock.notify_all()
        self._moved_wall = wall

    def _held_at_gate(self, shows: datetime, wall: datetime) -> bool:
        for point in [point for point in self._gates if point < shows]:
            del self._gates[point]  # jumped over (``advance``): nothing to wait for
        gate = self._gates.get(shows)
        if gate is None:
            return False
        if gate.arrived_wall is None:
            gate.arrived_wall = wall
        if wall < max(gate.arrived_wall, gate.scheduled_wall) + self._hold:
            return True
        _log.warning("sandbox clock: the run for %s did not start within %s; the block goes on without it",
                     shows.isoformat(), self._hold)
        del self._gates[shows]
        return False

    def _forget_the_gone(self) -> None:
        """Parties whose process has ended, and runs started that never said they work, hold nothing."""
        mono = time.monotonic()
        for token, party in list(self._parties.items()):
            if party.unadopted_until is not None and mono > party.unadopted_until:
                if party.follows is not None:
                    _log.warning("sandbox clock: no run followed %s within %s; the block goes on", party.follows,
                                 self._hold)
                party.working, party.unadopted_until = False, None
                if not party.sleeps:
                    del self._parties[token]
        if mono - self._checked < _LIVENESS_EVERY_S:
            return
        self._checked = mono
        for token, party in list(self._parties.items()):
            if party.pid is not None and not _alive(party.pid):
                _log.warning("sandbox clock: process %d ended while it held the clock; it holds it no more", party.pid)
                del self._parties[token]

    def _wait(self, done: Callable[[], bool], timeout_s: float) -> bool:
        """Wait (the lock is held) until ``done()``, re-reading the clock, ``timeout_s`` at most."""
        end = time.monotonic() + timeout_s
        while not done():
            left = end - time.monotonic()
            if left <= 0:
                return False
            self._lock.wait(min(left, 0.05))
            self._now(datetime.now(UTC))
        return True

    # -- parties ---------------------------------------------------------------------------------------------

    def work(self, token: str, *, pid: int | None = None) -> datetime:
        """``token`` works: the clock holds until it sleeps or rests."""
        with self._lock:
            for other, follow in list(self._parties.items()):
                if follow.follows is not None and follow.follows != token:
                    del self._parties[other]  # the run it waited for works: it holds the clock itself now
            party = self._parties.setdefault(token, _Party(pid=pid))
            party.working, party.unadopted_until = True, None
            return self._now(datetime.now(UTC))

    def rest(self, token: str) -> datetime:
        """``token``'s work is over (its sleeps, if any, still stand)."""
        with self._lock:
            party = self._parties.get(token)
            if party is not None:
                party.working, party.unadopted_until = False, None
                if not party.sleeps:
                    del self._parties[token]
            self._lock.notify_all()
            return self._now(datetime.now(UTC))

    def sleep(self, token: str, thread: str, seconds: float, *, pid: int | None = None,
              wait_s: float = 0.0, soft: bool = False) -> tuple[datetime, bool]:
        """``token``'s ``thread`` sleeps ``seconds`` of the block from now; (the instant it wakes, whether it is due),
        after waiting ``wait_s`` (wall) at most for it. ``soft``: it waits on the outside (a watch window), and
        holds the clock at its instant only when no modelled duration is under way (it may be what it waits for)."""
        with self._lock:
            party = self._parties.setdefault(token, _Party(pid=pid))
            until = self._now(datetime.now(UTC)) + timedelta(seconds=max(seconds, 0.0))
            party.sleeps[thread] = until
            if soft:
                party.soft.add(thread)
            else:
                party.soft.discard(thread)
            self._lock.notify_all()
            due = self._wait(lambda: self._now(datetime.now(UTC)) >= until, wait_s)
            return until, due

    def wait(self, token: str, thread: str, wait_s: float) -> bool:
        """Whether ``token``'s ``thread`` is due, after waiting ``wait_s`` at most (a sleep it does not have: due)."""
        with self._lock:
            party = self._parties.get(token)
            until = party.sleeps.get(thread) if party is not None else None
            if until is None:
                return True
            return self._wait(lambda: self._now(datetime.now(UTC)) >= until, wait_s)

    def awake(self, token: str, thread: str) -> datetime:
        """``token``'s ``thread`` has woken and works again (or, outside a run's work, is done)."""
        with self._lock:
            party = self._parties.get(token)
            if party is not None:
                party.sleeps.pop(thread, None)
                party.soft.discard(thread)
                if not party.sleeps and not party.working:
                    del self._parties[token]
            self._lock.notify_all()
            return self._now(datetime.now(UTC))

    def waits_for(self, token: str, thread: str, until: datetime) -> None:
        """A working party ``token``'s ``thread`` waits for a stand-in's modelled duration that ends at ``until`` (a
        staging Job's process, for the copy it asked for): it holds the clock no more until then, and holds it there
        until ``awake``. Nothing when ``token`` holds nothing (its process has ended)."""
        with self._lock:
            party = self._parties.get(token)
            if party is not None:
                party.sleeps[thread] = until
                self._lock.notify_all()

    def skip_to(self, token: str, until: datetime, *, holds: bool = True) -> None:
        """A modelled duration (``token``'s) ends at ``until`` on this clock: a stop the clock lands on exactly, and
        (``holds``) holds at until the stand-in has acted on it (``skip_to`` again, or ``skipped``)."""
        with self._lock:
            self._parties[token] = _Party(sleeps={"": until}, holds_when_due=holds, modelled=True)
            self._lock.notify_all()

    def held_by(self, token: str) -> None:
        """A stand-in's work that the campaign will observe (a server coming up after its modelled start) holds the
        clock until ``skipped(token)``."""
        with self._lock:
            self._parties[token] = _Party(working=True)

    def skipped(self, token: str) -> None:
        """``token``'s modelled duration is over (or abandoned)."""
        with self._lock:
            self._parties.pop(token, None)
            self._lock.notify_all()

    # -- the block's runs -------------------------------------------------------------------------------------

    def simulate(
        self, *, fast_rate: float, near_rate: float, near: timedelta, hold: timedelta = timedelta(0),
        extend: Extension | None = None,
    ) -> None:
        """Simulate: wall time until the first waypoints are registered, then play by the rule (module docstring).
        ``extend`` sees the first registration and adds waypoints of the sandbox's own, each followed by a run an
        event starts (``capserve_sandbox.revisions``): the mapping cannot change once runs are scheduled on it."""
        with self._lock:
            wall = datetime.now(UTC)
            start = self._now(wall)
            self._plan = WarpedWindow.real_time(wall, shows=start)
            self._rates = (fast_rate, near_rate, near, hold)
            self._shows = None
            self._extend = extend

    def register(self, waypoints: Iterable[datetime], spans: Iterable[tuple[datetime, datetime]] = ()) -> None:
        """The instants the campaign's runs fire at (each a gate); refused (ValueError) if an earlier waypoint's
        scheduled wall time would move. Nothing to do when not simulating. ``spans`` (where the campaign works after
        a waypoint) only place the sandbox's own waypoints: the clock holds while a run works, so no stretch of the
        block needs to run near wall time."""
        with self._lock:
            wall = datetime.now(UTC)
            if self._plan is None:
                return
            shows = self._now(wall)
            waypoints, followed = list(waypoints), []
            if self._rates is not None:  # the first waypoints: from now on the block plays
                if self._extend is not None:
                    followed = self._extend(waypoints, list(spans))
                    waypoints += followed
                fast_rate, near_rate, near, self._hold = self._rates
                self._plan = WarpedWindow(anchor_wall=wall, anchor_sim=shows, fast_rate=fast_rate,
                                          near_rate=near_rate, near=near)
                self._rates = None
                self._shows, self._moved_wall = shows, wall
            anchored = self._plan.model_copy(update={"anchor_wall": wall, "anchor_sim": shows})
            plan = anchored.with_waypoints(waypoints, now_wall=wall)
            for point in waypoints:
                if point >= shows and point not in self._gates and point not in self._plan.waypoints:
                    self._gates[point] = _Gate(scheduled_wall=plan.to_wall(point))
            earlier = None
            for point in sorted(point for point in followed if point in self._gates):
                wall_at = plan.to_wall(point)
                if earlier is not None:
                    wall_at = max(wall_at, earlier + _FOLLOWED_APART)
                self._followed[point] = self._gates[point].scheduled_wall = earlier = wall_at
            self._plan = plan
            self._lock.notify_all()

    def started(self, waypoint: datetime, token: str | None = None, *, pid: int | None = None,
                wait_s: float = 0.0) -> tuple[bool, datetime]:
        """The run scheduled for ``waypoint`` has started: (False, now) while the clock has not reached it after
        ``wait_s`` (the run is early: it waits), else (True, the time it started at). ``token`` then works (until
        it says it works itself, ``hold`` at most), so the clock does not leave its start while it gets going."""
        with self._lock:
            if self._shows is None:
                return True, self._now(datetime.now(UTC))
            if not self._wait(lambda: self._now(datetime.now(UTC)) >= waypoint, wait_s):
                return False, self._now(datetime.now(UTC))
            self._gates.pop(waypoint, None)
            if token is not None:
                party = self._parties.setdefault(token, _Party(pid=pid))
                if not party.working:
                    party.working = True
                    party.unadopted_until = time.monotonic() + max(self._hold.total_seconds(), 30.0)
                if self._followed.pop(waypoint, None) is not None:
                    self._parties[f"followed-{waypoint.isoformat()}"] = _Party(
                        working=True, follows=token, unadopted_until=time.monotonic() + self._hold.total_seconds())
            self._lock.notify_all()
            assert self._shows is not None  # noqa: S101 - narrows the type for mypy
            return True, self._shows

    def advance(self, delta: timedelta) -> datetime:
        """Move the sandbox's "now" forward (never backward: AWS states only move forward)."""
        if delta < timedelta(0):
            raise ValueError("the sandbox clock only moves forward")
        with self._lock:
            wall = datetime.now(UTC)
            if self._shows is not None:
                self._shows = self._now(wall) + delta  # gates jumped over are dropped on the next reading
            elif self._plan is not None:
                self._plan = WarpedWindow.real_time(wall, shows=self._plan.to_sim(wall) + delta)
            else:
                self._offset += delta
            self._lock.notify_all()
            return self._now(wall)

    def reset(self) -> None:
        with self._lock:
            self._offset = timedelta(0)
            self._plan = None
            self._rates = None
            self._extend = None
            self._shows = None
            self._parties = {}
            self._gates = {}
            self._followed = {}
            self._lock.notify_all()


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


CLOCK = SandboxClock()
