"""A real local Prefect server and a process worker, started and stopped as children of the CLI.

The temporary server Prefect starts without ``PREFECT_API_URL`` runs no scheduler, no late-runs service
and no lease repossessor (docs/prefect.md §1), so nothing a lease schedules would ever fire. Instead,
``capserve up`` (and the tests of the deployments on a server) starts ``prefect server start`` with all
its services, its SQLite database and home under the run's output folder, and:

- leases of concurrency slots on disk (``lease_storage.filesystem``): a slot held by a killed run is
  freed even after the server restarts (docs/prefect.md §5)
- the loops of the services capserve needs only now and then slowed, each with its reason (``SERVER_SETTINGS``,
  docs/prefect.md §10): a server spends its idle CPU polling them;
- a worker that finds a run well before its time (prefetch ≥ poll + process start), so a scheduled run
  starts on time (docs/prefect.md §11): a one-off scheduled run is fired by the worker's poll, not by the
  server's scheduler, which only makes the runs of the deployments' cron schedules;
- a new SQLite home seeded from a migrated database kept per Prefect version and collection versions
  (``~/.cache/capserve``), so a start skips the migrations that take half its CPU and the block types' registration
  (already in the seed) that takes a sixth of the rest (docs/prefect.md §10).

Every child runs in its own session; stopping sends SIGINT, then SIGTERM, then SIGKILL to its process
group, so no server or worker outlives the CLI. Each runs under a tether (``capserve.runtime.tether``) that
stops it when the process that started it dies without stopping it (SIGKILL), unless it is started
``tethered=False`` (``capserve up --keep-server``: the person asked for them to stay).
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import IO

POOL = "capserve"

SERVER_SETTINGS: dict[str, str] = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_CONCURRENCY_LEASE_STORAGE": "prefect.server.concurrency.lease_storage.filesystem",
    # The services' loops (Prefect 3.9.1 defaults in brackets; docs/prefect.md §10). Kept as they are: the scheduler
    # (60 s: it only makes the runs of the hub-watcher's and reaper's cron schedules, which a new deployment gets
    # from its 5-s loop of recently changed deployments), cancellation clean-up (20 s), the repossessor of expired
    # concurrency leases (15 s), the event persister and the reactive triggers (they act on each event).
    # A run is Late (the notify-late-teardown automation) 60 s after its time, found within 30 s [5 s].
    "PREFECT_SERVER_SERVICES_LATE_RUNS_AFTER_SECONDS": "60",
    "PREFECT_SERVER_SERVICES_LATE_RUNS_LOOP_SECONDS": "30",
    # A suspended purchase approval times out after hours: failed within a minute of its timeout [5 s].
    "PREFECT_SERVER_SERVICES_PAUSE_EXPIRATIONS_LOOP_SECONDS": "60",
    # Worker and work-pool status in the UI (capserve reads neither): offline a minute later at most [15 s].
    "PREFECT_SERVER_SERVICES_FOREMAN_LOOP_SECONDS": "60",
    # Redelivers a worker's cancellation clean-up whose 5-minute reservation expired [5 s].
    "PREFECT_SERVER_SERVICES_CLEANUP_RECONCILER_LOOP_SECONDS": "60",
    # The one proactive trigger (a campaign run silent for 600 s is marked Crashed) fires within 30 s of that [5 s].
    "PREFECT_SERVER_EVENTS_PROACTIVE_GRANULARITY": "PT30S",
}
# A seeded home's database holds the block types the seed's server registered (the seed is kept per Prefect and
# collection versions): registering them again imports every collection (prefect-kubernetes, prefect-redis), even
# to find its memo unchanged.
SEEDED_SETTINGS: dict[str, str] = {
    "PREFECT_SERVER_REGISTER_BLOCKS_ON_START": "false",
    "PREFECT_SERVER_MEMOIZE_BLOCK_AUTO_REGISTRATION": "false",
}
WORKER_SETTINGS: dict[str, str] = {
    # Poll every 2 s and take runs up to 30 s ahead: a run's process is ready before its time.
    "PREFECT_WORKER_QUERY_SECONDS": "2",
    "PREFECT_WORKER_PREFETCH_SECONDS": "30",
}


STOP_GRACE_SECONDS = 4.0  # per signal: SIGINT, then SIGTERM, then SIGKILL

DATABASE = "prefect.db"  # a SQLite server's database in its home (PREFECT_HOME)
DATABASE_URL_SETTINGS = ("PREFECT_SERVER_DATABASE_CONNECTION_URL", "PREFECT_API_DATABASE_CONNECTION_URL")


class ServerError(RuntimeError):
    """The local Prefect server or worker could not be started; the message says where its log is."""


@dataclass
class Child:
    """A child process in its own session, with its log file."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, grace_seconds: float = STOP_GRACE_SECONDS) -> int | None:
        """SIGINT, then SIGTERM, then SIGKILL to the child's process group; its exit code."""
        stop_together([self], grace_seconds)
        return self.process.poll()


def stop_together(children: list[Child], grace_seconds: float = STOP_GRACE_SECONDS) -> None:
    """Stop several children at once (the worker and the server): each signal goes to every group still alive,
    then all are waited for together, so stopping two costs the time of the slower, not the sum. The grace is
    short: a SIGTERMed command must be gone within 15 s on a loaded machine, and a server's or worker's own
    shutdown is done in a few seconds, or not at all."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
        alive = [child for child in children if child.alive()]
        for child in alive:
            try:
                os.killpg(child.process.pid, sig)
            except ProcessLookupError:
                continue
        deadline = time.monotonic() + grace_seconds
        for child in alive:
            try:
                child.process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                continue
        if all(not child.alive() for child in children):
            return


@dataclass
class LocalServer:
    """A running ``prefect server start``: its API URL, home and the environment its clients need."""

    child: Child
    url: str
    home: Path

    @property
    def env(self) -> dict[str, str]:
        return {**SERVER_SETTINGS, "PREFECT_API_URL": self.url, "PREFECT_HOME": str(self.home)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _spawn(
    name: str, argv: list[str], env: Mapping[str, str], log: Path, cwd: Path | None = None, *, tethered: bool = True
) -> Child:
    log.parent.mkdir(parents=True, exist_ok=True)
    out: IO[bytes] = log.open("ab")
    if tethered:
        argv = [sys.executable, "-m", "capserve.runtime.tether", str(os.getpid()), "--", *argv]
    process = subprocess.Popen(  # noqa: S603  # our own interpreter and fixed arguments
        argv, env=dict(env), cwd=cwd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    out.close()  # the child holds its own descriptor
    return Child(name=name, process=process, log=log)


def start_server(
    home: Path,
    *,
    port: int | None = None,
    timeout_seconds: float = 120.0,
    tethered: bool = True,
    settings: Mapping[str, str] | None = None,
    abandoned: threading.Event | None = None,
) -> LocalServer:
    """Start ``prefect server start`` on 127.0.0.1 with its home (and SQLite DB) in ``home``; wait until healthy.
    ``tethered=False``: it outlives this process. ``settings`` go to the server process only, over
    ``SERVER_SETTINGS`` (a team's PostgreSQL database and Redis lease storage, docs/operations.md): its
    clients never see them, so a database password stays out of the worker's and the flows' environments.
    ``abandoned`` set while it starts (the command is stopping): it is stopped there and ``ServerError`` raised."""
    home.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    url = f"http://127.0.0.1:{port}/api"
    env = {**os.environ, **SERVER_SETTINGS, **(settings or {}), "PREFECT_HOME": str(home)}
    env.pop("PREFECT_API_URL", None)
    on_sqlite = not any(env.get(name) for name in DATABASE_URL_SETTINGS)
    seeded = on_sqlite and seed_home(home)
    if seeded:
        env.update(SEEDED_SETTINGS)
    argv = [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)]
    child = _spawn("prefect server", argv, env, home / "server.log", tethered=tethered)
    server = LocalServer(child=child, url=url, home=home)
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        if not child.alive():
            raise ServerError(f"the local Prefect server exited at start: see {child.log}")
        if abandoned is not None and abandoned.is_set():
            child.stop()
            raise ServerError("the local Prefect server's start was abandoned")
        if _healthy(url):
            if on_sqlite and not seeded:
                keep_seed(home)
            return server
        time.sleep(0.5)
    child.stop()
    raise ServerError(f"the local Prefect server was not healthy within {timeout_seconds:.0f} s: see {child.log}")


def seed_dir() -> Path:
    """Where the migrated home of this Prefect version and its collections' versions is kept (its block types are
    theirs): a new version of any migrates (and is kept) anew."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "capserve" / _seed_name()


@functools.cache
def _seed_name() -> str:
    collections = sorted({  # what the server imports to register block types (prefect/_internal/plugins)
        f"+{entry.dist.name}-{entry.dist.version}"
        for entry in importlib.metadata.entry_points(group="prefect.collections") if entry.dist is not None
    })
    return f"prefect-{importlib.metadata.version('prefect')}{''.join(collections)}-home"


def seed_home(home: Path) -> bool:
    """Copy the kept migrated database into a home that has none; whether it did. A home with a database (a
    restart) keeps its own; with no seed kept yet the server migrates, and ``keep_seed`` keeps its result."""
    seed = seed_dir() / DATABASE
    if (home / DATABASE).exists() or not seed.exists():
        return False
    shutil.copyfile(seed, home / DATABASE)
    return True


def keep_seed(home: Path) -> None:
    """Keep a healthy new server's database as the seed of the next new home. It is read with SQLite's backup
    API (a consistent copy while the server writes); two servers that keep one at once
    each write a folder of their own and the first rename wins. Best effort: a start never fails for it."""
    seed = seed_dir()
    if seed.exists():
        return
    try:
        seed.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=seed.name + ".", dir=seed.parent))
    except OSError:
        return
    try:
        with (
            closing(sqlite3.connect(home / DATABASE)) as source,
            closing(sqlite3.connect(staging / DATABASE)) as copy,
        ):
            source.backup(copy)
        staging.rename(seed)
    except (OSError, sqlite3.Error):
        shutil.rmtree(staging, ignore_errors=True)


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as answer:  # noqa: S310  # loopback only
            return bool(answer.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def prefect_cli(args: list[str], env: Mapping[str, str], *, cwd: Path, log: Path, check: bool = True) -> int:
    """Run ``prefect <args>`` to completion (output appended to ``log``)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        done = subprocess.run(  # noqa: S603  # our own interpreter and fixed arguments
            [sys.executable, "-m", "prefect", *args], env=dict(env), cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, check=False,
        )
    if check and done.returncode != 0:
        raise ServerError(f"`prefect {' '.join(args)}` failed (exit {done.returncode}): see {log}")
    return done.returncode


def register(root: Path, env: Mapping[str, str], log: Path) -> None:
    """``capserve deploy`` as an operator runs it: the work pool (if missing), every deployment of the package's
    ``capserve/deployments/prefect.yaml``, then the automations that start them (docs/events.md §4). The runs'
    working directory is ``root``: a spec's relative paths resolve against it, as they did for this command."""
    step = {"prefect.deployments.steps.set_working_directory": {"directory": str(root.resolve())}}
    _run([sys.executable, "-m", "capserve.cli", "deploy", "--pool", POOL, "--pull-step", json.dumps(step)],
         env, cwd=root, log=log)


def _run(argv: list[str], env: Mapping[str, str], *, cwd: Path, log: Path) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        done = subprocess.run(  # noqa: S603  # our own interpreter and fixed arguments
            argv, env=dict(env), cwd=cwd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, check=False
        )
    if done.returncode != 0:
        raise ServerError(f"`{' '.join(argv[2:])}` failed (exit {done.returncode}): see {log}")


def start_worker(
    root: Path,
    env: Mapping[str, str],
    log: Path,
    *,
    name: str = "capserve-local",
    queue: str | None = None,
    tethered: bool = True,
) -> Child:
    """``prefect worker start --pool capserve`` with the tuned poll and prefetch (only ``queue``'s runs if given);
    ``tethered=False``: it outlives this process."""
    argv = [sys.executable, "-m", "prefect", "worker", "start", "--pool", POOL, "--type", "process", "--name", name]
    if queue is not None:
        argv += ["--work-queue", queue]
    return _spawn("prefect worker", argv, {**env, **WORKER_SETTINGS}, log, cwd=root, tethered=tethered)
