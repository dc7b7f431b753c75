"""SIGTERM stops a capserve command as Ctrl-C does: exit 130, one line, no traceback (capserve/cli/__init__.py)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time


def test_sigterm_stops_a_command_with_exit_130_and_no_traceback() -> None:
    with socket.socket() as silent:  # an endpoint that accepts and never answers: the command waits on it
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        command = subprocess.Popen(  # noqa: S603  # our own interpreter and CLI
            [sys.executable, "-m", "capserve.cli", "eval", "--url", url, "--model", "m", "--profile", "smoke",
             "--timeout", "300"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "NO_COLOR": "1"},
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # wait until it is connected (inside the command, not at import)
            try:
                silent.settimeout(1)
                connection, _ = silent.accept()
                break
            except TimeoutError:
                assert command.poll() is None, command.communicate()
        else:
            raise AssertionError("the command never called the endpoint")
        with connection:
            command.send_signal(signal.SIGTERM)
            out, err = command.communicate(timeout=180)  # it reports the flow crashed first: slow when loaded
    assert command.returncode == 130, (out, err)
    assert "interrupted" in err and "Traceback" not in err + out
