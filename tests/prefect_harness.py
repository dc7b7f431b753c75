"""The test session's Prefect server: ``prefect_test_harness`` with its database in memory.

``prefect.testing.utilities.prefect_test_harness`` puts the temporary server's SQLite database in a file, where
concurrent writers meet "database is locked": the server answers 503 and the client tries again 2 s later
(``prefect.client.base``: ``2 ** try_count`` seconds), most often on the concurrency-limit leases a campaign's slot
takes. With an in-memory database Prefect keeps one connection (``AioSqliteConfiguration.engine``: ``pool_size=1``
for ``:memory:``), so the server's writes queue instead of colliding, and no write waits on a disk.
Otherwise this is the harness itself (Prefect 3.9's ``prefect/testing/utilities.py``), step by step.
One service is off (task-run records: no test reads them, see `prefect_test_server`).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import prefect.context
import prefect.settings
from prefect.events.worker import EventsWorker
from prefect.logging.handlers import APILogWorker
from prefect.server.api.server import SubprocessASGIServer
from prefect.server.database.dependencies import temporary_database_interface
from prefect.testing.utilities import _find_available_port
from prefect.utilities.asyncutils import run_coro_as_sync

IN_MEMORY = "sqlite+aiosqlite:///:memory:"


@contextmanager
def prefect_test_server(*, database_url: str = IN_MEMORY) -> Iterator[str]:
    """A temporary Prefect server for this process, its API URL the current setting; its URL.

    It waits for the server as long as ``PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS`` says (tests/conftest.py
    and the Makefile: 300 s), as Prefect's own temporary server does: on a loaded 2-core machine a start took over
    90 s, and a test set-up that gives up sooner fails for the machine, not for the product."""
    with ExitStack() as stack:
        stack.enter_context(temporary_database_interface())
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
        server = SubprocessASGIServer(port=_find_available_port())
        # Code that asks for the ephemeral server during a run finds this one instead of starting its own.
        prior = SubprocessASGIServer._instances.get(None)
        SubprocessASGIServer._instances[None] = server
        server.start(timeout=prefect.settings.PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS.value())
        try:
            stack.enter_context(
                prefect.settings.temporary_settings(updates={prefect.settings.PREFECT_API_URL: server.api_url})
            )
            stack.enter_context(
                prefect.context._temporary_global_settings_context(prefect.context.get_settings_context())
            )
            yield server.api_url
            run_coro_as_sync(_drain())  # the logs and events still queued, before their server goes
        finally:
            server.stop()
            if prior is not None:
                SubprocessASGIServer._instances[None] = prior
            else:
                SubprocessASGIServer._instances.pop(None, None)


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
