"""The session check (tests/no_leftovers.py): a test run that leaves a process running fails and stops it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from capserve.runtime.watchdog import _started

TESTS = Path(__file__).resolve().parents[1]

LEAKY = """
import subprocess

def test_starts_a_process_and_forgets_it(tmp_path_factory):
    sleeper = subprocess.Popen(["sleep", "300"], start_new_session=True)
    (tmp_path_factory.getbasetemp().parent / "sleeper.pid").write_text(str(sleeper.pid))
"""


def test_a_session_that_leaves_a_process_running_fails_and_stops_it(tmp_path: Path) -> None:
    (tmp_path / "test_leaky.py").write_text(LEAKY)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no_leftovers", "-p", "no:cacheprovider", "--basetemp",
         str(tmp_path / "base"), "-q", str(tmp_path / "test_leaky.py")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False,
    )
    pid = int((tmp_path / "sleeper.pid").read_text())
    deadline = time.monotonic() + 10
    while _started(pid) is not None and time.monotonic() < deadline:  # the check stops it before the run ends
        time.sleep(0.1)
    alive = _started(pid) is not None
    if alive:
        os.kill(pid, 9)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "left 1 process(es) running" in done.stdout and "sleep 300" in done.stdout, done.stdout
    assert not alive
