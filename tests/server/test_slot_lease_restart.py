"""The campaign slot of a killed run is freed even when the Prefect server restarts in between.

``campaign_slot`` holds ``campaign-<id>`` with a lease; ``start_server`` keeps leases on disk
(``SERVER_SETTINGS``, docs/prefect.md §5). A holder is SIGKILLed, the server stops and starts again on
the same home, the slot is still taken. The holder's note says it ran on another machine (so nothing here
can prove it dead, as for a worker on another host), and a new holder gets the slot once the dead one's
lease runs out, having said in its log whom it waits for. Takes about 3 minutes (two server starts, a 120 s
lease: with 60 s, a loaded machine's restart and second holder's start outlasted it, and nothing was left to
wait for). The same machine's case, a dead holder's slot taken at once, is tests/flows/test_slots.py's.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from prefect import get_client
from prefect.client.schemas.actions import VariableUpdate
from prefect.settings import PREFECT_API_URL, temporary_settings

from capserve.runtime.prefect_server import LocalServer, free_port, start_server
from capserve.tasks.slots import campaign_limit_name, note_name

pytestmark = pytest.mark.server

CAMPAIGN = "lease-test"
HOLDER = """
import sys, time
from pathlib import Path
from prefect import flow
from prefect.runtime import deployment
import capserve.tasks.slots as slots
from capserve.core.settings import SlotSettings

deployment.get_id = lambda: "a-deployment"  # only deployment runs take the slot: be one
marker, hold_seconds = Path(sys.argv[1]), float(sys.argv[2])

@flow(name="slot-holder")
def holder() -> None:
    with slots.campaign_slot(sys.argv[3], SlotSettings(lease_seconds=int(sys.argv[4]))):
        marker.write_text("held")
        time.sleep(hold_seconds)

holder()
"""
WAIT_SECONDS = 240  # a bound on a loaded machine, not a measurement
LEASE_SECONDS = 120  # outlasts a server restart and a holder's start on a loaded 2-core machine


def _holder(
    server: LocalServer, tmp: Path, name: str, hold_seconds: float
) -> tuple[subprocess.Popen[bytes], Path, Path]:
    script, marker, log = tmp / "holder.py", tmp / f"{name}.held", tmp / f"{name}.log"
    script.write_text(HOLDER)
    env = {**os.environ, **server.env}
    with log.open("wb") as out:
        child = subprocess.Popen(  # our own interpreter and script
            [sys.executable, str(script), str(marker), str(hold_seconds), CAMPAIGN, str(LEASE_SECONDS)], env=env,
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )
    return child, marker, log


def _wait_for(path: Path, child: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not path.exists():
        assert child.poll() is None, f"the holder exited early:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"no slot within {WAIT_SECONDS} s:\n{log.read_text()[-3000:]}"
        time.sleep(0.5)


def _active_slots(server: LocalServer) -> int:
    with temporary_settings({PREFECT_API_URL: server.url}), get_client(sync_client=True) as client:
        return client.read_global_concurrency_limit_by_name(campaign_limit_name(CAMPAIGN)).active_slots


def _move_the_holder_to_another_machine(server: LocalServer) -> None:
    name = note_name(campaign_limit_name(CAMPAIGN))
    with temporary_settings({PREFECT_API_URL: server.url}), get_client(sync_client=True) as client:
        note = client.read_variable_by_name(name)
        assert note is not None, "the holder left no note beside its lease"
        value = dict(note.value)
        value["process"] = {**value["process"], "boot_id": "another-machine"}
        client.update_variable(VariableUpdate(name=name, value=value))


def test_a_killed_holder_s_slot_survives_a_server_restart_and_is_freed_when_its_lease_runs_out(
    tmp_path: Path,
) -> None:
    port, home = free_port(), tmp_path / "home"
    server = start_server(home, port=port)
    children: list[subprocess.Popen[bytes]] = []
    try:
        first, held, log = _holder(server, tmp_path, "first", 3600)
        children.append(first)
        _wait_for(held, first, log)
        os.kill(first.pid, signal.SIGKILL)
        first.wait()

        server.child.stop()
        server = start_server(home, port=port)  # same database, same lease files
        assert _active_slots(server) == 1  # the dead holder's slot is still taken: the lease outlived the server
        _move_the_holder_to_another_machine(server)

        second, got, log = _holder(server, tmp_path, "second", 0)
        children.append(second)
        _wait_for(got, second, log)
        assert second.wait(timeout=WAIT_SECONDS) == 0, log.read_text()[-3000:]
        said = log.read_text()
        assert f"waiting for slot {campaign_limit_name(CAMPAIGN)}" in said, said[-3000:]
        assert "held by flow run" in said and f"at most {LEASE_SECONDS} s after it stops renewing its lease" in said
        assert "its holder is gone" not in said
        assert _active_slots(server) == 0  # released at the end of the run
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
        server.child.stop()
