"""The watchdog (``capserve.runtime.watchdog``): what a command started, in any session, does not outlive the
command killed outright; what it asked to keep does."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from capserve.runtime.watchdog import _started

PARENT = """
import subprocess, sys, time
from capserve.runtime import watchdog

watchdog.watch()
sleeper = subprocess.Popen(["sleep", "300"], start_new_session=True)  # as the sandbox starts its processes
if sys.argv[1] == "keep":
    watchdog.keep(sleeper.pid)
print(sleeper.pid, flush=True)
time.sleep(300)
"""


def _gone(pid: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while _started(pid) is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    return _started(pid) is None


@pytest.mark.parametrize("keep", [False, True], ids=["started", "kept"])
def test_a_process_started_in_its_own_session_stops_with_its_killed_starter_unless_kept(keep: bool) -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT, "keep" if keep else "no"], stdout=subprocess.PIPE,
                              text=True)
    assert parent.stdout is not None
    sleeper = int(parent.stdout.readline())
    time.sleep(3)  # several of the watchdog's snapshots after the sleeper started
    parent.kill()
    parent.wait()
    parent.stdout.close()
    try:
        gone = _gone(sleeper, within_s=3.0 if keep else 10.0)
    finally:
        if _started(sleeper) is not None:
            os.kill(sleeper, signal.SIGKILL)
    assert gone is not keep
