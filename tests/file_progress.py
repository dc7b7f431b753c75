"""Progress of a parallel test run, one line per test file (a pytest plugin; tests/conftest.py registers it).

Under xdist the default output is a row of dots with no file name, and nothing at all while the long server
files run, so minutes pass silently. Here, on xdist's controller only (a run in one process already prints each
file's name):

- each file, when its last test has finished, prints one line: its tests' outcomes, the seconds they took in
  their worker (setup, call and teardown; module fixtures and, for a worker's first file, the start of
  Prefect's test server included) and the CPU seconds its worker spent on them (with the processes it started
  and reaped: a module's servers, a CLI run), the run's elapsed time and how many files are done; a passing
  test prints no dot of its own;
- after a minute with no such line, the files still running are named, with how long each has run (or, before
  the first test, that the workers are still starting);
- at the end, the slowest files, which is where the run's minutes went, and the CPU seconds of all files: on a
  machine with N cores, that total over N is the least wall time the run can take (README.md, "How long things
  take").

The CPU seconds are measured in each worker (``CpuPerTest``: ``getrusage`` of the worker and its reaped children,
between one report and the next) and travel to the controller in each report's ``user_properties``. A child's CPU
counts when it is reaped, so the worker's Prefect test server (tests/conftest.py), reaped when the session ends,
would land whole on the worker's last file (a sandbox file of a few CPU seconds once showed 105); the harness says
what its server cost (``server_reaped``) and that goes to a line of its own.
"""

from __future__ import annotations

import resource
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

QUIET_S = 60.0  # a line at least this often while files are still running
SLOWEST = 12
CPU = "cpu_s"  # the user property a worker's reports carry
SERVER_CPU = "server_cpu_s"  # the part of a report's CPU that was the worker's Prefect test server, reaped


@dataclass
class _File:
    tests: int
    finished: int = 0
    seconds: float = 0.0
    cpu: float = 0.0
    started: float | None = None  # monotonic, when its first test began
    outcomes: Counter[str] = field(default_factory=Counter)


class FileProgress:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.files: dict[str, _File] = {}
        self.begun = time.monotonic()
        self.last_line = self.begun
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.watch: threading.Thread | None = None
        self.server_cpu = 0.0  # the workers' Prefect test servers

    # -- xdist's controller ---------------------------------------------------------------------------------

    def pytest_xdist_setupnodes(self) -> None:
        # From the start: workers take a minute or more to import and collect on a busy machine.
        self.watch = threading.Thread(target=self._watch, name="file-progress", daemon=True)
        self.watch.start()

    def pytest_xdist_node_collection_finished(self, node: Any, ids: Sequence[str]) -> None:
        with self.lock:
            if self.files:  # every worker collects the same items
                return
            for name, count in Counter(nodeid.split("::")[0] for nodeid in ids).items():
                self.files[name] = _File(tests=count)

    @pytest.hookimpl(tryfirst=True)
    def pytest_report_teststatus(self, report: pytest.TestReport) -> tuple[str, str, str] | None:
        # The file's line says it; a dot per passing test would only break the lines up.
        if self.files and report.when == "call" and report.passed and self.config.get_verbosity() <= 0:
            return "passed", "", ""
        return None

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        with self.lock:
            file = self.files.get(nodeid.split("::")[0])
            if file is not None and file.started is None:
                file.started = time.monotonic()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        name = report.nodeid.split("::")[0]
        with self.lock:
            file = self.files.get(name)
            if file is None:
                return
            file.seconds += report.duration
            file.cpu += sum(value for key, value in report.user_properties if key == CPU)
            self.server_cpu += sum(value for key, value in report.user_properties if key == SERVER_CPU)
            if report.failed or (report.when == "call" or report.skipped):
                file.outcomes[_outcome(report)] += 1
            if report.when != "teardown":
                return
            file.finished += 1
            if file.finished < file.tests:
                return
            done = sum(1 for f in self.files.values() if f.finished >= f.tests)
            outcomes = ", ".join(f"{count} {what}" for what, count in sorted(file.outcomes.items()))
            line = (
                f"done {name}: {outcomes} in {file.seconds:.0f} s (CPU {file.cpu:.0f} s)"
                f"  [{_clock(time.monotonic() - self.begun)}, {done}/{len(self.files)} files]"
            )
            self._write(line, red="failed" in file.outcomes or "error" in file.outcomes)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        self.stop.set()
        if not self.files:
            return
        terminalreporter.write_sep("=", f"slowest {SLOWEST} files (seconds in their worker, CPU seconds)")
        ranked = sorted(self.files.items(), key=lambda item: item[1].seconds, reverse=True)
        for name, file in ranked[:SLOWEST]:
            terminalreporter.write_line(f"{file.seconds:8.1f}s  CPU {file.cpu:7.1f}s  {name} ({file.tests} tests)")
        total = sum(file.cpu for file in self.files.values())
        servers = f" and of the workers' Prefect test servers {self.server_cpu:.0f} s" if self.server_cpu else ""
        floor = f"at least {(total + self.server_cpu) / 2:.0f} s of wall time on 2 cores"
        terminalreporter.write_line(f"CPU of all files: {total:.0f} s{servers} ({floor})")

    # -- helpers ------------------------------------------------------------------------------------------------

    def _watch(self) -> None:
        while not self.stop.wait(5.0):
            with self.lock:
                if (line := self.quiet_line(time.monotonic())) is not None:
                    self._write(line)

    def quiet_line(self, now: float) -> str | None:
        """What to say after a quiet minute, if anything (under ``self.lock``)."""
        if now - self.last_line < QUIET_S:
            return None
        elapsed = _clock(now - self.begun)
        running = sorted(
            (now - f.started, name) for name, f in self.files.items() if f.started is not None and f.finished < f.tests
        )
        if running:
            return f"still running [{elapsed}]: " + ", ".join(f"{n} ({_clock(age)})" for age, n in reversed(running))
        if not any(f.started is not None for f in self.files.values()):
            return f"no test has begun yet [{elapsed}]: the workers are still starting"
        return None

    def _write(self, line: str, **markup: bool) -> None:
        """Under ``self.lock``."""
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            return
        writer = reporter._tw  # the letters of failed or skipped tests may have left a line open
        if writer.width_of_current_line:
            writer.line()
        reporter.write_line(line, **markup)
        reporter.flush()
        self.last_line = time.monotonic()


def _outcome(report: pytest.TestReport) -> str:
    if report.failed:
        return "failed" if report.when == "call" else "error"
    return "skipped" if report.skipped else "passed"


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}:{secs:02d}"


class CpuPerTest:
    """In a worker: each report carries the CPU seconds spent since the previous one (setup, call, teardown), less
    what the worker's Prefect test server cost (``server_reaped``), which it carries apart."""

    def __init__(self) -> None:
        self.last = _cpu_seconds()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self) -> Any:
        outcome = yield
        now = _cpu_seconds()
        server = _SERVER_REAPED.pop() if _SERVER_REAPED else 0.0
        properties = outcome.get_result().user_properties
        properties.append((CPU, round(now - self.last - server, 3)))
        if server:
            properties.append((SERVER_CPU, round(server, 3)))
        self.last = now


_SERVER_REAPED: list[float] = []


@contextmanager
def server_reaped() -> Iterator[None]:
    """Around the stop of the worker's Prefect test server: the CPU seconds its reaping adds (all it spent in the
    session) go to their own line."""
    before = _cpu_seconds()
    try:
        yield
    finally:
        _SERVER_REAPED.append(_cpu_seconds() - before)


def _cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def register(config: pytest.Config) -> None:
    """The progress on xdist's controller (silent in a one-process run, ``-n 0``: no worker reports a collection);
    the CPU count in each xdist worker; nothing without xdist (``-p no:xdist``), whose hooks FileProgress
    implements and pytest would refuse as unknown."""
    if hasattr(config, "workerinput"):
        config.pluginmanager.register(CpuPerTest(), "capserve-cpu-per-test")
    elif config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(FileProgress(config), "capserve-file-progress")
