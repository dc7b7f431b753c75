"""The one reader of window times (capserve.core.instants): what it accepts, and each refusal in words."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

import pytest

from capserve.core.instants import parse_instant

NOW = datetime(2026, 12, 2, 8, 0, tzinfo=UTC)


@pytest.mark.parametrize(("text", "expected"), [
    ("now", NOW),
    ("now+36h", NOW + timedelta(hours=36)),
    ("now + 2d", NOW + timedelta(days=2)),
    ("now+1w", NOW + timedelta(weeks=1)),
    ("2026-12-01T11:30:00Z", datetime(2026, 12, 1, 11, 30, tzinfo=UTC)),
    ("2026-12-01 11:30", None),  # no offset: refused below
    ("2028-02-29T11:30:00.25+02:00", datetime(2028, 2, 29, 11, 30, 0, 250000, tzinfo=timezone(timedelta(hours=2)))),
    ("2026-12-01T11:30:00-0530", datetime(2026, 12, 1, 11, 30, tzinfo=timezone(-timedelta(hours=5, minutes=30)))),
])
def test_rfc_3339_times_and_relative_times_are_read(text: str, expected: datetime | None) -> None:
    if expected is None:
        with pytest.raises(ValueError, match="has no UTC offset"):
            parse_instant(text, now=NOW)
        return
    assert parse_instant(text, now=NOW) == expected


@pytest.mark.parametrize(("text", "message"), [
    ("2027-02-29T11:30:00Z", "'2027-02-29T11:30:00Z': 2027-02 has no day 29 (it has 28 days)"),
    ("2027-01-10T11:29:60Z", "second 60 (a leap second) cannot be held"),
    ("2027-01-10T11:30:00+25:00", "offset +25:00 is not a UTC offset (RFC 3339 allows -23:59 to +23:59)"),
    ("2027-13-01T11:30:00Z", "month 13 does not exist"),
    ("2027-01-10T24:00:00Z", "24:00 is not a time of day"),
    ("now+99999999999d", "'now+99999999999d' is beyond the year 9999"),
    ("now+9999999999999d", "is not a time"),
    ("0000-01-01T00:00:00Z", "is not a date"),
    ("2026-12-01", "is a date without a time and offset: write e.g. 2026-12-01T11:30:00Z"),
    ("tomorrow", "'tomorrow' is not a time: write an RFC 3339 time"),
])
def test_impossible_times_are_refused_saying_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_instant(text, now=NOW)
