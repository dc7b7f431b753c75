"""A loopback control endpoint for the ``capserve sandbox`` service: holds, and what the sandbox saw.

The fault matrix (``python -m faults``) runs in another process than the service, and needs both to
set knobs on the running sandbox and to learn when a request is being held, so a small HTTP endpoint
(rather than a knob file the service would poll and answer through) is the simplest two-way channel:

- ``GET /state``: the holds (``capserve_sandbox.gates``), every Capacity Block bought (with its tags),
  every AWS ``Delete*`` call (with its path and time), the stand-ins that failed (``capserve_sandbox.failures``,
  one line each), and the service's pid;
- ``POST /hold`` ``{"point": "purchase", "match": "*"}``: hold the next matching request at a point;
- ``POST /release`` ``{"point": "purchase"}`` (or ``{}`` for every point): let it go on.

It listens on 127.0.0.1 only, like the stand-ins it controls (moto itself takes any request there).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from typing import Any

from capserve_sandbox.aws_ext import capacity as capacity_ext
from capserve_sandbox.aws_ext import eks as eks_ext
from capserve_sandbox.failures import FAILURES
from capserve_sandbox.gates import GATES
from capserve_sandbox.loopback import serve_on_loopback


def state() -> dict[str, Any]:
    deletes = [
        {"service": c.service, "action": c.action, "path": c.path, "at": c.at}
        for c in eks_ext.calls() if c.action.startswith("Delete")
    ]
    return {"pid": os.getpid(), "holds": GATES.status(), "reservations": capacity_ext.reservations(),
            "deletes": deletes, "failures": [failure.line() for failure in FAILURES.failures()]}


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/state":
            self._answer(200, state())
        else:
            self._answer(404, {"error": f"no {self.path}: GET /state, POST /hold, POST /release"})

    def do_POST(self) -> None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            if self.path == "/hold":
                GATES.arm(str(body["point"]), str(body.get("match", "*")))
            elif self.path == "/release":
                GATES.release(body.get("point"))
            else:
                self._answer(404, {"error": f"no {self.path}: POST /hold or /release"})
                return
        except (ValueError, KeyError, TypeError) as exc:
            self._answer(400, {"error": f"{type(exc).__name__}: {exc}"})
            return
        self._answer(200, {"holds": GATES.status()})


@contextmanager
def control_endpoint() -> Iterator[str]:
    """Serve the control endpoint on 127.0.0.1 (a free port); yields its URL; releases every hold on exit."""
    with serve_on_loopback(_Handler, "capserve-sandbox-control") as url:
        try:
            yield url
        finally:
            GATES.release()
