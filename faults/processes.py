"""The process table, read from /proc: descendants of a process, and whether a process is still the same one."""

from __future__ import annotations

import os
import signal
from pathlib import Path

Proc = tuple[int, int]  # (pid, start time in clock ticks): a pid reused by another process is not the same


def _stat(pid: int) -> tuple[int, int] | None:
    try:
        fields = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] == "Z":  # a zombie has ended; only its parent has not read its exit status yet
        return None
    return int(fields[1]), int(fields[19])  # ppid, starttime


def this(pid: int) -> list[Proc]:
    """The process itself, as a one-element list (empty when it is gone)."""
    found = _stat(pid)
    return [(pid, found[1])] if found is not None else []


def descendants(pid: int) -> list[Proc]:
    children: dict[int, list[Proc]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (found := _stat(int(entry.name))) is not None:
            children.setdefault(found[0], []).append((int(entry.name), found[1]))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child[0])
    return out


def alive(procs: list[Proc]) -> list[Proc]:
    return [(pid, start) for pid, start in procs if (found := _stat(pid)) is not None and found[1] == start]


def cwd(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return ""


def signal_all(procs: list[Proc], sig: signal.Signals) -> None:
    for pid, _ in alive(procs):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
