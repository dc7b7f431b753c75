"""How ``capserve up`` shows the progress of the runs it follows on a server (``capserve.tasks.progress``).

On a terminal, a live status line under the state changes holds each run's latest progress, and every line is
kept above it as it comes; anywhere else (CI, a log file) each line is printed once, plain: the runs already
throttled them, and rich writes no control characters to a console that is not a terminal.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime

from rich.console import Console
from rich.status import Status
from rich.text import Text

from capserve.tasks.progress import ProgressLine, read_progress

READ_EVERY_S = 5.0  # how often the server's logs are read for new progress lines (wall seconds)


class ProgressView:
    """Prints progress lines as they arrive: plain lines, plus a live status on a terminal."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._latest: dict[str, str] = {}  # run → its last line, for the live status
        self._status: Status | None = None

    def show(self, lines: list[ProgressLine]) -> None:
        for found in lines:
            self.console.print(Text(f"  {found.run}: {found.line}"), highlight=False, soft_wrap=True)
            self._latest[found.run] = found.line
        if lines and self.console.is_terminal:
            status = Text(" | ".join(f"{run}: {line}" for run, line in self._latest.items()))
            if self._status is None:
                self._status = self.console.status(status)
                self._status.start()
            else:
                self._status.update(status)

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

    def poll(self) -> None:
        """Show what was logged since the last read, when a read is due; a server that does not answer this once
        only delays the lines (following the runs' states is what matters)."""
        now = self.clock()
        if self._read_at is not None and now - self._read_at < READ_EVERY_S:
            return
        self._read_at = now
        try:
            lines, self.after = self.read(self.campaign_id, after=self.after)
        except Exception:  # the next read catches up from the same ``after``
            return
        self.view.show(lines)
