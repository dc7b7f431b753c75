"""The one polling wait: jittered exponential backoff under a monotonic deadline that says what was missing.

Waits that have a better tool use it and still end the same way: botocore's waiters (EKS cluster and
node group), Kubernetes watches (``capserve.tasks.kube``). Whatever the tool, a wait whose time runs
out raises ``WaitTimeoutError`` made by ``wait_timeout``, naming what it waited for, how long, and
what was still missing.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

from capserve.core.deadline import Clock, Deadline
from capserve.core.errors import WaitTimeoutError
from capserve.tasks.the_clock import clock

T = TypeVar("T")


def wait_timeout(what: str, limit_s: float, missing: str) -> WaitTimeoutError:
    """The error every wait raises when its time is up: ``<what> not ready after <limit> s: <missing>``."""
    return WaitTimeoutError(f"{what} not ready after {limit_s:g} s: {missing}")


def pause_on_the_block(block_s: float) -> None:
    """Sleep while ``block_s`` pass on the campaign's clock (on AWS: ``block_s`` of the host's)."""
    clock().sleep(block_s)


def wait_until(
    check: Callable[[], T],
    *,
    done: Callable[[T], bool],
    describe: Callable[[T], str],
    what: str,
    timeout_s: float,
    initial_s: float,
    max_s: float | None = None,
    jitter: float = 0.0,
    next_wait: Callable[[T], float | None] = lambda _: None,
    sleep: Callable[[float], None] = pause_on_the_block,
    clock: Clock = time.monotonic,
) -> T:
    """Call ``check`` until ``done(value)``; ``check`` raises to stop early (e.g. on a terminal state).

    Pauses start at ``initial_s`` and double up to ``max_s`` (default: no growth), each shortened by up
    to ``jitter`` at random so many runs do not poll in step; ``next_wait`` may shorten one further
    ("the reservation starts in 40 s"). Pauses are spans of the campaign's clock (``pause_on_the_block``:
    the clock says how long one lasts on this host); the deadline is this host's. Never sleeps past the
    deadline; at the deadline raises ``wait_timeout(what, timeout_s, describe(last value))``.
    """
    deadline = Deadline(timeout_s, clock=clock)
    pause = initial_s
    ceiling = initial_s if max_s is None else max_s
    while True:
        value = check()
        if done(value):
            return value
        if deadline.expired:
            raise wait_timeout(what, timeout_s, describe(value))
        hint = next_wait(value)
        step = min(pause, ceiling, hint) if hint is not None and hint > 0 else min(pause, ceiling)
        sleep(deadline.cap(step * (1 - jitter * random.random())))  # noqa: S311 - jitter for a backoff, not a secret
        pause = min(pause * 2, ceiling)
