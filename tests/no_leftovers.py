"""The test session leaves no process behind (a pytest plugin; tests/conftest.py loads it).

- At the start, the session starts capserve's watchdog (``capserve.runtime.watchdog``): a run stopped with
  SIGTERM (which pytest does not handle: no fixture's teardown runs) or SIGKILL leaves no Prefect server, worker
  or stand-in running; they are stopped as the session's process ends.
- At the end, every process the session started must be gone: any still alive after a grace period is stopped
  (SIGTERM, then SIGKILL), listed, and fails the session, so a test that forgets to stop what it started is
  found at once, not 33 minutes later. Under xdist each worker checks its own; the controller runs no test.
"""

from __future__ import annotations

import os
import time

import pytest

from capserve.runtime import watchdog

GRACE_S = 10.0  # a server stopped by a fixture's teardown may still be writing its last lines


def pytest_configure(config: pytest.Config) -> None:
    watchdog.watch()


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return cmdline.read().replace(b"\0", b" ").decode(errors="replace").strip()[:160]
    except OSError:
        return "?"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if session.config.pluginmanager.hasplugin("dsession"):  # xdist's controller: its workers check their own
        return
    mine = os.getpid()
    skip = frozenset(pid for pid in [watchdog.watchdog_pid()] if pid is not None)
    deadline = time.monotonic() + GRACE_S
    while (left := watchdog.descendants(mine, skip)) and time.monotonic() < deadline:
        time.sleep(0.2)
    if not left:
        return
    named = {pid: _command(pid) for pid in left}
    watchdog.stop(left)
    lines = "\n".join(f"  {pid}: {command}" for pid, command in named.items())
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    message = f"the test session left {len(left)} process(es) running (now stopped); a test must stop what it starts:"
    if reporter is not None:
        reporter.write_sep("!", "PROCESSES LEFT RUNNING", red=True)
        reporter.write_line(f"{message}\n{lines}")
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
