"""The test session's Prefect server: Prefect's temporary server, its database in memory, seeded already migrated.

``prefect.testing.utilities.prefect_test_harness`` puts the temporary server's SQLite database in a file, where
concurrent writers meet "database is locked": the server answers 503 and the client tries again 2 s later
(``prefect.client.base``: ``2 ** try_count`` seconds), most often on the concurrency-limit leases a campaign's slot
takes. With an in-memory database Prefect keeps one connection (``AioSqliteConfiguration.engine``: ``pool_size=1``
for ``:memory:``), so the server's writes queue instead of colliding, and no write waits on a disk.

Otherwise this is the server Prefect's harness starts (``SubprocessASGIServer``: uvicorn on
``prefect.server.api.server:create_app``, ephemeral, no UI), with four differences:

- **No migrations at start.** Alembic's migrations were 6 of a start's 11 CPU s, in every xdist process. The
  migrated database is kept once per Prefect version (``seed``, in ``~/.cache/capserve`` beside the local server's
  seeded home, capserve/runtime/prefect_server.py), and each server loads that image into its in-memory database
  as it opens its one connection (``_load_seed``). The first session on a machine makes the image (tests/conftest.py
  starts it while the tests are collected); the others wait for it (a file lock) and load it.
- **No block types registered at start.** Registering imports every collection to compare a memo kept in
  ``PREFECT_HOME``; for an in-memory database that memo matched after the first start on a machine, so the
  database held no built-in block types anyway. No test reads one (capserve's own ``HubCredentials`` registers
  its type when saved).
- **The worker does not import ``prefect.server``** (2 CPU s in every xdist process): the server is our own
  subprocess, and Prefect's fallback of starting a temporary server of its own is off in the worker
  (``PREFECT_SERVER_ALLOW_EPHEMERAL_MODE``): code that lost the API URL fails loudly instead.
- **Its task queue polls less** (``_quiet_task_queue``): most of an idle server's CPU.

One service is off (task-run records: no test reads them, see `prefect_test_server`).
"""

from __future__ import annotations

import fcntl
import importlib.metadata
import inspect
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import prefect.context
import prefect.settings
from prefect.events.worker import EventsWorker
from prefect.logging.handlers import APILogWorker
from prefect.utilities.asyncutils import run_coro_as_sync

from capserve.runtime.prefect_server import seed_dir

IN_MEMORY = "sqlite+aiosqlite:///:memory:"

# The server process's own settings (the worker's clients never see them).
SERVER_SETTINGS = {
    "PREFECT_SERVER_UI_ENABLED": "0",  # as SubprocessASGIServer: an ephemeral server (no scheduler or late-runs
    "PREFECT__SERVER_EPHEMERAL": "1",  # service), no UI
    "PREFECT__SERVER_FINAL": "1",
    "PREFECT_SERVER_DATABASE_MIGRATE_ON_START": "false",  # the seed is migrated
    "PREFECT_SERVER_REGISTER_BLOCKS_ON_START": "false",  # see the module docstring
    "PREFECT_SERVER_MEMOIZE_BLOCK_AUTO_REGISTRATION": "false",
}


def seed() -> Path:
    """The migrated database of this Prefect version, kept once: migrations change only with Prefect."""
    return seed_dir().parent / f"prefect-{importlib.metadata.version('prefect')}-migrated.db"


def ensure_seed() -> Path:
    """The seed, made first if it is not kept yet, in a process of its own (it imports the server and runs Alembic).
    A session that finds another making it waits for it (a file lock): tests/conftest.py starts making it while
    the xdist processes collect, and every process's server copies it."""
    path = seed()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(f"{path.name}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.exists():
            subprocess.run([sys.executable, __file__, "seed"], check=True)  # our own script
    return path


def make_seed() -> None:
    """Migrate a new in-memory database and keep its image as the seed (``python tests/prefect_harness.py seed``)."""
    path = seed()
    with prefect.settings.temporary_settings(
        updates={prefect.settings.PREFECT_SERVER_DATABASE_CONNECTION_URL: IN_MEMORY}
    ):
        image = run_coro_as_sync(_migrated_image())
    staging = path.with_name(f"{path.name}.{os.getpid()}")
    staging.write_bytes(image)
    os.replace(staging, path)  # whole or not at all


async def _migrated_image() -> bytes:
    """Migrate an in-memory database as a server's start would; its image."""
    from prefect.server.database import provide_database_interface

    database = provide_database_interface()
    await database.create_db()
    engine = await database.engine()
    async with engine.connect() as connection:
        driver: Any = (await connection.get_raw_connection()).driver_connection  # aiosqlite's: its own thread
        image: bytes = await driver._execute(lambda: driver._conn.serialize())
    await engine.dispose()
    return image


def _load_seed(image: bytes) -> None:
    """In the server process: every in-memory database Prefect opens starts as the seed's image. Prefect opens
    one connection to it and keeps it (``pool_size=1``, no recycling); this runs as it is opened, before
    Prefect's own connection set-up (``setup_sqlite``: its pragmas)."""
    from prefect.server.database.configurations import AioSqliteConfiguration
    from sqlalchemy.util.concurrency import await_

    setup = AioSqliteConfiguration.setup_sqlite

    def seeded(self: AioSqliteConfiguration, conn: object, record: object) -> None:
        if ":memory:" in self.connection_url:
            driver = conn._connection  # type: ignore[attr-defined]  # aiosqlite's connection: its own thread
            await_(driver._execute(lambda: driver._conn.deserialize(image)))
        setup(self, conn, record)  # type: ignore[arg-type]

    AioSqliteConfiguration.setup_sqlite = seeded  # type: ignore[method-assign]


def _quiet_task_queue() -> None:
    """In the server process: its task queue (docket's ``Worker``, in memory) polls less. Its two loops were most
    of an idle server's CPU (0.63 -> 0.27 CPU s a minute, measured side by side):

    - due tasks are moved to the stream every second [250 ms]: a perpetual service's next run (the proactive
      triggers every 5 s, tests/flows/test_automations.py; the event vacuum hourly) is up to a second later. New
      tasks (a work queue or deployment marked ready when a worker polls, a deleted run's logs: no test reads
      either) are read within a second [250 ms].
    - no listener for cancelled tasks, polled every 100 ms: Prefect's server never cancels a docket task (it
      calls no ``Docket.cancel``)."""
    from datetime import timedelta

    import prefect.server.api.background_workers as background_workers
    from docket import Worker

    class QuietWorker(Worker):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.update(scheduling_resolution=timedelta(seconds=1), minimum_check_interval=timedelta(seconds=1))
            super().__init__(*args, **kwargs)

        async def _cancellation_listener(self) -> None:
            if self._processing_session is not None:
                self._processing_session.cancellation_ready.set()  # what the worker waits for before it reads

    background_workers.Worker = QuietWorker  # type: ignore[attr-defined, misc]


def serve(fd: int) -> None:
    """The server process (``python tests/prefect_harness.py serve FD``): uvicorn as SubprocessASGIServer runs it,
    on the listening socket the worker bound and passed (no port freed and bound again: another process can
    take it in between, and a health check could then reach that one's server)."""
    import uvicorn

    _load_seed(seed().read_bytes())
    _quiet_task_queue()
    config = uvicorn.Config("prefect.server.api.server:create_app", factory=True, log_level="error", lifespan="on")
    uvicorn.Server(config).run(sockets=[socket.socket(fileno=fd)])


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=5) as answer:  # loopback only
            return bool(answer.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@contextmanager
def _server(timeout: float) -> Iterator[str]:
    """Start the server process with the current settings and ours; its API URL while it runs."""
    env = {
        **os.environ,
        **prefect.settings.get_current_settings().to_environment_variables(exclude_unset=True),
        **SERVER_SETTINGS,
    }
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(128)
        url = f"http://127.0.0.1:{listening.getsockname()[1]}/api"
        fd = listening.fileno()
        process = subprocess.Popen([sys.executable, __file__, "serve", str(fd)], env=env, pass_fds=[fd])
    deadline = time.monotonic() + timeout
    try:
        while not _healthy(url):
            if process.poll() is not None:
                raise RuntimeError(f"the test Prefect server exited at start ({process.returncode})")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the test Prefect server was not healthy within {timeout:.0f} s")
            time.sleep(0.1)
        yield url
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@contextmanager
def prefect_test_server(*, database_url: str = IN_MEMORY) -> Iterator[str]:
    """A temporary Prefect server for this process, its API URL the current setting; its URL.

    It waits for the server as long as ``PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS`` says (tests/conftest.py
    and the Makefile: 300 s), as Prefect's own temporary server does: on a loaded 2-core machine a start took over
    90 s, and a test set-up that gives up sooner fails for the machine, not for the product. A database in a
    file starts as a copy of the seed (a file that exists is kept)."""
    image = ensure_seed()
    if database_url != IN_MEMORY:
        database = Path(database_url.split(":///", 1)[1])
        if not database.exists():
            shutil.copyfile(image, database)
    with ExitStack() as stack:
        stack.enter_context(
            prefect.settings.temporary_settings(
                updates={
                    prefect.settings.PREFECT_SERVER_DATABASE_CONNECTION_URL: database_url,
                    # No task-run records: every task's state events would be written as task runs, the
                    # server's largest steady cost after start-up, and nothing the tests run reads a task run
                    # (capserve reads flow runs, their logs and events; a subflow's parent task run is made
                    # through the API, not by this service). The events themselves are still stored.
                    prefect.settings.PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_ENABLED: False,
                }
            )
        )
        url = stack.enter_context(
            _server(timeout=prefect.settings.PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS.value())
        )
        stack.enter_context(
            prefect.settings.temporary_settings(
                updates={
                    prefect.settings.PREFECT_API_URL: url,
                    # Code that finds no API URL would start a temporary server of its own: fail instead.
                    prefect.settings.PREFECT_SERVER_ALLOW_EPHEMERAL_MODE: False,
                }
            )
        )
        stack.enter_context(prefect.context._temporary_global_settings_context(prefect.context.get_settings_context()))
        yield url
        run_coro_as_sync(_drain())  # the logs and events still queued, before their server goes


async def _drain() -> None:
    try:
        drained = APILogWorker.instance().drain()
        if inspect.isawaitable(drained):
            await drained
    except RuntimeError:  # never started
        pass
    drained = EventsWorker.drain_all()
    if inspect.isawaitable(drained):
        await drained


if __name__ == "__main__":
    if sys.argv[1] == "seed":
        make_seed()
    else:
        serve(int(sys.argv[2]))
