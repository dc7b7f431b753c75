"""Which clock this process asks: the one seam where a stand-in environment plugs its own clock in.

Every module of the product asks ``clock()`` (a ``capserve.core.clock.Clock``) and knows nothing more. On AWS
``CAPSERVE_CLOCK`` is unset and the answer is the host's clock. A stand-in environment (the sandbox, which plays
a block faster than wall time) sets ``CAPSERVE_CLOCK`` to ``module:factory argument`` in the environment of the
CLI and of every worker it starts; the first ``clock()`` of a process imports that factory and calls it with
the argument (its clock's address), so the scheduled runs' processes, which a worker starts afresh, find the
same clock as the CLI. This module is the only one of the product that knows another clock may exist.
"""

from __future__ import annotations

import os
import pkgutil
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from capserve.core.clock import HOST, Clock
from capserve.core.errors import SpecError

CLOCK_ENV = "CAPSERVE_CLOCK"
"""The clock a stand-in environment plugs in: ``module:factory argument``; unset (AWS): the host's clock."""

_plugged: dict[str, Clock] = {}  # CAPSERVE_CLOCK's value → the clock it made (one per process and value)
_used: list[Clock] = []  # a clock a test put in place (``using``)


def clock() -> Clock:
    """The campaign's clock for this process."""
    if _used:
        return _used[-1]
    named = os.environ.get(CLOCK_ENV, "").strip()
    if not named:
        return HOST
    if named not in _plugged:
        _plugged[named] = _load(named)
    return _plugged[named]


def _load(named: str) -> Clock:
    target, _, argument = named.partition(" ")
    try:
        factory = pkgutil.resolve_name(target)  # ``module:factory``, as entry points name objects
    except (ImportError, AttributeError, ValueError) as exc:
        raise SpecError(
            f"{CLOCK_ENV}={named[:200]!r} names no clock factory ({type(exc).__name__}): unset it to use the host's "
            "clock, or start the worker from the sandbox's environment file again"
        ) from exc
    made: Clock = factory(argument)
    return made


def clock_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The part of ``environ`` that names this process's clock: what a worker started from it must inherit."""
    return {CLOCK_ENV: environ[CLOCK_ENV]} if environ.get(CLOCK_ENV) else {}


@contextmanager
def using(replacement: Clock) -> Iterator[Clock]:
    """Ask ``replacement`` instead, inside this block (tests)."""
    _used.append(replacement)
    try:
        yield replacement
    finally:
        _used.remove(replacement)
