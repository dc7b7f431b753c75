"""The campaign's clock in a process of the campaign, when the sandbox plays a block: ``capserve_sandbox.clock_server``
over HTTP (a worker runs each flow run in its own process, so the campaign cannot read ``CLOCK`` directly).

The product asks ``capserve.tasks.the_clock.clock()``; the sandbox plugs this in by setting ``CAPSERVE_CLOCK`` to
``capserve_sandbox.clock_client:HttpClock <url>`` (``plugged``) in the environment of the CLI and the workers.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime, timedelta
from urllib.parse import quote
from uuid import uuid4

import httpx

from capserve.core.clock import Pace
from capserve.core.errors import PermanentError, RetryableError
from capserve.tasks.the_clock import CLOCK_ENV
from capserve_sandbox.warp import WarpedWindow

_log = logging.getLogger(__name__)

# The shortest pause a poll takes on a simulated block: polls stay cheap for the machine however fast the clock runs.
SHORTEST_POLL_WALL_S = 0.2


def plugged(url: str) -> dict[str, str]:
    """The environment that makes the product's processes ask the sandbox's clock at ``url``."""
    return {CLOCK_ENV: f"{__name__}:HttpClock {url}"}


class HttpClock:
    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def _failed(self, exc: httpx.HTTPError) -> RetryableError:
        return RetryableError(f"the sandbox's clock at {self.url} did not answer: {type(exc).__name__}")

    def window(self) -> WarpedWindow:
        """The mapping between wall time and the campaign's clock, as it stands now."""
        try:
            answer = httpx.get(f"{self.url}/window", timeout=10)
            answer.raise_for_status()
        except httpx.HTTPError as exc:
            raise self._failed(exc) from exc
        return WarpedWindow.model_validate_json(answer.content)

    def now(self) -> datetime:
        return self.window().to_sim(datetime.now(UTC))

    def wall_time_of(self, block_time: datetime) -> datetime:
        # The fact has just happened (stamped with ``now()``): this host's time now; asking the clock's mapping would
        # cost a request per event and could fail, and an event is never worth failing a stage for.
        del block_time
        return datetime.now(UTC)

    def sleep(self, block_s: float) -> None:
        """The same span of the block, at the clock's rate now: at least ``SHORTEST_POLL_WALL_S`` and never longer
        than asked. A clock that does not answer leaves the pause as asked (polling is never the reason a run stops)."""
        if block_s <= 0:
            return
        try:
            window = self.window()
        except RetryableError:
            time.sleep(block_s)
            return
        rate = window.rate_at(window.to_sim(datetime.now(UTC)))
        time.sleep(min(block_s, max(SHORTEST_POLL_WALL_S, block_s / rate)))

    def plan(self, waypoints: Iterable[datetime], spans: Iterable[tuple[datetime, datetime]] = ()) -> None:
        body = {
            "waypoints": [point.isoformat() for point in waypoints],
            "spans": [[start.isoformat(), end.isoformat()] for start, end in spans],
        }
        try:
            answer = httpx.post(f"{self.url}/waypoints", json=body, timeout=10)
        except httpx.HTTPError as exc:
            raise self._failed(exc) from exc
        if answer.status_code == 409:
            raise PermanentError(f"the simulated clock refused the lease's waypoints: {answer.json().get('error')}")
        if answer.is_error:
            raise RetryableError(f"the sandbox's clock at {self.url} answered {answer.status_code}")

    def wall_time_to_schedule(self, at: datetime) -> datetime:
        window = self.window()
        return window.to_wall(max(at, window.anchor_sim))

    def begin_at(self, waypoint: datetime, *, poll_seconds: float = 2.0) -> datetime:
        while True:
            try:
                answer = httpx.post(f"{self.url}/waypoints/{quote(waypoint.isoformat(), safe='')}/started", timeout=10)
                answer.raise_for_status()
            except httpx.HTTPError as exc:
                raise self._failed(exc) from exc
            said = answer.json()
            now = datetime.fromisoformat(said["now"])
            if said["started"]:
                return now
            window = WarpedWindow.model_validate(said["window"])
            wall = datetime.now(UTC)
            if wall > window.latest_wall(max(waypoint, window.anchor_sim)) + timedelta(seconds=10):
                _log.warning("the clock never reached %s (it shows %s): the run goes on early", waypoint.isoformat(),
                             now.isoformat())
                return now
            wait = (window.to_wall(max(waypoint, window.anchor_sim)) - wall).total_seconds()
            time.sleep(min(max(wait, 0.2), poll_seconds))

    @contextmanager
    def _work(self) -> Iterator[None]:
        token = uuid4().hex
        self._tell_work(token, "begin")
        try:
            yield
        finally:
            self._tell_work(token, "end")

    def working(self) -> AbstractContextManager[None]:
        return self._work()

    def _tell_work(self, token: str, what: str) -> None:
        try:
            httpx.post(f"{self.url}/work/{token}/{what}", timeout=10).raise_for_status()
        except httpx.HTTPError as exc:
            _log.warning("the sandbox's clock at %s was not told that work %s: %s", self.url,
                         "began" if what == "begin" else "ended", type(exc).__name__)

    def pace(self) -> Pace | None:
        window = self.window()
        if not window.simulated:
            return None
        return Pace(fast_rate=window.fast_rate, near_rate=window.near_rate,
                    working_rate=window.busy_rate or window.near_rate)
