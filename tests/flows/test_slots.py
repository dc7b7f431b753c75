"""Slots on the test harness's Prefect server: a dead holder's slot is taken at once, a live one is waited for
and named, and a holder leaves and takes back its note (``capserve/tasks/slots.py``)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prefect import get_client
from prefect.client.schemas.actions import VariableCreate
from prefect.settings import PREFECT_API_URL

from capserve.tasks.processes import this_process
from capserve.tasks.slots import SlotNote, SlotTimeout, leased_slot, note_name

LEASE = 300  # far longer than any wait below: a slot freed here was freed by capserve, not by the lease
HOLDER = """
import sys, time
from capserve.tasks.slots import leased_slot

with leased_slot(sys.argv[1], 300, purpose="a test holder"):
    print("held", flush=True)
    time.sleep(600)
"""


@pytest.fixture
def limit() -> str:
    return f"slot-test-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def holders(tmp_path: Path) -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for child in started:
        if child.poll() is None:
            child.kill()
        child.wait()


def _hold(limit: str, tmp_path: Path, holders: list[subprocess.Popen[str]]) -> subprocess.Popen[str]:
    """Another process that takes the slot and keeps it; returns once it holds it."""
    script = tmp_path / "holder.py"
    script.write_text(HOLDER)
    env = {**os.environ, "PREFECT_API_URL": str(PREFECT_API_URL.value())}
    child = subprocess.Popen(  # our own interpreter and script
        [sys.executable, str(script), limit], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    holders.append(child)
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "held", "the holder did not get the slot"
    return child


def _active(limit: str) -> int:
    with get_client(sync_client=True) as client:
        return client.read_global_concurrency_limit_by_name(limit).active_slots


def _note(limit: str) -> SlotNote | None:
    with get_client(sync_client=True) as client:
        variable = client.read_variable_by_name(note_name(limit))
    return None if variable is None else SlotNote.model_validate(variable.value)


def test_a_holder_leaves_a_note_naming_its_process_and_takes_it_back(limit: str) -> None:
    with leased_slot(limit, LEASE, purpose="a test"):
        note = _note(limit)
        assert note is not None and note.process == this_process()
        assert _active(limit) == 1
    assert _note(limit) is None
    assert _active(limit) == 0


def test_a_killed_holder_s_slot_is_taken_at_once_without_waiting_for_its_lease(
    limit: str, tmp_path: Path, holders: list[subprocess.Popen[str]], caplog: pytest.LogCaptureFixture
) -> None:
    holder = _hold(limit, tmp_path, holders)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    assert _active(limit) == 1  # nothing told the server: the lease would keep the slot for LEASE seconds
    caplog.set_level(logging.INFO)
    with leased_slot(limit, LEASE, purpose="a test", timeout_seconds=60):
        assert _note(limit).process == this_process()  # type: ignore[union-attr]
    gone = [r.getMessage() for r in caplog.records if "its holder is gone" in r.getMessage()]
    assert len(gone) == 1 and f"process {holder.pid} on" in gone[0], caplog.text
    assert _active(limit) == 0


def test_a_live_holder_is_named_and_waited_for_never_reclaimed(
    limit: str, tmp_path: Path, holders: list[subprocess.Popen[str]], caplog: pytest.LogCaptureFixture
) -> None:
    holder = _hold(limit, tmp_path, holders)
    caplog.set_level(logging.INFO)
    started = time.monotonic()
    with pytest.raises(SlotTimeout) as refused, leased_slot(limit, LEASE, purpose="a test", timeout_seconds=3):
        pytest.fail("took a slot a live process holds")
    assert time.monotonic() - started >= 3
    assert f"process {holder.pid} on" in str(refused.value) and "nothing was done" in str(refused.value)
    assert sum("waiting for slot" in r.getMessage() for r in caplog.records) == 1, caplog.text  # named once
    assert holder.poll() is None and _active(limit) == 1


def test_a_note_left_by_a_holder_on_another_machine_is_never_acted_on(
    limit: str, tmp_path: Path, holders: list[subprocess.Popen[str]]
) -> None:
    holder = _hold(limit, tmp_path, holders)
    note = _note(limit)
    assert note is not None and note.process is not None
    elsewhere = note.model_copy(update={"process": note.process.model_copy(update={"boot_id": "another-machine"})})
    with get_client(sync_client=True) as client:
        client.delete_variable_by_name(note_name(limit))
        client.create_variable(VariableCreate(name=note_name(limit), value=elsewhere.model_dump(mode="json")))
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    with pytest.raises(SlotTimeout, match="still held by a run outside Prefect"), \
            leased_slot(limit, LEASE, purpose="a test", timeout_seconds=3):
        pytest.fail("took the slot of a holder it cannot prove dead")


def test_a_stale_note_of_a_dead_holder_does_not_stop_a_free_slot_being_taken(limit: str) -> None:
    me = this_process()
    assert me is not None
    gone = SlotNote(lease_id=uuid.uuid4(), process=me.model_copy(update={"started_ticks": me.started_ticks + 1}),
                    since=datetime.now(UTC))
    with get_client(sync_client=True) as client:
        client.create_variable(VariableCreate(name=note_name(limit), value=gone.model_dump(mode="json")))
    with leased_slot(limit, LEASE, purpose="a test", timeout_seconds=10):
        assert _note(limit).lease_id != gone.lease_id  # type: ignore[union-attr]
    assert _note(limit) is None
