"""Value types for the commands' options: each turns the text into a value or raises
``argparse.ArgumentTypeError`` with one sentence saying what is allowed (argparse adds the option's
name and exits 2, ``BAD_INPUT``). Imports only the standard library and the pure spec checks (themselves
standard library only): `capserve plan` stays fast.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import TypeVar

from capserve.core.spec_checks import name_problem

T = TypeVar("T")

_WEEK_S = 7 * 86_400


def _parse(convert: Callable[[str], T], text: str, what: str) -> T:
    try:
        return convert(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None


def served_name(text: str) -> str:
    """A served model name: not empty, no control, format or bidi characters (the spec's rule)."""
    problem = name_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(f"{text!r} {problem}")
    return text


def integer(text: str) -> int:
    return _parse(int, text, "an integer")


def positive_integer(text: str) -> int:
    value = integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def fraction(text: str) -> float:
    """A share in (0, 1], such as vLLM's --gpu-memory-utilization."""
    value = _parse(float, text, "a number")
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{value} must be above 0 and at most 1")
    return value


def positive_number(text: str) -> float:
    """A finite number above 0 (a throughput)."""
    value = _parse(float, text, "a number")
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"{text}: give a finite number above 0")
    return value


def dollars(text: str) -> float:
    """An amount in USD, finite and at least 0."""
    value = _parse(float, text, "an amount in USD")
    if not (value >= 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"{text}: give an amount in USD of at least 0")
    return value


def seconds(text: str) -> float:
    """A duration in seconds, above 0 and at most a week."""
    value = _parse(float, text, "a number of seconds")
    if not 0 < value <= _WEEK_S:
        raise argparse.ArgumentTypeError(f"{text}: give a number of seconds above 0 and at most {_WEEK_S} (7 days)")
    return value


def levels(text: str) -> tuple[int, ...]:
    """Comma-separated concurrency levels, each at least 1 ('' for none)."""
    values = _parse(_split(int), text, "a comma-separated list of integers")
    if any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: every level must be at least 1")
    return values


def rates(text: str) -> tuple[float, ...]:
    """Comma-separated request rates per second, each finite and above 0 ('' for none)."""
    values = _parse(_split(float), text, "a comma-separated list of numbers")
    if any(not (v > 0 and math.isfinite(v)) for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: every rate must be a finite number above 0")
    return values


def _split(convert: Callable[[str], T]) -> Callable[[str], tuple[T, ...]]:
    """``_split(int)("1, 2")`` → ``(1, 2)``: a converter of comma-separated text, for ``_parse``."""
    return lambda text: tuple(convert(part) for part in text.split(",") if part.strip())
