"""Test-session setup: one Prefect test server for the whole session (tests/prefect_harness.py: ~4 CPU s to start)."""

from __future__ import annotations

import gc
import os
import threading
from collections.abc import Iterator
from contextlib import ExitStack

# Before prefect is imported anywhere: no telemetry, a patient start on a loaded 2-core CI box
# (PrefectHQ/prefect#16397), and no warnings for task logs outside a flow run.
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "300")
os.environ.setdefault("PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW", "ignore")
# Tests talk to 127.0.0.1 only: a test that reaches AWS without starting the sandbox meets a closed
# local port (and fails fast) instead of the real endpoints, and never picks up real credentials.
# The sandbox sets its own endpoint and credentials over these while it runs.
for _name, _value in {
    "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
    "AWS_ACCESS_KEY_ID": "tests-no-aws",
    "AWS_SECRET_ACCESS_KEY": "tests-no-aws-secret-access-key",
    "AWS_EC2_METADATA_DISABLED": "true",
}.items():
    os.environ[_name] = _value
os.environ.pop("AWS_PROFILE", None)
os.environ.pop("AWS_SESSION_TOKEN", None)

import file_progress  # noqa: E402
import no_leftovers  # noqa: E402
import pytest  # noqa: E402
from file_schedule import LONG_FILES, ShortBehindLong  # noqa: E402
from no_leftovers import pytest_sessionfinish  # noqa: E402, F401  # nothing left running
from prefect_harness import ensure_seed, prefect_test_server  # noqa: E402

# A full garbage collection walks every object alive. A test process holds Prefect, moto, the stand-ins and capserve
# (~5,000 modules), so each took ~0.3 CPU s, and Python's default ran one every 10 middle-generation collections:
# 6 of tests/flows/test_bring_up.py's 26 CPU s in its process. Every 100th: 2 (22 CPU s in all). The young
# generations, where most garbage dies, are collected as before.
FULL_COLLECTION_EVERY = 100


def pytest_configure(config: pytest.Config) -> None:
    no_leftovers.pytest_configure(config)
    file_progress.register(config)  # a line per finished file in a parallel run
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_COLLECTION_EVERY)
    if not hasattr(config, "workerinput"):  # the session's first process: the test server's migrated database is
        threading.Thread(target=ensure_seed, daemon=True).start()  # made (once) while the tests are collected


@pytest.fixture(autouse=True, scope="session")
def prefect_harness(request: pytest.FixtureRequest) -> Iterator[None]:
    if all(item.get_closest_marker("solo") for item in request.session.items):
        yield  # `make test`'s timing run: nothing runs beside the measurement, an idle server neither
        return
    with ExitStack() as stack:
        stack.enter_context(prefect_test_server())  # tests/prefect_harness.py: its database in memory, so writes
        yield  # never collide
        with file_progress.server_reaped():  # its CPU, counted when it is reaped, is not the last file's
            stack.close()


# Longest files first (a file's tests stay in one process, so a long file that starts last runs alone at the
# end): the files that take minutes, in the order tests/file_schedule.py lists them, then the other server and vLLM
# files, then other files marked slow, the flows, the other folders, and the unit tests last: many short files
# that fill the processes as the long ones end. `make test` keeps this order (`--no-loadscope-reorder`: by
# default xdist re-sorts files by their number of tests).
_RANKED_MARKERS = (("faults",), ("server", "vllm"), ("slow",))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        path = item.nodeid.split("::")[0]
        if path in LONG_FILES:
            return LONG_FILES.index(path)
        for position, markers in enumerate(_RANKED_MARKERS):
            if any(item.get_closest_marker(name) for name in markers):
                return len(LONG_FILES) + position
        folder = item.path.parent.name
        return len(LONG_FILES) + len(_RANKED_MARKERS) + {"flows": 0, "unit": 2}.get(folder, 1)

    items.sort(key=rank)  # stable: within a rank, files and their tests keep their order


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> ShortBehindLong | None:
    return ShortBehindLong(config, log) if config.getvalue("dist") == "loadfile" else None
