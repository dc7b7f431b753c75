"""The sandbox clock over HTTP, for the campaign's processes (``capserve_sandbox.clock_client``).

A worker runs each flow run in its own process, so the campaign cannot read ``CLOCK`` directly; it asks here.
Every answer is JSON; times are ISO 8601. Calls that wait (``started``, ``sleep``, ``wait``) answer within
``WAIT_S`` wall seconds whatever the clock does, saying whether what was waited for came; the client asks again.

- ``GET /now``: ``{"now"}``;
- ``GET /schedule/<iso>``: ``{"wall"}``, the wall time to schedule a run due then;
- ``POST /waypoints`` ``{"waypoints": [iso, …], "spans": [[iso, iso], …]}``: register them (``{}``), or 409 with
  the reason when they would move a waypoint whose run is already scheduled;
- ``POST /waypoints/<iso>/started`` ``{"party", "pid"}``: the run for that waypoint has started:
  ``{"started", "now"}`` (``started`` false: the clock is not there yet);
- ``POST /parties/<token>/work`` ``{"pid"}``, ``/rest``: a process's run works on the block, or no longer does;
- ``POST /parties/<token>/sleep`` ``{"thread", "seconds", "pid", "soft"}``: ``{"until", "due"}``; ``/wait``
  ``{"thread"}``: ``{"due"}``; ``/awake`` ``{"thread"}``: the sleeper has woken.

Loopback only; no state beyond ``CLOCK``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import unquote

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError

from capserve_sandbox.clock import CLOCK
from capserve_sandbox.loopback import serve_on_loopback

WAIT_S = 5.0
"""The longest a call waits for the clock before answering (the client asks again)."""


class Registration(BaseModel):
    model_config = ConfigDict(extra="forbid")

    waypoints: list[AwareDatetime] = Field(default_factory=list, max_length=100)
    spans: list[tuple[AwareDatetime, AwareDatetime]] = Field(default_factory=list, max_length=20)


class PartyCall(BaseModel):
    model_config = ConfigDict(extra="forbid")

    party: str | None = Field(None, max_length=64, pattern=r"^[A-Za-z0-9-]+$")
    thread: str = Field("", max_length=64)
    seconds: float = Field(0.0, ge=0, le=86_400 * 7)
    pid: int | None = Field(None, ge=1)
    soft: bool = False


def _instant(iso: str) -> datetime:
    value = datetime.fromisoformat(iso)
    if value.tzinfo is None:
        raise ValueError(f"{iso[:100]!r} has no time zone")
    return value


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002  # quiet: tests read their own logs
        del format, args

    def _answer(self, status: int, body: Any) -> None:
        data = (body if isinstance(body, str) else json.dumps(body)).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # http.server's naming
        parts = self.path.split("/")
        if self.path == "/now":
            self._answer(200, {"now": CLOCK.now().isoformat()})
        elif len(parts) == 3 and parts[1] == "schedule":
            try:
                at = _instant(unquote(parts[2]))
            except ValueError as exc:
                self._answer(400, {"error": str(exc)})
                return
            self._answer(200, {"wall": CLOCK.wall_time_to_schedule(at).isoformat()})
        else:
            self._answer(404, {"error": f"no {self.path}; GET /now or /schedule/<iso>"})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(min(length, 65_536)) or b"{}"
        parts = self.path.split("/")
        try:
            if self.path == "/waypoints":
                asked = Registration.model_validate_json(raw)
                try:
                    CLOCK.register(asked.waypoints, [(a, b) for a, b in asked.spans])
                except ValueError as exc:
                    self._answer(409, {"error": str(exc)[:2000]})
                    return
                self._answer(200, {})
            elif len(parts) == 4 and parts[1] == "waypoints" and parts[3] == "started":
                call = PartyCall.model_validate_json(raw)
                started, now = CLOCK.started(_instant(unquote(parts[2])), call.party, pid=call.pid, wait_s=WAIT_S)
                self._answer(200, {"started": started, "now": now.isoformat()})
            elif len(parts) == 4 and parts[1] == "parties":
                self._party(PartyCall.model_validate_json(raw), parts[2], parts[3])
            else:
                self._answer(404, {"error": f"no {self.path}"})
        except (ValidationError, ValueError) as exc:
            self._answer(400, {"error": str(exc)[:2000]})

    def _party(self, call: PartyCall, token: str, what: str) -> None:
        if not token.replace("-", "").isalnum() or len(token) > 64:
            self._answer(400, {"error": "a party token is up to 64 letters, digits and dashes"})
            return
        if what == "work":
            self._answer(200, {"now": CLOCK.work(token, pid=call.pid).isoformat()})
        elif what == "rest":
            self._answer(200, {"now": CLOCK.rest(token).isoformat()})
        elif what == "sleep":
            until, due = CLOCK.sleep(token, call.thread, call.seconds, pid=call.pid, soft=call.soft,
                                     wait_s=0.0 if call.soft else WAIT_S)
            self._answer(200, {"until": until.isoformat(), "due": due})
        elif what == "wait":
            self._answer(200, {"due": CLOCK.wait(token, call.thread, WAIT_S)})
        elif what == "awake":
            self._answer(200, {"now": CLOCK.awake(token, call.thread).isoformat()})
        else:
            self._answer(404, {"error": f"no /parties/<token>/{what}: work, rest, sleep, wait or awake"})


@contextmanager
def clock_server() -> Iterator[str]:
    """Serve the sandbox clock on 127.0.0.1 (a free port); yields its base URL."""
    with serve_on_loopback(_Handler, "sandbox-clock") as url:
        yield url
