"""The one reader of the instants a person writes (a spec's window times): strict, and every refusal in words.

Accepted: an RFC 3339 date-time with its offset (``2026-12-01T11:30:00Z``, ``2026-12-01 11:30+02:00``, with or
without seconds and fractions), ``now``, or ``now+N`` with a unit ``m``, ``h``, ``d`` or ``w``. Refused, each
with what to write instead: a date that does not exist (``2027-02-29``), a leap second (``:60``, which RFC 3339
allows and no clock here can hold), an offset beyond ±23:59 (RFC 3339 §5.6: ``time-hour`` is 00–23), a missing
offset, and a relative time beyond the year 9999. Pure: ``now`` is given by the caller.

Sources (docs/input.md, "Times"): RFC 3339 §5.6 "Internet Date/Time Format",
https://www.rfc-editor.org/rfc/rfc3339#section-5.6.
"""

from __future__ import annotations

import calendar
import re
from datetime import UTC, datetime, timedelta, timezone

FORMAT = "an RFC 3339 time with its offset (e.g. 2026-12-01T11:30:00Z), 'now', or 'now+36h' / 'now+2d' / 'now+1w'"

_RELATIVE = re.compile(r"now(?:\s*\+\s*(\d{1,12})\s*([mhdw]))?")
_UNIT = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_ABSOLUTE = re.compile(
    r"(?P<year>\d{4})-(?P<month>\d{2})-(?P<day>\d{2})"
    r"(?:[Tt ](?P<hour>\d{2}):(?P<minute>\d{2})(?::(?P<second>\d{2})(?:\.(?P<fraction>\d{1,9}))?)?"
    r"\s*(?P<offset>[Zz]|[+-]\d{2}(?::?\d{2})?)?)?"
)


def parse_instant(text: str, *, now: datetime) -> datetime:
    """The instant ``text`` names (timezone-aware); ``ValueError`` saying what is wrong and what to write."""
    value = text.strip()
    relative = _RELATIVE.fullmatch(value)
    if relative is not None:
        amount, unit = relative.groups()
        if amount is None:
            return now
        try:
            return now + timedelta(**{_UNIT[unit]: int(amount)})
        except OverflowError:
            raise ValueError(f"{value!r} is beyond the year 9999; write a nearer time, e.g. 'now+14d'") from None
    match = _ABSOLUTE.fullmatch(value)
    if match is None:
        raise ValueError(f"{value!r} is not a time: write {FORMAT}")
    return _absolute(value, match)


def _absolute(value: str, match: re.Match[str]) -> datetime:
    part = match.groupdict()
    year, month, day = int(part["year"]), int(part["month"]), int(part["day"])
    if not 1 <= month <= 12:
        raise ValueError(f"{value!r}: month {month:02d} does not exist; write a month from 01 to 12")
    last = calendar.monthrange(year, month)[1] if year >= 1 else 31
    if not 1 <= day <= last:
        raise ValueError(f"{value!r}: {year:04d}-{month:02d} has no day {day:02d} (it has {last} days)")
    if part["hour"] is None:
        raise ValueError(f"{value!r} is a date without a time and offset: write e.g. {value}T11:30:00Z")
    hour, minute, second = int(part["hour"]), int(part["minute"]), int(part["second"] or 0)
    if hour > 23 or minute > 59:
        raise ValueError(f"{value!r}: {hour:02d}:{minute:02d} is not a time of day; hours go to 23, minutes to 59")
    if second == 60:
        raise ValueError(f"{value!r}: second 60 (a leap second) cannot be held by the campaign's clock; write :59")
    if second > 59:
        raise ValueError(f"{value!r}: second {second} does not exist; seconds go to 59")
    if part["offset"] is None:
        raise ValueError(f"{value!r} has no UTC offset: add 'Z' for UTC or an offset such as +02:00")
    micro = int((part["fraction"] or "0")[:6].ljust(6, "0"))
    offset = _offset(value, part["offset"])
    try:
        return datetime(year, month, day, hour, minute, second, micro, tzinfo=offset)
    except ValueError as exc:  # year 0
        raise ValueError(f"{value!r} is not a date ({exc}); write {FORMAT}") from None


def _offset(value: str, text: str) -> timezone:
    if text in ("Z", "z"):
        return UTC
    digits = text[1:].replace(":", "")
    hours, minutes = int(digits[:2]), int(digits[2:] or 0)
    if hours > 23 or minutes > 59:
        raise ValueError(f"{value!r}: offset {text} is not a UTC offset (RFC 3339 allows -23:59 to +23:59)")
    delta = timedelta(hours=hours, minutes=minutes)
    return timezone(-delta if text[0] == "-" else delta)
