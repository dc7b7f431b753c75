"""The sandbox clock over HTTP, for the campaign's processes: what time it is in the simulated window.

A worker runs each flow run in its own process, so the campaign cannot read ``CLOCK`` directly; it reads
the mapping here instead (``capserve.tasks.clock``, pointed at this server by ``CAPSERVE_CLOCK_URL``):

- ``GET /window``: the ``WarpedWindow`` JSON (the campaign computes "now" and wall times from it);
- ``POST /waypoints`` ``{"waypoints": [iso, …], "spans": [[iso, iso], …]}``: register them, answer the new
  window, or 409 with the reason when they would move a waypoint whose run is already scheduled;
- ``POST /waypoints/<iso, URL-quoted>/started``: the run scheduled for that waypoint has started, so the
  clock, which stops at each waypoint until then, goes on; answers ``{"started", "now", "window"}``, where
  ``started`` is false while the clock has not reached the waypoint yet (the run waits, and asks again);
- ``POST /work/<token>/begin`` and ``/work/<token>/end``: a run's real work on the block began or ended
  (the clock runs no faster than near wall time while any works); answers the window.

Loopback only; no state beyond ``CLOCK``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from http.server import BaseHTTPRequestHandler
from urllib.parse import unquote

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError

from capserve_sandbox.clock import CLOCK
from capserve_sandbox.loopback import serve_on_loopback


class Registration(BaseModel):
    model_config = ConfigDict(extra="forbid")

    waypoints: list[AwareDatetime] = Field(default_factory=list, max_length=100)
    spans: list[tuple[AwareDatetime, AwareDatetime]] = Field(default_factory=list, max_length=20)


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002  # quiet: tests read their own logs
        del format, args

    def _answer(self, status: int, body: str) -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802  # http.server's naming
        if self.path != "/window":
            self._answer(404, json.dumps({"error": f"no {self.path}; GET /window"}))
            return
        self._answer(200, CLOCK.window().model_dump_json())

    def do_POST(self) -> None:  # noqa: N802
        parts = self.path.split("/")
        if len(parts) == 4 and parts[1] == "waypoints" and parts[3] == "started":
            self._started(unquote(parts[2]))
            return
        if len(parts) == 4 and parts[1] == "work" and parts[3] in ("begin", "end"):
            if not parts[2].isalnum() or len(parts[2]) > 64:
                self._answer(400, json.dumps({"error": "a work token is up to 64 letters and digits"}))
                return
            self._answer(200, CLOCK.working(parts[2], busy=parts[3] == "begin").model_dump_json())
            return
        if self.path != "/waypoints":
            self._answer(404, json.dumps({"error": f"no {self.path}; POST /waypoints or /waypoints/<iso>/started"}))
            return
        length = int(self.headers.get("Content-Length") or 0)
        try:
            asked = Registration.model_validate_json(self.rfile.read(min(length, 65_536)))
            window = CLOCK.register(asked.waypoints, [(a, b) for a, b in asked.spans])
        except (ValidationError, ValueError) as exc:
            self._answer(409, json.dumps({"error": str(exc)[:2000]}))
            return
        self._answer(200, window.model_dump_json())

    def _started(self, iso: str) -> None:
        try:
            waypoint = datetime.fromisoformat(iso)
        except ValueError:
            self._answer(400, json.dumps({"error": f"not an ISO 8601 time: {iso[:100]!r}"}))
            return
        if waypoint.tzinfo is None:
            self._answer(400, json.dumps({"error": f"{iso[:100]!r} has no time zone"}))
            return
        started, now, window = CLOCK.started(waypoint)
        self._answer(200, json.dumps({"started": started, "now": now.isoformat(),
                                      "window": window.model_dump(mode="json")}))


@contextmanager
def clock_server() -> Iterator[str]:
    """Serve the sandbox clock on 127.0.0.1 (a free port); yields its base URL."""
    with serve_on_loopback(_Handler, "sandbox-clock") as url:
        yield url


