"""One polling helper: jittered exponential backoff under a monotonic deadline that says what was missing."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

from capserve.core.errors import RetryableError

T = TypeVar("T")


class StillWaitingError(RetryableError):
    """The deadline passed before the condition held; re-running picks the wait up again."""


def poll(
    check: Callable[[], T],
    *,
    done: Callable[[T], bool],
    describe: Callable[[T], str],
    deadline_seconds: float,
    initial_seconds: float,
    max_seconds: float,
    jitter: float,
    next_wait: Callable[[T], float | None] = lambda _: None,
    sleep: Callable[[float], None] = time.sleep,
    monotonic: Callable[[], float] = time.monotonic,
) -> T:
    """Call ``check`` until ``done``; ``check`` raises to stop early (e.g. on a terminal state).

    Waits start at ``initial_seconds`` and double up to ``max_seconds``, each shortened by up to
    ``jitter`` at random so many runs do not poll in step; ``next_wait`` may shorten a wait further
    (e.g. "the reservation starts in 40 s"). Never sleeps past the deadline.
    """
    started = monotonic()
    deadline = started + deadline_seconds
    wait = initial_seconds
    while True:
        value = check()
        if done(value):
            return value
        remaining = deadline - monotonic()
        if remaining <= 0:
            raise StillWaitingError(
                f"gave up after {monotonic() - started:.0f} s (deadline {deadline_seconds:.0f} s): {describe(value)}"
            )
        hint = next_wait(value)
        pause = min(wait, max_seconds, remaining, hint if hint is not None and hint > 0 else wait)
        sleep(pause * (1 - jitter * random.random()))
        wait = min(wait * 2, max_seconds)
