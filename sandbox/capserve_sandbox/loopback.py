"""A small HTTP endpoint of the sandbox on 127.0.0.1 (the simulated clock, the fault harness's control)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from capserve_sandbox.failures import FAILURES


class ReportingHTTPServer(ThreadingHTTPServer):
    """A loopback server whose handler's unexpected errors are reported (``capserve_sandbox.failures``) under
    ``stand_in``, instead of printed to stderr in the middle of the demo's output (``socketserver``'s default)."""

    daemon_threads = True
    stand_in = "HTTP server"

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exception()
        if isinstance(error, ConnectionError):  # the client went away: theirs, not a failure of the stand-in
            return
        if error is not None:
            FAILURES.report(self.stand_in, error, doing=f"a request from {client_address}")


@contextmanager
def serve_on_loopback(handler: type[BaseHTTPRequestHandler], name: str) -> Iterator[str]:
    """Serve ``handler`` on a free port of 127.0.0.1 in a thread; yields the base URL, stops on exit."""
    server = ReportingHTTPServer(("127.0.0.1", 0), handler)
    server.stand_in = name
    thread = threading.Thread(target=server.serve_forever, name=name, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
