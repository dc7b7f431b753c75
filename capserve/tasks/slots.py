"""Slots: one run per campaign at a time (``campaign-<id>``), one purchase per campaign at a time
(``capserve-purchase-<id>``). Each is a Prefect global concurrency limit of 1, held under a lease.

Campaigns run side by side (no deployment-wide limit); two runs of the same campaign (a re-run from the
UI, the scheduled serve run firing while the campaign run still stages weights) take turns. The drain
and the scheduled teardown do not take the campaign slot: they must run at their times whatever else runs.

A holder renews its lease while it lives; the server frees the slot of a holder that stopped renewing
once the lease runs out (docs/prefect.md §5). That is how long a re-run would wait after a crash, so a
holder also leaves a note beside its lease, a Prefect variable ``capserve-slot-<limit>``: its flow run,
its lease and who its process is (``capserve/tasks/processes.py``). A waiter that can prove the holder
dead (same machine and pid namespace, the process gone) releases that lease at once and takes the slot;
any other holder it names in its log, and waits for it to end or for its lease to run out.

The campaign slot is taken only by deployment runs: a temporary server never expires leases, so an
in-process run (the CLI) killed while holding it on one would block its campaign for good.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from prefect import get_client, get_run_logger
from prefect.client.schemas.actions import VariableCreate
from prefect.client.schemas.objects import ConcurrencyLeaseHolder
from prefect.concurrency.asyncio import ConcurrencySlotAcquisitionError
from prefect.concurrency.context import ConcurrencyContext
from prefect.concurrency.sync import concurrency
from prefect.exceptions import MissingContextError, ObjectNotFound, PrefectHTTPStatusError
from prefect.logging import get_logger
from prefect.runtime import deployment, flow_run
from pydantic import BaseModel, ValidationError

from capserve.core.errors import PermanentError
from capserve.core.settings import SlotSettings
from capserve.tasks.processes import ProcessIdentity, provably_dead, this_process
from capserve.tasks.the_clock import clock

LOCKED = 423
MAX_POLL_SECONDS = 5.0


class SlotTimeout(PermanentError):
    """The slot stayed taken for the whole wait: nothing was done; the CLI says so with exit 1, never as a bug."""


class SlotNote(BaseModel):
    """What a holder leaves beside its lease: enough for a waiter to name it, and to prove it dead."""

    lease_id: UUID
    flow_run_id: UUID | None = None
    flow_run_name: str | None = None
    process: ProcessIdentity | None = None
    since: datetime

    def describe(self) -> str:
        run = f"flow run {self.flow_run_name} ({self.flow_run_id})" if self.flow_run_id else "a run outside Prefect"
        where = f", {self.process.describe()}" if self.process else ""
        return f"{run}{where}, since {self.since:%Y-%m-%d %H:%M:%S} UTC"


def campaign_limit_name(campaign_id: str) -> str:
    return f"campaign-{campaign_id}"


def note_name(limit: str) -> str:
    return f"capserve-slot-{limit}"


def _log() -> logging.Logger | logging.LoggerAdapter[logging.Logger]:
    try:
        return get_run_logger()
    except MissingContextError:  # outside a run (a test, the CLI): the module's logger
        return get_logger("capserve.slots")


@contextmanager
def campaign_slot(campaign_id: str, settings: SlotSettings | None = None) -> Iterator[None]:
    """Hold the campaign's slot for the duration of a deployment run (created on demand, limit 1)."""
    if deployment.get_id() is None:
        yield
        return
    with leased_slot(campaign_limit_name(campaign_id), (settings or SlotSettings()).lease_seconds,
                     purpose=f"one run of campaign {campaign_id} at a time"):
        yield


@contextmanager
def leased_slot(
    limit: str, lease_seconds: int, *, purpose: str, timeout_seconds: float | None = None
) -> Iterator[None]:
    """Hold the one slot of ``limit`` (created here, limit 1) for the block; reclaim it from a dead holder.

    Taken, renewed and released by Prefect's ``concurrency()``, strict as ``concurrency(strict=True)``: a run
    whose lease is lost is stopped rather than go on beside a second holder (docs/prefect.md §5)."""
    with get_client(sync_client=True) as client:
        client.upsert_global_concurrency_limit_by_name(limit, 1)
    run_id = flow_run.get_id()
    holder = ConcurrencyLeaseHolder(type="flow_run", id=UUID(run_id)) if run_id else None
    # Prefect notes each lease it grants in the current ConcurrencyContext (to release it should the run be
    # cancelled): in one of our own, ours is the only one, and its id goes into the note beside it.
    with ConcurrencyContext() as granted, ExitStack() as held:
        _wait_for(held, limit, lease_seconds, holder, purpose, timeout_seconds)
        mine = SlotNote(lease_id=granted.cleanup_lease_ids[-1], flow_run_id=UUID(run_id) if run_id else None,
                        flow_run_name=flow_run.get_name() if run_id else None, process=this_process(),
                        since=datetime.now(UTC))
        with get_client(sync_client=True) as client:
            _leave(client, limit, mine)
        _log().info("holding slot %s (%s)", limit, purpose)
        try:
            yield
        finally:
            with get_client(sync_client=True) as client:
                _forget(client, limit, mine.lease_id)  # before the release: nobody else can hold the slot yet


def _wait_for(
    held: ExitStack, limit: str, lease_seconds: int, holder: ConcurrencyLeaseHolder | None, purpose: str,
    timeout_seconds: float | None,
) -> None:
    """Take the slot into ``held``, asking once per poll (not inside Prefect's own wait: between asks a dead
    holder's lease is released, the live one named, and the block's clock may move)."""
    deadline = None if timeout_seconds is None else time.monotonic() + timeout_seconds
    reclaimed: set[UUID] = set()
    named: object = "nobody yet"  # the holder last named in the log: name each one once
    while True:
        try:
            held.enter_context(concurrency(limit, lease_duration=lease_seconds, max_retries=0, strict=True,
                                           holder=holder, raise_on_lease_renewal_failure=True))
            return
        except ConcurrencySlotAcquisitionError as exc:
            taken = exc.__cause__
            if not isinstance(taken, PrefectHTTPStatusError) or taken.response.status_code != LOCKED:
                raise
            wait = float(taken.response.headers.get("Retry-After", 1))
        with get_client(sync_client=True) as client:
            note = _read(client, limit)
            if note is not None and note.lease_id not in reclaimed and note.process and provably_dead(note.process):
                reclaimed.add(note.lease_id)  # a note left behind by a holder whose lease is already gone: once
                _log().warning("slot %s: its holder is gone (%s, no longer running on this machine); releasing its "
                               "lease now instead of waiting up to %d s for it to run out", limit, note.describe(),
                               lease_seconds)
                client.release_concurrency_slots_with_lease(note.lease_id)
                continue
        if (note.lease_id if note else None) != named:
            named = note.lease_id if note else None
            who = note.describe() if note else "a holder that left no note"
            _log().info("waiting for slot %s (%s): held by %s; it is free when that run ends, or at most %d s "
                        "after it stops renewing its lease", limit, purpose, who, lease_seconds)
        if deadline is not None and time.monotonic() > deadline:
            who = note.describe() if note is not None else "a holder that left no note"
            raise SlotTimeout(f"slot {limit} ({purpose}) was still held by {who} after {timeout_seconds:.0f} s; "
                              "nothing was done. Run again once that run has ended (capserve status shows it).")
        clock().sleep(min(max(wait, 0.5), MAX_POLL_SECONDS))  # waiting for another run: the block may move


def _read(client: Any, limit: str) -> SlotNote | None:
    variable = client.read_variable_by_name(note_name(limit))
    if variable is None:
        return None
    try:
        return SlotNote.model_validate(variable.value)
    except ValidationError:  # someone else's variable of that name: not a note to act on
        return None


def _leave(client: Any, limit: str, note: SlotNote) -> None:
    name = note_name(limit)
    value = note.model_dump(mode="json")
    try:
        client.delete_variable_by_name(name)
    except ObjectNotFound:
        pass
    client.create_variable(VariableCreate(name=name, value=value, tags=["capserve"]))


def _forget(client: Any, limit: str, lease_id: UUID) -> None:
    note = _read(client, limit)
    if note is not None and note.lease_id == lease_id:
        try:
            client.delete_variable_by_name(note_name(limit))
        except ObjectNotFound:
            pass
