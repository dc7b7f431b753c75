"""How ``capserve up`` shows the campaign it follows on a server: its runs' states and the acts and progress they
log (``capserve.tasks.progress``), each line with the wall time to the second and the block's clock beside it.

``12:04:31  block +02:14  serve-k3-demo: vLLM startup: compiling (torch.compile), 12 of ~75 min expected``

A progress line shows the block time it was true at (the run stamped it); a state change the block time when it was
seen, except a run's end, which shows its last line's: once every run waits the block's clock jumps ahead, so "seen"
may be hours after the run ended. On a terminal a live status line under them names the runs that are running, each
with its latest line; anywhere else (CI, a log file) each line is printed once, plain, never wrapped
(``capserve.cli.console.plain_console``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

from rich.console import Console
from rich.status import Status
from rich.text import Text

from capserve.core.progress import block_clock
from capserve.tasks.progress import ProgressLine, read_progress

READ_EVERY_S = 5.0  # how often the server's logs are read for new progress lines (wall seconds)
RUNNING = {"RUNNING", "PENDING", "PAUSED", "CANCELLING"}  # a run the status line names
FINAL = {"COMPLETED", "FAILED", "CANCELLED", "CRASHED"}  # Prefect's terminal state types


class ProgressView:
    """Prints the campaign's lines as they arrive: plain lines, plus a live status of the running runs on a
    terminal. ``block_now`` is the block's clock now (``clock().now()``), ``block_start`` the block's start once
    it is known (None before the purchase)."""

    def __init__(
        self, console: Console, *, block_now: Callable[[], datetime | None] = lambda: None,
        block_start: Callable[[], datetime | None] = lambda: None,
    ) -> None:
        self.console, self.block_now, self.block_start = console, block_now, block_start
        self._latest: dict[str, str] = {}  # run → its last line, for the live status
        self._last_at: dict[str, datetime] = {}  # run → the block time of its last line
        self._running: dict[str, str] = {}  # run → its state, for the runs that are running
        self._status: Status | None = None

    def say(self, text: str, *, wall: datetime | None = None, block_at: datetime | None = None) -> None:
        """One line: wall time to the second, the block's clock (``block_at``, else now on it), the text."""
        wall = (wall or datetime.now(UTC)).astimezone(UTC)
        at = block_at or self._block_now()
        clock = f"  {block_clock(at, self.block_start())}" if at is not None else ""
        self.console.print(Text(f"{wall:%H:%M:%S}{clock}  {text}"), highlight=False)

    def state(self, run: str, state_type: str, text: str) -> None:
        """A run's new state: a line, and the status line names it while it runs."""
        self.say(f"{run}: {text}", block_at=self._last_at.pop(run, None) if state_type in FINAL else None)
        if state_type in RUNNING:
            self._running[run] = text
        else:
            self._running.pop(run, None)
            self._latest.pop(run, None)
        self._refresh()

    def show(self, lines: list[ProgressLine]) -> None:
        for found in lines:
            self.say(f"{found.run}: {found.line}", wall=found.at, block_at=found.block_at)
            self._latest[found.run] = found.line
            if found.block_at is not None:
                self._last_at[found.run] = found.block_at
        self._refresh()

    def _refresh(self) -> None:
        if not self.console.is_terminal:
            return
        if not self._running:
            self.close()
            return
        status = Text(" | ".join(f"{run}: {self._latest.get(run, state)}" for run, state in self._running.items()))
        if self._status is None:
            self._status = self.console.status(status)
            self._status.start()
        else:
            self._status.update(status)

    def _block_now(self) -> datetime | None:
        try:
            return self.block_now()
        except Exception:  # noqa: BLE001 - a clock that does not answer costs the line its block time, never the follow
            return None

    def close(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None


class ProgressFollower:
    """Reads the campaign's new progress lines from the server at most every ``READ_EVERY_S`` and shows them."""

    def __init__(
        self, campaign_id: str, since: datetime, view: ProgressView, *,
        read: Callable[..., tuple[list[ProgressLine], datetime]] = read_progress,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.campaign_id, self.after, self.view, self.read, self.clock = campaign_id, since, view, read, clock
        self._read_at: float | None = None

    def poll(self, *, now: bool = False) -> None:
        """Show what was logged since the last read, when a read is due (``now``: at once, as before a summary);
        a server that does not answer this once only delays the lines (following the runs' states is what
        matters)."""
        at = self.clock()
        if not now and self._read_at is not None and at - self._read_at < READ_EVERY_S:
            return
        self._read_at = at
        try:
            lines, self.after = self.read(self.campaign_id, after=self.after)
        except Exception:  # noqa: BLE001 - the next read catches up from the same ``after``
            return
        self.view.show(lines)
