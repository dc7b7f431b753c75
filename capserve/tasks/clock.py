"""The campaign's clock: the time on the reservation's timeline, and where Prefect must schedule a run.

On AWS it is this host's clock (``CAPSERVE_CLOCK_URL`` unset: ``WarpedWindow.real_time``, the identity).
The sandbox can simulate a window faster than wall time (``capserve sandbox --simulate``, ``make demo``); it
then serves its clock's mapping at ``CAPSERVE_CLOCK_URL`` (``capserve.sandbox.clock_server``), and every
"now" the campaign takes, and every wall time it schedules a run at, comes from that mapping. The code is
the same in both cases: only the mapping differs.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from datetime import UTC, datetime

import httpx

from capserve.core.errors import PermanentError, RetryableError
from capserve.core.warp import WarpedWindow

CLOCK_URL_ENV = "CAPSERVE_CLOCK_URL"


def _url() -> str | None:
    return os.environ.get(CLOCK_URL_ENV) or None


def campaign_window() -> WarpedWindow:
    """The mapping between wall time and the campaign's clock, as it stands now."""
    url = _url()
    if url is None:
        return WarpedWindow.real_time(datetime.now(UTC))
    try:
        answer = httpx.get(f"{url}/window", timeout=10)
        answer.raise_for_status()
    except httpx.HTTPError as exc:
        raise RetryableError(f"the clock at {CLOCK_URL_ENV}={url} did not answer: {type(exc).__name__}") from exc
    return WarpedWindow.model_validate_json(answer.content)


def campaign_now() -> datetime:
    """Now, on the campaign's clock."""
    return campaign_window().to_sim(datetime.now(UTC))


def campaign_time_of(wall: datetime) -> datetime:
    """A past wall instant on the campaign's clock (one before the mapping's last re-anchoring reads as that)."""
    window = campaign_window()
    return window.to_sim(max(wall, window.anchor_wall))


def register_waypoints(
    waypoints: Iterable[datetime], spans: Iterable[tuple[datetime, datetime]] = ()
) -> WarpedWindow:
    """Ask a simulated clock to run near wall time around these instants and over these spans (before the runs
    for them are scheduled, so each fires at its time to the minute); the mapping to schedule with."""
    url = _url()
    if url is None:
        return WarpedWindow.real_time(datetime.now(UTC))
    body = {
        "waypoints": [point.isoformat() for point in waypoints],
        "spans": [[start.isoformat(), end.isoformat()] for start, end in spans],
    }
    try:
        answer = httpx.post(f"{url}/waypoints", json=body, timeout=10)
    except httpx.HTTPError as exc:
        raise RetryableError(f"the clock at {CLOCK_URL_ENV}={url} did not answer: {type(exc).__name__}") from exc
    if answer.status_code == 409:
        raise PermanentError(f"the simulated clock refused the lease's waypoints: {answer.json().get('error')}")
    if answer.is_error:
        raise RetryableError(f"the clock at {CLOCK_URL_ENV}={url} answered {answer.status_code}")
    return WarpedWindow.model_validate_json(answer.content)
