"""A tool container's process on a playing block's clock (docs/sandbox-kubelet.md, "A played staging").

A container the kubelet runs as a local process (the staging Job's copy, a compile-cache Job, the network check)
does in wall time what a node does in the block's: on a loaded host, seconds become tens. While a block plays, its
process holds the clock, as a working flow run's does, so the block sees none of the host's speed; the clock moves
meanwhile only through what the process waits for (its copies: ``played_staging.StagingPlay.copied``).
"""

from __future__ import annotations

import asyncio
import logging
from uuid import uuid4

from capserve_sandbox.clock import CLOCK

_log = logging.getLogger(__name__)

HOLD_AT_MOST_S = 120.0
"""Wall seconds a container's process may hold the block's clock: one that runs longer (a hung copy) lets the block
go on, so the deadline its Job is watched against, on the block's clock, still comes. The staging Job's process
runs for seconds between its copies, tens under a loaded `make test`. [inf]"""


class ProcessHold:
    """A container's local process works on a playing block's clock, from just before its start until its end is
    in the pod's status (``HOLD_AT_MOST_S`` at most): the clock moves meanwhile only through what the process waits
    for (its copies, ``StagingPlay.copied``), so the container's ``startedAt``→``finishedAt`` is their modelled
    time on any host."""

    def __init__(self) -> None:
        self.token = f"container-{uuid4().hex}"  # the process's ``PARTY_ENV``
        self._held = False
        self._timer: asyncio.TimerHandle | None = None

    def hold(self) -> None:
        """The container starts (on the kubelet's loop): it holds the clock if a block plays."""
        if self._held or not CLOCK.playing:
            return
        CLOCK.held_by(self.token)  # not ``work``: a stand-in's work does not end a followed run's hold
        self._held = True
        self._timer = asyncio.get_running_loop().call_later(HOLD_AT_MOST_S, self._too_long)

    def _too_long(self) -> None:
        _log.warning("sandbox kubelet: a container's process has held the block's clock for %.0f wall seconds; the "
                     "block goes on", HOLD_AT_MOST_S)
        self.release()

    def release(self) -> None:
        """The container has ended (or is given up): it holds the clock no more."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._held:
            self._held = False
            CLOCK.rest(self.token)
