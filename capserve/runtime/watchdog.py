"""``python -m capserve.runtime.watchdog PID``: once process PID is gone, stop every process it started.

The tether (``capserve.runtime.tether``) stops the server and worker capserve starts itself. Other processes are
started by libraries, each its own way: Prefect's temporary server (a ``uvicorn`` subprocess that
``prefect.server.api.server.SubprocessASGIServer`` starts from whichever thread first needs the API, when
``PREFECT_API_URL`` is unset), the sandbox's stand-ins (the kubelet's pod processes, a vLLM on the CPU, each in
its own session). They are stopped when the command exits normally; a command killed outright (SIGKILL, the
OOM killer) stops none of them, and the kernel gives them to init, where they run on for minutes.

So a command that starts such processes first starts this watchdog (``watch()``), whose standard input is a
pipe only the command holds open. Every ``SNAPSHOT_SECONDS`` the watchdog records the command's descendants
(pid, parent and start time, from ``/proc``); once the pipe reaches end of file (the command has ended,
however: the kernel closes its descriptors) it sends SIGTERM to each recorded process still alive (same pid,
same start time: never a stranger that reused a pid), then SIGKILL after ``STOP_GRACE_SECONDS``. A process the
command means to outlive it (``capserve up --keep-server``) is named on the pipe (``keep()``) and spared with
its descendants. The watchdog runs in its own session, so a Ctrl-C at the terminal reaches only the command.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

PROC = Path("/proc")
SNAPSHOT_SECONDS = 0.5
STOP_GRACE_SECONDS = 5.0

_pipe: IO[bytes] | None = None  # the write end, in the watched command
_watchdog: subprocess.Popen[bytes] | None = None  # held, never waited for: it outlives this process by design


def watch() -> None:
    """Start this process's watchdog (once; Linux only: elsewhere there is no ``/proc`` to read)."""
    global _pipe, _watchdog
    if _pipe is not None or not PROC.joinpath("self", "task").is_dir():
        return
    _watchdog = subprocess.Popen(  # noqa: S603  # our own interpreter and module
        [sys.executable, "-m", "capserve.runtime.watchdog", str(os.getpid())],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    _pipe = _watchdog.stdin
    keep(_watchdog.pid)
    assert _watchdog.stdout is not None  # noqa: S101 - narrows the type for mypy
    _watchdog.stdout.readline()  # its first snapshot is taken: what starts from now on is recorded
    _watchdog.stdout.close()


def keep(pid: int) -> None:
    """Spare ``pid`` and its descendants: they are meant to outlive this process."""
    if _pipe is not None:
        _pipe.write(f"keep {pid}\n".encode())
        _pipe.flush()


# The reads below use ``os`` and bytes, not ``pathlib`` and text: a snapshot reads a file per thread of every
# descendant twice a second for the whole life of the command, and ``Path.read_text`` cost 2.4 times as much CPU.


def _read(path: str) -> bytes:
    with open(path, "rb") as file:
        return file.read()


def _started(pid: int) -> str | None:
    """The process's start time (``/proc/PID/stat`` field 22), None when it is gone or a zombie."""
    try:
        fields = _read(f"{PROC}/{pid}/stat").rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] == b"Z" else fields[19].decode()


def children(pid: int) -> list[int]:
    """The children of every thread of ``pid`` (a thread's children are listed under that thread)."""
    found: list[int] = []
    task = f"{PROC}/{pid}/task"
    try:
        threads = os.listdir(task)
    except OSError:
        return found
    for thread in threads:
        try:
            found += [int(child) for child in _read(f"{task}/{thread}/children").split()]
        except OSError:
            continue
    return found


def descendants(root: int, skip: frozenset[int] = frozenset()) -> list[int]:
    """Every live descendant of ``root`` now, but ``skip`` and theirs."""
    found: list[int] = []
    frontier = [root]
    while frontier:
        for child in children(frontier.pop()):
            if child not in skip and _started(child) is not None:
                found.append(child)
                frontier.append(child)
    return found


def watchdog_pid() -> int | None:
    """This process's watchdog, if ``watch()`` started one."""
    return _watchdog.pid if _watchdog is not None else None


class Record:
    """Every descendant seen so far: pid → (parent, start time)."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.seen: dict[int, tuple[int, str]] = {}
        self.kept: set[int] = set()

    def snapshot(self) -> None:
        frontier = [self.root]
        while frontier:
            parent = frontier.pop()
            for child in children(parent):
                if child in self.kept:
                    continue
                started = _started(child)
                if started is not None:
                    self.seen[child] = (parent, started)
                    frontier.append(child)

    def keep(self, pid: int) -> None:
        self.kept.add(pid)
        spared = {pid}
        grew = True
        while grew:
            below = {child for child, (parent, _) in self.seen.items() if parent in spared} - spared
            spared |= below
            grew = bool(below)
        for child in spared:
            self.seen.pop(child, None)

    def alive(self) -> list[int]:
        return [pid for pid, (_, started) in self.seen.items() if _started(pid) == started]


def stop(pids: list[int], grace_seconds: float = STOP_GRACE_SECONDS) -> list[int]:
    """SIGTERM to each, then SIGKILL to those still alive after ``grace_seconds``; the pids that needed it."""
    started = {pid: _started(pid) for pid in pids}
    for sig in (signal.SIGTERM, signal.SIGKILL):
        left = [pid for pid in pids if started[pid] is not None and _started(pid) == started[pid]]
        for pid in left:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                continue
        if sig == signal.SIGKILL or not left:
            return left
        deadline = time.monotonic() + grace_seconds
        while time.monotonic() < deadline and any(_started(pid) == started[pid] for pid in left):
            time.sleep(0.1)
    return []


def run(parent: int, commands: IO[bytes]) -> int:
    record = Record(parent)
    buffered = b""
    record.snapshot()
    print("ready", flush=True)
    sys.stdout.close()
    while True:
        record.snapshot()
        ready, _, _ = select.select([commands], [], [], SNAPSHOT_SECONDS)
        if not ready:
            continue
        chunk = os.read(commands.fileno(), 4096)
        if not chunk:  # end of file: the command is gone
            break
        buffered += chunk
        *lines, buffered = buffered.split(b"\n")
        for line in lines:
            word, _, pid = line.decode().partition(" ")
            if word == "keep" and pid.isdigit():
                record.keep(int(pid))
    record.snapshot()  # what the command's last moment left (its pid's children are now init's: none found)
    stop(record.alive())
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not argv[0].isdigit():
        print("usage: python -m capserve.runtime.watchdog PID  (commands on stdin)", file=sys.stderr)
        return 2
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # only end of file on stdin ends the watch
    return run(int(argv[0]), sys.stdin.buffer)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
