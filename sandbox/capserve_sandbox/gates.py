"""Holds: the sandbox keeps one matching request waiting until a harness releases it.

The fault matrix (``python -m faults``) kills a worker *inside* a step: it arms a hold at a point
("purchase", "download", "apply", "delete"), waits until a request has reached it, kills the worker, then
releases the request, which completes as the far end would (the purchase is made, the file is sent to a
socket nobody reads). Production code is unchanged: only the stand-ins call ``GATES``, and an unarmed
point costs a dictionary lookup. A hold never outlives ``HOLD_LIMIT_SECONDS``, so a forgotten release
cannot hang the sandbox.
"""

from __future__ import annotations

import asyncio
import fnmatch
import threading
from dataclasses import dataclass, field

POINTS = ("purchase", "download", "apply", "delete")
HOLD_LIMIT_SECONDS = 300.0


@dataclass
class Hold:
    point: str
    match: str  # shell-style pattern on the request's detail (reservation id, file, kind/name, action path)
    held: str | None = None  # the detail of the request being held, once one arrived
    released: threading.Event = field(default_factory=threading.Event)


class Gates:
    """Armed holds by point; at most one per point, each holding the first matching request only."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._armed: dict[str, Hold] = {}

    def arm(self, point: str, match: str = "*") -> None:
        if point not in POINTS:
            raise ValueError(f"unknown hold point {point!r}; known: {', '.join(POINTS)}")
        with self._lock:
            previous = self._armed.pop(point, None)
            self._armed[point] = Hold(point=point, match=match)
        if previous is not None:
            previous.released.set()

    def release(self, point: str | None = None) -> None:
        """Let the held request (if any) go on and disarm ``point`` (every point when None)."""
        with self._lock:
            gone = [self._armed.pop(p) for p in list(self._armed) if point in (None, p)]
        for hold in gone:
            hold.released.set()

    def status(self) -> dict[str, dict[str, str | None]]:
        with self._lock:
            return {p: {"match": h.match, "held": h.held} for p, h in self._armed.items()}

    def _take(self, point: str, detail: str) -> Hold | None:
        if point not in self._armed:  # the common case: nothing armed, no lock taken
            return None
        with self._lock:
            hold = self._armed.get(point)
            if hold is None or hold.held is not None or not fnmatch.fnmatchcase(detail, hold.match):
                return None
            hold.held = detail
            return hold

    def wait(self, point: str, detail: str) -> None:
        """Block this thread while ``point`` holds this request."""
        hold = self._take(point, detail)
        if hold is not None:
            hold.released.wait(HOLD_LIMIT_SECONDS)

    async def wait_async(self, point: str, detail: str) -> None:
        """The same for a request served on an event loop (which must keep serving everything else)."""
        hold = self._take(point, detail)
        if hold is not None:
            await asyncio.to_thread(hold.released.wait, HOLD_LIMIT_SECONDS)


GATES = Gates()
