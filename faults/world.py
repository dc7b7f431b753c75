"""What the fault matrix runs against: the ``capserve sandbox`` service, a Prefect server and its workers.

Everything is a child process in its own session (``capserve.runtime.prefect_server``), so a worker can be
killed as a host loss would kill it without touching the rest. The workers poll the one work pool:

- four *victims*, each taking only its own queue (``faults-victim-0`` … ``-3``): the runs the matrix
  kills. A chain's runs alternate between its two, so the next run never waits for a killed worker to be
  started again, and two chains at once never kill each other's runs;
- the *steady* one takes the pool's default queue: the last re-run of a chain, and whatever the automations
  start (the teardown of a crashed campaign), so those never land on a worker about to be killed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefect.settings import PREFECT_API_URL, temporary_settings

from capserve.runtime.prefect_server import (
    POOL,
    Child,
    LocalServer,
    prefect_cli,
    register,
    start_server,
    start_worker,
)
from capserve.tasks.reporting import REPORT_DIR_ENV
from capserve.tasks.scheduling import WALL_CLOCK_WATCHES, pause_wall_clock_watches

ROOT = Path(__file__).resolve().parents[1]
# Two per chain, for two chains at once (faults/matrix.py runs a chain's first stages beside the last one's).
VICTIM_QUEUES = ("faults-victim-0", "faults-victim-1", "faults-victim-2", "faults-victim-3")
# A killed run's slot is free again after this (Prefect's minimum lease); the default is 300 s.
FAST_SETTINGS = {"CAPSERVE_SLOTS__LEASE_SECONDS": "60"}
SANDBOX_START_SECONDS = 180


@dataclass
class World:
    logs: Path
    sandbox: subprocess.Popen[bytes]
    server: LocalServer
    env: dict[str, str]  # what the workers (and this process) run with
    control: str
    victims: list[Child]
    steady: Child
    restarts: dict[int, threading.Thread] = field(default_factory=dict)

    @staticmethod
    def victim_queue(index: int) -> str:
        return VICTIM_QUEUES[index]

    def restart_victim(self, index: int) -> None:
        self.victims[index].stop(grace_seconds=5)
        self.victims[index] = _victim(self.env, self.logs, index)

    def restart_victim_soon(self, index: int) -> None:
        """Start victim ``index`` again in the background (``wait_victim`` waits for it)."""
        thread = threading.Thread(target=self.restart_victim, args=(index,), daemon=True)
        self.restarts[index] = thread
        thread.start()

    def wait_victim(self, index: int) -> None:
        if (thread := self.restarts.pop(index, None)) is not None:
            thread.join()

    def state(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.control}/state", timeout=30) as answer:  # noqa: S310  # loopback
            result: dict[str, Any] = json.load(answer)
            return result

    def hold(self, point: str, match: str) -> None:
        self._post("/hold", {"point": point, "match": match})

    def release(self, point: str) -> None:
        self._post("/release", {"point": point})

    def _post(self, path: str, body: dict[str, str]) -> None:
        request = urllib.request.Request(  # noqa: S310  # the sandbox's loopback control endpoint
            f"{self.control}{path}", data=json.dumps(body).encode(), method="POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310
            answer.read()


def _victim(env: dict[str, str], logs: Path, index: int) -> Child:
    return start_worker(ROOT, env, logs / f"victim-{index}.log", name=VICTIM_QUEUES[index],
                        queue=VICTIM_QUEUES[index])


def read_env(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def _start_sandbox(logs: Path) -> tuple[subprocess.Popen[bytes], dict[str, str]]:
    env_file = logs / "worker.env"
    with (logs / "sandbox.log").open("ab") as out:
        service = subprocess.Popen(  # noqa: S603  # our own interpreter and fixed arguments
            [sys.executable, "-m", "capserve.cli", "sandbox", "--env-file", str(env_file)],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, cwd=ROOT,
        )
    deadline = time.monotonic() + SANDBOX_START_SECONDS
    while not env_file.exists():
        if service.poll() is not None or time.monotonic() > deadline:
            _stop(service)
            raise RuntimeError(f"`capserve sandbox` did not start: see {logs / 'sandbox.log'}")
        time.sleep(0.3)
    time.sleep(0.2)  # the file is written in one go; let it be closed
    return service, read_env(env_file)


def _stop(process: subprocess.Popen[bytes]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if process.poll() is not None:
            return
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            continue


@contextmanager
def world(logs: Path, *, victims: int = len(VICTIM_QUEUES)) -> Iterator[World]:
    """Start the sandbox service, a Prefect server (deployments and automations registered, the hub-watcher's and
    the reaper's cron schedules off: the matrix's runs are its own), the steady worker and ``victims`` victim
    workers (two per chain run at once); this process's environment points at them while the block runs;
    everything stops after."""
    if not 2 <= victims <= len(VICTIM_QUEUES):
        raise ValueError(f"victims: 2 (one chain at a time) to {len(VICTIM_QUEUES)} (two), not {victims}")
    logs.mkdir(parents=True, exist_ok=True)
    service, sandbox_env = _start_sandbox(logs)
    server: LocalServer | None = None
    workers: list[Child] = []
    before = dict(os.environ)
    try:
        server = start_server(logs / "prefect")
        env = {**os.environ, **server.env, **sandbox_env, **FAST_SETTINGS,
               REPORT_DIR_ENV: str(logs / "reports" / "{campaign}")}  # the later runs' reports, beside the logs
        register(ROOT, env, logs / "register.log")
        pause_wall_clock_watches(WALL_CLOCK_WATCHES, api_url=server.url)  # its runs only
        for queue in VICTIM_QUEUES[:victims]:
            prefect_cli(["work-queue", "create", queue, "--pool", POOL], env, cwd=ROOT, log=logs / "register.log")
        steady = start_worker(ROOT, env, logs / "steady.log", name="faults-steady", queue="default")
        victim_workers = [_victim(env, logs, index) for index in range(victims)]
        workers = [steady, *victim_workers]
        os.environ.update({k: v for k, v in env.items() if k not in before or before[k] != v})
        the_world = World(logs=logs, sandbox=service, server=server, env=env,
                          control=sandbox_env["CAPSERVE_SANDBOX_CONTROL"], victims=victim_workers, steady=steady)
        try:
            with temporary_settings({PREFECT_API_URL: server.url}):  # Prefect read its settings at import
                yield the_world
        finally:
            for index in list(the_world.restarts):
                the_world.wait_victim(index)
            workers = [the_world.steady, *the_world.victims]
    finally:
        os.environ.clear()
        os.environ.update(before)
        for child in workers:
            child.stop(grace_seconds=10)
        if server is not None:
            server.child.stop(grace_seconds=10)
        _stop(service)
