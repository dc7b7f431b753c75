"""The tether (``capserve.runtime.tether``): a child of the CLI does not outlive a CLI killed outright."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from capserve.runtime.prefect_server import _spawn

PARENT = """
import sys, time
from pathlib import Path
from capserve.runtime.prefect_server import _spawn

child = _spawn("sleeper", ["sleep", "120"], {"PATH": "/usr/bin:/bin"}, Path(sys.argv[1]))
print(child.process.pid, flush=True)
time.sleep(120)
"""


def _gone(pid: int, within_s: float = 15.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:  # a child of this process: reap it
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        time.sleep(0.1)
    return False


def _command_under(tether: int) -> int:
    children = Path(f"/proc/{tether}/task/{tether}/children")
    deadline = time.monotonic() + 10
    while not (found := children.read_text().split()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return int(found[0])


def test_a_child_stops_when_the_process_that_started_it_is_killed(tmp_path: Path) -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(tmp_path / "sleeper.log")], stdout=subprocess.PIPE,
                              text=True)
    assert parent.stdout is not None
    tether = int(parent.stdout.readline())
    command = _command_under(tether)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    assert _gone(tether) and _gone(command), "the tethered command outlived its killed parent"
    assert "is gone; stopping sleep" in (tmp_path / "sleeper.log").read_text()


def test_stopping_a_tethered_child_stops_the_command_and_passes_its_exit_code(tmp_path: Path) -> None:
    child = _spawn("sleeper", ["sleep", "120"], {"PATH": "/usr/bin:/bin"}, tmp_path / "sleeper.log")
    command = _command_under(child.process.pid)
    assert child.stop(grace_seconds=5) == 128 + signal.SIGINT
    assert _gone(command)
    ended = _spawn("exits", ["sh", "-c", "exit 3"], {"PATH": "/usr/bin:/bin"}, tmp_path / "exits.log")
    assert ended.process.wait(timeout=15) == 3


KEEPING_PARENT = """
import sys
from pathlib import Path
from capserve.runtime.prefect_server import _spawn

child = _spawn("sleeper", ["sleep", "120"], {"PATH": "/usr/bin:/bin"}, Path(sys.argv[1]), tethered=False)
print(child.process.pid, flush=True)
"""


def test_an_untethered_child_outlives_the_process_that_started_it(tmp_path: Path) -> None:
    # What `capserve up --keep-server` asks for: the server and worker stay after the command has ended.
    parent = subprocess.run([sys.executable, "-c", KEEPING_PARENT, str(tmp_path / "sleeper.log")],
                            capture_output=True, text=True, check=True)
    command = int(parent.stdout.split()[0])
    try:
        time.sleep(1.5)  # three of the tether's polls: a tethered command would be stopping by now
        os.kill(command, 0)  # still there (ProcessLookupError otherwise)
        assert Path(f"/proc/{command}/cmdline").read_bytes().split(b"\0")[0] == b"sleep"  # not under a tether
    finally:
        os.killpg(command, signal.SIGKILL)  # its own session: the group is this one sleep
