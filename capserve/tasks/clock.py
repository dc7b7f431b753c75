"""The campaign's clock: the time on the reservation's timeline, and where Prefect must schedule a run.

On AWS it is this host's clock (``CAPSERVE_CLOCK_URL`` unset: ``WarpedWindow.real_time``, the identity).
The sandbox can simulate a window faster than wall time (``capserve sandbox --simulate``, ``make demo``); it
then serves its clock's mapping at ``CAPSERVE_CLOCK_URL`` (``capserve_sandbox.clock_server``), and every
"now" the campaign takes, and every wall time it schedules a run at, comes from that mapping. The code is
the same in both cases: only the mapping differs.

A simulated clock stops at each waypoint until the run scheduled for it says it has started
(``begin_at_waypoint``, the run's first act), so a run a busy machine starts late does not fire late on the
block; a run started before the clock gets there (an earlier run's hold moved the clock back) waits for it.
While a run works on the block it says so (``working_on_the_block``): the simulated clock then runs no
faster than near wall time, so work that a busy machine slows down does not cost hours of the block.
On AWS there is nothing to say or wait for: Prefect starts the run at its time, and time is time.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from urllib.parse import quote
from uuid import uuid4

import httpx

from capserve.core.environ import CLOCK_URL_ENV
from capserve.core.errors import PermanentError, RetryableError
from capserve.core.warp import WarpedWindow

_log = logging.getLogger(__name__)


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


def wall_time_of(block_time: datetime) -> datetime:
    """The wall time to stamp a fact that happened at ``block_time`` on the campaign's clock.

    On AWS the two clocks are one, so the fact's own time. On a simulated clock the fact has just happened (a
    campaign stamps it with ``campaign_now()``), so this host's time now; asking the clock's mapping would
    cost a request per event and could fail, and an event is never worth failing a stage for.
    """
    return block_time if _url() is None else datetime.now(UTC)


# The shortest pause a poll takes on a simulated block: polls stay cheap for the machine however fast the clock runs.
SHORTEST_POLL_WALL_S = 0.2


def wall_seconds(block_s: float) -> float:
    """How long to pause on this host for ``block_s`` to pass on the campaign's clock, at its rate now.

    Every poll interval (15 s between looks at a node group, say) is a span of the block: on AWS the same number
    of seconds. On a simulated block a wall second is a minute or more of the block, so a 15-s pause would
    put up to a quarter of an hour of the block between a resource being ready and the campaign seeing it:
    the pause is the same span of the block, at least ``SHORTEST_POLL_WALL_S`` and never longer than asked.
    A clock that does not answer leaves the pause as asked (polling is never the reason a run stops).
    """
    if _url() is None or block_s <= 0:
        return block_s
    try:
        window = campaign_window()
    except RetryableError:
        return block_s
    rate = window.rate_at(window.to_sim(datetime.now(UTC)))
    return min(block_s, max(SHORTEST_POLL_WALL_S, block_s / rate))


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


def begin_at_waypoint(waypoint: datetime, *, poll_seconds: float = 2.0) -> datetime:
    """A scheduled run's first act: tell a simulated clock that the run for ``waypoint`` has started, after
    waiting until the clock shows it; when the run began, on the campaign's clock (the report's ``fired_at``).

    The clock stops at the waypoint until it is told, so the time returned is the waypoint itself unless the
    run came after the clock's longest hold (then it is late on the block too, and the report shows it).
    Without a clock URL (AWS), the host's time now.
    """
    url = _url()
    if url is None:
        return datetime.now(UTC)
    while True:
        try:
            answer = httpx.post(f"{url}/waypoints/{quote(waypoint.isoformat(), safe='')}/started", timeout=10)
            answer.raise_for_status()
        except httpx.HTTPError as exc:
            raise RetryableError(f"the clock at {CLOCK_URL_ENV}={url} did not answer: {type(exc).__name__}") from exc
        said = answer.json()
        now = datetime.fromisoformat(said["now"])
        if said["started"]:
            return now
        # Early: an earlier run's late start held the clock (or work slowed it), so it reaches this waypoint later
        # than Prefect started this run. As the mapping stands it gets there by ``latest_wall`` (every gate on the
        # way holding its longest); a clock that says it has not, past that, is not to be waited for.
        window = WarpedWindow.model_validate(said["window"])
        wall = datetime.now(UTC)
        if wall > window.latest_wall(max(waypoint, window.anchor_sim)) + timedelta(seconds=10):
            _log.warning("the clock never reached %s (it shows %s): the run goes on early", waypoint.isoformat(),
                         now.isoformat())
            return now
        # Ask again when the clock could show the waypoint if no gate holds it on the way (it stops there until
        # this run has said so: waking a little late costs wall time, not the block's time), and every
        # ``poll_seconds`` meanwhile, since an earlier gate's release moves it.
        wait = (window.to_wall(max(waypoint, window.anchor_sim)) - wall).total_seconds()
        time.sleep(min(max(wait, 0.2), poll_seconds))


@contextmanager
def working_on_the_block() -> Iterator[None]:
    """Real work on the block (a scheduled run's, a redeploy's): a simulated clock runs no faster than near wall
    time meanwhile. Nothing on AWS. Best effort: the work goes on whether or not the clock answers."""
    url = _url()
    if url is None:
        yield
        return
    token = uuid4().hex
    _tell_work(url, token, "begin")
    try:
        yield
    finally:
        _tell_work(url, token, "end")


def _tell_work(url: str, token: str, what: str) -> None:
    try:
        httpx.post(f"{url}/work/{token}/{what}", timeout=10).raise_for_status()
    except httpx.HTTPError as exc:
        _log.warning("the clock at %s=%s was not told that work %s: %s", CLOCK_URL_ENV, url,
                     "began" if what == "begin" else "ended", type(exc).__name__)
