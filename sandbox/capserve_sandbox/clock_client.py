"""The campaign's clock in a process of the campaign when the sandbox plays a block: ``capserve_sandbox.clock_server``
over HTTP (a worker runs each flow run in its own process, so the campaign cannot read ``CLOCK`` directly).

The product asks ``capserve.tasks.the_clock.clock()``; the sandbox plugs this in by setting ``CAPSERVE_CLOCK`` to
``capserve_sandbox.clock_client:HttpClock <url>`` (``plugged``) in the environment of the CLI and the workers.

Each process is one *party* of the clock (``capserve_sandbox.clock``): it works while a run's ``working()`` is open
(from ``begin_at``, for a scheduled run), and a thread of it that sleeps, or waits on the outside (a Kubernetes
watch: ``waiting``), lets the clock move meanwhile, to the instant it wakes at the latest.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote
from uuid import uuid4

import httpx

from capserve.core.clock import HostClock
from capserve.core.errors import PermanentError, RetryableError
from capserve.tasks.the_clock import CLOCK_ENV

_log = logging.getLogger(__name__)

WAITING_WALL_S = 1.0
"""How long a wait on the outside (a watch window) lasts on this host before it asks again: the block moves by its
own rule meanwhile, so a window of the block's length in wall time would only make the demo slower."""


def plugged(url: str) -> dict[str, str]:
    """The environment that makes the product's processes ask the sandbox's clock at ``url``."""
    return {CLOCK_ENV: f"{__name__}:HttpClock {url}"}


def jumping(url: str) -> dict[str, str]:
    """The environment that makes the product's processes read the time from the sandbox's clock at ``url`` when
    the window is not simulated (``JumpingClock``)."""
    return {CLOCK_ENV: f"{__name__}:JumpingClock {url}"}


class JumpingClock(HostClock):
    """The campaign's clock when the sandbox does not simulate the window: the host's, moved forward where the
    sandbox's AWS jumped to a reservation's start instead of waiting for it (``capserve_sandbox.aws_ext.capacity``),
    so the stages are timed on the clock the reservation's window is on. Only ``now`` is asked; waits are the host's."""

    def __init__(self, url: str) -> None:
        self._clock = HttpClock(url)

    def now(self) -> datetime:
        return self._clock.now()

    def wall_time_of(self, block_time: datetime) -> datetime:
        del block_time  # ahead of the host's by the jump: the fact has just happened, on this host
        return datetime.now(UTC)


class HttpClock:
    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._token = self._new_token()
        self._depth = 0  # open ``working()`` blocks of this process
        self._begun = False  # ``begin_at`` made this process work (a ``working()`` takes it over)
        self._client: httpx.Client | None = None  # of process ``_client_pid``: one per process, its connections kept
        self._client_pid = 0
        atexit.register(self._at_exit)

    @staticmethod
    def _new_token() -> str:
        return f"p{os.getpid()}-{uuid4().hex[:16]}"

    @property
    def token(self) -> str:
        if os.getpid() != self._pid:  # a forked child is a party of its own
            self._pid, self._token, self._depth, self._begun = os.getpid(), self._new_token(), 0, False
        return self._token

    def _http(self) -> httpx.Client:
        """This process's client (a forked child gets its own: the parent's connections are not its to use). One
        client per call built an SSL context (reading the CA bundle) each time: the most CPU the clock cost."""
        with self._lock:
            if self._client is None or self._client_pid != os.getpid():
                self._client, self._client_pid = httpx.Client(base_url=self.url, timeout=60), os.getpid()
            return self._client

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        try:
            answer = self._http().request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise RetryableError(f"the sandbox's clock at {self.url} did not answer: {type(exc).__name__}") from exc
        if answer.status_code == 409:
            raise PermanentError(f"the simulated clock refused: {answer.json().get('error')}")
        if answer.is_error:
            said = f"{answer.status_code}: {answer.text[:200]}"
            raise RetryableError(f"the sandbox's clock at {self.url} answered {said}")
        return answer.json()

    def now(self) -> datetime:
        return datetime.fromisoformat(self._call("GET", "/now")["now"])

    def wall_time_of(self, block_time: datetime) -> datetime:
        # The fact has just happened (stamped with ``now()``): this host's time now; asking the clock would cost a
        # request per event and could fail, and an event is never worth failing a stage for.
        del block_time
        return datetime.now().astimezone()

    def sleep(self, block_s: float) -> None:
        """Return once ``block_s`` have passed on the block (the clock gets there when nothing else works)."""
        if block_s <= 0:
            return
        thread, token = str(threading.get_ident()), self.token
        try:
            said = self._call("POST", f"/parties/{token}/sleep",
                              {"thread": thread, "seconds": block_s, "pid": os.getpid()})
        except RetryableError as exc:  # polling is never the reason a run stops
            _log.warning("%s: pausing %.0f s on this host instead", exc, block_s)
            time.sleep(block_s)
            return
        try:
            due = bool(said["due"])
            while not due:
                due = bool(self._call("POST", f"/parties/{token}/wait", {"thread": thread})["due"])
        finally:
            self._tell(f"/parties/{token}/awake", {"thread": thread})

    @contextmanager
    def _waiting(self, block_s: float) -> Iterator[float]:
        thread, token = str(threading.get_ident()), self.token
        self._tell(f"/parties/{token}/sleep",
                   {"thread": thread, "seconds": max(block_s, 0.0), "pid": os.getpid(), "soft": True})
        try:
            yield min(block_s, WAITING_WALL_S)
        finally:
            self._tell(f"/parties/{token}/awake", {"thread": thread})

    def waiting(self, block_s: float) -> AbstractContextManager[float]:
        return self._waiting(block_s)

    def plan(self, due: Iterable[datetime], working: Iterable[tuple[datetime, datetime]] = ()) -> None:
        self._call("POST", "/waypoints", {
            "waypoints": [point.isoformat() for point in due],
            "spans": [[start.isoformat(), end.isoformat()] for start, end in working],
        })

    def wall_time_to_schedule(self, at: datetime) -> datetime:
        return datetime.fromisoformat(self._call("GET", f"/schedule/{quote(at.isoformat(), safe='')}")["wall"])

    def begin_at(self, waypoint: datetime) -> datetime:
        """Wait until the clock shows ``waypoint``, then say the run has started (the clock holds there until then,
        and while the run gets going: this process works from now on)."""
        path = f"/waypoints/{quote(waypoint.isoformat(), safe='')}/started"
        while True:
            said = self._call("POST", path, {"party": self.token, "pid": os.getpid()})
            if said["started"]:
                with self._lock:
                    self._begun = True
                return datetime.fromisoformat(said["now"])

    @contextmanager
    def _work(self) -> Iterator[None]:
        with self._lock:
            self._depth += 1
            first = self._depth == 1
        if first:
            self._tell(f"/parties/{self.token}/work", {"pid": os.getpid()})
        try:
            yield
        finally:
            with self._lock:
                self._depth -= 1
                last = self._depth == 0
                if last:
                    self._begun = False
            if last:
                self._tell(f"/parties/{self.token}/rest", {})

    def working(self) -> AbstractContextManager[None]:
        return self._work()

    def _tell(self, path: str, body: dict[str, Any]) -> None:
        """Best effort: the work goes on whether or not the clock heard (a process that ends is forgotten)."""
        try:
            self._call("POST", path, body)
        except (RetryableError, PermanentError) as exc:
            _log.warning("the sandbox's clock was not told %s: %s", path.rsplit("/", 1)[-1], exc)

    def _at_exit(self) -> None:
        if os.getpid() == self._pid and (self._depth or self._begun):
            # Quietly: at exit the logging may be gone, and a clock that is gone has nothing to be told.
            with contextlib.suppress(RetryableError, PermanentError):
                self._call("POST", f"/parties/{self._token}/rest", {})
