"""Who a process is, so that another process can prove it dead: the machine's boot, the pid namespace, the
pid and the pid's start time (a pid reused by another process is not the same process).

A slot holder leaves this beside its lease (``capserve/tasks/slots.py``). Death is provable only from the
same boot and the same pid namespace, where ``/proc`` shows every process the holder could be: a worker in
another container, on another machine or before a reboot proves nothing, and its slot waits for its lease.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from pydantic import BaseModel, ConfigDict

PROC = Path("/proc")


class ProcessIdentity(BaseModel):
    model_config = ConfigDict(frozen=True)

    host: str
    boot_id: str  # /proc/sys/kernel/random/boot_id: new at every boot
    pid_namespace: str  # e.g. "pid:[4026531836]": pids mean the same only inside one namespace
    pid: int
    started_ticks: int  # /proc/<pid>/stat field 22, in clock ticks since boot

    def describe(self) -> str:
        return f"process {self.pid} on {self.host}"


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _started_ticks(pid: int, proc: Path) -> int | None:
    """The process's start time, or None when there is no such process (or it has exited: a zombie)."""
    stat = _read(proc / str(pid) / "stat")
    if stat is None:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # the command name may hold spaces and parentheses
    if fields[0] == "Z":
        return None
    return int(fields[19])


def _machine(proc: Path) -> tuple[str, str] | None:
    boot_id = _read(proc / "sys" / "kernel" / "random" / "boot_id")
    try:
        namespace = os.readlink(proc / "self" / "ns" / "pid")
    except OSError:
        return None
    return (boot_id, namespace) if boot_id else None


def process_identity(pid: int, proc: Path = PROC) -> ProcessIdentity | None:
    """Who process ``pid`` is, or None where /proc does not tell enough (not Linux, no such process)."""
    machine = _machine(proc)
    started = _started_ticks(pid, proc)
    if machine is None or started is None:
        return None
    return ProcessIdentity(host=socket.gethostname(), boot_id=machine[0], pid_namespace=machine[1], pid=pid,
                           started_ticks=started)


def this_process(proc: Path = PROC) -> ProcessIdentity | None:
    """This process (None off Linux: its slots then wait for their leases)."""
    return process_identity(os.getpid(), proc)


def provably_dead(holder: ProcessIdentity, proc: Path = PROC) -> bool:
    """True only when this process can see every process the holder could be and none of them is it."""
    if _machine(proc) != (holder.boot_id, holder.pid_namespace):
        return False
    return _started_ticks(holder.pid, proc) != holder.started_ticks
