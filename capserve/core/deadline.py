"""Deadlines on a monotonic clock: how long is left, and a stage budget shared by its steps.

Wall-clock time can jump (NTP, a suspended laptop); a deadline measured on ``time.monotonic`` cannot.
The clock is injectable so tests run on fake time. Reading a clock is not I/O: this stays in ``core``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from capserve.core.errors import CapserveError, DeadlineError

Clock = Callable[[], float]


class Deadline:
    """A point ``seconds`` from now on ``clock``."""

    def __init__(self, seconds: float, *, clock: Clock = time.monotonic) -> None:
        self._clock = clock
        self.seconds = seconds
        self.started = clock()
        self.end = self.started + seconds

    def remaining(self) -> float:
        """Seconds left; negative once passed."""
        return self.end - self._clock()

    def elapsed(self) -> float:
        return self._clock() - self.started

    @property
    def expired(self) -> bool:
        return self.remaining() <= 0

    def cap(self, seconds: float) -> float:
        """``seconds``, shortened to what is left (never below zero)."""
        return max(min(seconds, self.remaining()), 0.0)

    def within(self, seconds: float) -> Deadline:
        """A deadline for one step: ``seconds`` from now, or this one if it comes sooner."""
        return Deadline(self.cap(seconds), clock=self._clock)


class StepBudget:
    """One budget for a stage's steps: each step's wait is capped by what is left of it, and a step that
    fails once the budget is spent is reported as ``DeadlineError`` (the reason the stage stopped), not
    as whatever the last wait happened to raise. ``expired_message(step)`` says what ran out and what to do.
    """

    def __init__(self, deadline: Deadline, expired_message: Callable[[str], str]) -> None:
        self.deadline = deadline
        self._message = expired_message

    def cap(self, timeout_s: float, step: str) -> float:
        """The timeout ``step`` may use; DeadlineError when nothing is left."""
        if self.deadline.expired:
            raise DeadlineError(self._message(step))
        return self.deadline.cap(timeout_s)

    @contextmanager
    def step(self, step: str) -> Iterator[None]:
        if self.deadline.expired:
            raise DeadlineError(self._message(step))
        try:
            yield
        except CapserveError as exc:
            if self.deadline.expired and not isinstance(exc, DeadlineError):
                raise DeadlineError(f"{self._message(step)} ({exc})") from exc
            raise
