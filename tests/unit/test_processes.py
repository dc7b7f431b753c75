"""Proving a process dead (``capserve/tasks/processes.py``): only a process gone from this machine's own view."""

from __future__ import annotations

import subprocess

from capserve.tasks.processes import process_identity, provably_dead, this_process


def _sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sleep", "60"])  # coreutils' sleep from PATH


def test_this_process_is_alive() -> None:
    me = this_process()
    assert me is not None
    assert not provably_dead(me)


def test_a_process_that_exited_is_dead() -> None:
    child = _sleeper()
    identity = process_identity(child.pid)
    assert identity is not None and not provably_dead(identity)
    child.kill()
    child.wait()
    assert provably_dead(identity)


def test_a_reused_pid_is_another_process() -> None:
    me = this_process()
    assert me is not None
    assert provably_dead(me.model_copy(update={"started_ticks": me.started_ticks + 1}))


def test_a_process_on_another_boot_or_in_another_pid_namespace_is_never_proven_dead() -> None:
    child = _sleeper()
    identity = process_identity(child.pid)
    assert identity is not None
    child.kill()
    child.wait()
    assert not provably_dead(identity.model_copy(update={"boot_id": "another-boot"}))
    assert not provably_dead(identity.model_copy(update={"pid_namespace": "pid:[1]"}))
