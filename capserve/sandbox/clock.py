"""The sandbox's clock: the one notion of "now" shared by every sandbox stand-in.

Reservations, training plans, EKS clusters and node groups move through their states on this clock,
so tests can jump a reservation to ``active`` or past its end without waiting. It is process-global
because the moto server runs in this process; tests reset it.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta


class SandboxClock:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._offset = timedelta(0)

    def now(self) -> datetime:
        with self._lock:
            return datetime.now(UTC) + self._offset

    def advance(self, delta: timedelta) -> datetime:
        """Move the sandbox's "now" forward (never backward: AWS states only move forward)."""
        if delta < timedelta(0):
            raise ValueError("the sandbox clock only moves forward")
        with self._lock:
            self._offset += delta
        return self.now()

    def reset(self) -> None:
        with self._lock:
            self._offset = timedelta(0)


CLOCK = SandboxClock()
