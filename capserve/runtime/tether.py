"""``python -m capserve.runtime.tether PID -- COMMAND...``: run COMMAND, and stop it once process PID is gone.

The CLI's local Prefect server and worker run in their own sessions, so that Ctrl-C in a terminal reaches
only the CLI, which then stops them in order. A CLI killed outright (SIGKILL, the OOM killer) stops
nothing: its children would run on, holding a port, a database and a worker polling for runs. Linux's
parent-death signal (``PR_SET_PDEATHSIG``) is tied to the thread that forked, and the CLI starts the server
from a worker thread, so each child runs under this small tether instead. It watches its parent; when the
parent is gone it stops the command (SIGTERM to the session, then SIGKILL) and exits.

Signals sent to the session (how ``Child.stop`` stops it) reach the command directly; the tether shrugs
off SIGINT and SIGTERM and exits with the command's code once the command has ended.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

POLL_SECONDS = 0.5
STOP_GRACE_SECONDS = 10.0


def _ignore(signum: int, frame: object) -> None:
    """Caught, not ignored: a caught signal is reset to its default in the command at exec, an ignored one
    would stay ignored there."""


def _stop(child: subprocess.Popen[bytes]) -> None:
    """What ``Child.stop`` does, from inside: SIGINT, then SIGTERM to the session's group (which the tether
    shrugs off), then SIGKILL to the command."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            os.killpg(os.getpgrp(), sig)
            child.wait(timeout=STOP_GRACE_SECONDS)
            return
        except subprocess.TimeoutExpired:
            continue
        except ProcessLookupError:
            return
    child.kill()
    child.wait()


def run(parent: int, command: list[str]) -> int:
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _ignore)
    child = subprocess.Popen(command)  # noqa: S603  # the command our own caller gave
    while True:
        try:
            code = child.wait(timeout=POLL_SECONDS)
            return code if code >= 0 else 128 - code
        except subprocess.TimeoutExpired:
            pass
        if os.getppid() != parent:  # re-parented: whoever started us has died
            print(f"tether: process {parent} is gone; stopping {command[0]} (pid {child.pid})", file=sys.stderr,
                  flush=True)
            _stop(child)
            return 1


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--" or not argv[0].isdigit():
        print("usage: python -m capserve.runtime.tether PARENT_PID -- COMMAND...", file=sys.stderr)
        return 2
    return run(int(argv[0]), argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
