"""What a long wait is waiting for and how far it got, as one plain line a person can read (pure).

A K3 cold start is an hour of block time; bring-up, staging and evaluation are minutes each. ``Progress`` says
what is awaited ("nodes joined", "staged", "vLLM startup"), how much of it is done, and, for a wait that has no
count (an engine starting), how long it has run against how long it is expected to run. ``Throttle`` decides
when a new line is worth printing: a log read in CI gets a line when something changed enough, never one per
poll.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

Unit = Literal["count", "bytes"]

PREFIX = "progress: "  # starts every progress record in a run's log, so a follower can pick them out
BAR_WIDTH = 10
_SIZES = (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))
_EPSILON = 1e-9  # 0.3 - 0.2 < 0.1 in floating point: a move of one step is one step


@dataclass(frozen=True)
class Progress:
    """One reading of a wait. ``done``/``total`` count things or bytes; ``elapsed_s``/``expected_s`` are for a
    wait measured in time (the engine's start); ``detail`` names a phase or adds a fact ("8 GPUs each")."""

    what: str
    done: float | None = None
    total: float | None = None
    unit: Unit = "count"
    detail: str = ""
    elapsed_s: float | None = None
    expected_s: float | None = None

    @property
    def fraction(self) -> float | None:
        """How far, 0–1: done of total when counted, else elapsed of expected (capped: a start may overrun)."""
        if self.done is not None and self.total:
            return min(max(self.done / self.total, 0.0), 1.0)
        if self.elapsed_s is not None and self.expected_s:
            return min(max(self.elapsed_s / self.expected_s, 0.0), 1.0)
        return None

    @property
    def finished(self) -> bool:
        return self.done is not None and self.total is not None and self.done >= self.total

    def line(self) -> str:
        """Plain text, no control characters: ``nodes joined 1/2 (8 GPUs each)``, ``staged 12.4 of 40.0 GiB
        [===-------] 31 %``, ``vLLM startup: loading weights, 23 of ~75 min expected``."""
        if self.unit == "bytes" and self.done is not None and self.total:
            fraction = self.fraction or 0.0
            filled = int(fraction * BAR_WIDTH)  # full only when done
            bar = "=" * filled + "-" * (BAR_WIDTH - filled)
            name, size = _size_unit(self.total)
            amount = f"{self.done / size:.1f} of {self.total / size:.1f} {name}"
            text = f"{self.what} {amount} [{bar}] {fraction * 100:.0f} %"
            return f"{text} ({self.detail})" if self.detail else text
        if self.done is not None and self.total is not None:
            text = f"{self.what} {self.done:g}/{self.total:g}"
            return f"{text} ({self.detail})" if self.detail else text
        if self.elapsed_s is not None:
            timing = f"{self.elapsed_s / 60:.0f}"
            timing += f" of ~{self.expected_s / 60:.0f} min expected" if self.expected_s else " min"
            return f"{self.what}: {self.detail}, {timing}" if self.detail else f"{self.what}: {timing}"
        return f"{self.what}: {self.detail}" if self.detail else self.what


def _size_unit(total: float) -> tuple[str, int]:
    """The largest binary unit the total fills at least once (K3's 1.56 TB in TiB, the sandbox's tiny one in KiB)."""
    return next(((name, size) for name, size in _SIZES if total >= size), ("bytes", 1))


@dataclass
class Throttle:
    """When a wait's next reading deserves a line: the first one, a new phase or detail, the end, the fraction
    moved by ``step`` since the last line, or ``every_s`` of wall time passed with a different line. Anything
    else (the same nodes again, a few more bytes) is dropped."""

    step: float = 0.10
    every_s: float = 60.0
    _last_at: float | None = field(default=None, init=False)
    _last_fraction: float | None = field(default=None, init=False)
    _last_detail: str | None = field(default=None, init=False)
    _last_line: str | None = field(default=None, init=False)
    _finished: bool = field(default=False, init=False)

    def worth(self, progress: Progress, now: float) -> bool:
        """Whether to print ``progress`` at ``now`` (monotonic seconds); remembers it when so."""
        line = progress.line()
        if line == self._last_line:
            return False
        fraction = progress.fraction
        due = (
            self._last_at is None
            or progress.detail != self._last_detail
            or (progress.finished and not self._finished)
            or (fraction is not None and abs(fraction - (self._last_fraction or 0.0)) >= self.step - _EPSILON)
            or now - self._last_at >= self.every_s
        )
        if due:
            self._last_at, self._last_fraction, self._last_detail = now, fraction, progress.detail
            self._last_line, self._finished = line, progress.finished
        return due


# --------------------------------------------------------------------------- a line's time on the block's clock

# A run logs each line with the block time it was true at, so that a follower reading the log later (the
# campaign's clock may have moved hours) still shows it at its own time: ``progress: [block 2026-12-06 13:44:10
# UTC] vLLM startup: …``. The UI shows the same text.
_BLOCK_STAMP = re.compile(r"^\[block (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC\] ")


def stamped(line: str, block_at: datetime | None) -> str:
    """``line`` with its block time in front (``line`` alone when the time is unknown)."""
    if block_at is None:
        return line
    return f"[block {block_at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC] {line}"


def unstamped(text: str) -> tuple[datetime | None, str]:
    """The block time and the line of what ``stamped`` made (None and the text when it carries no time)."""
    found = _BLOCK_STAMP.match(text)
    if found is None:
        return None, text
    at = datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
    return at, text[found.end():]


def block_clock(at: datetime, start: datetime | None) -> str:
    """``block +02:14`` (hours and minutes since the block's start, ``-`` before it), or ``block 12-06 09:12`` (the
    block's date and time) while the start is not known yet."""
    if start is None:
        return f"block {at.astimezone(UTC):%m-%d %H:%M}"
    minutes = int((at - start).total_seconds() // 60)
    sign = "-" if minutes < 0 else "+"
    hours, minute = divmod(abs(minutes), 60)
    return f"block {sign}{hours:02d}:{minute:02d}"


def state_text(state_type: str, state_name: str) -> str:
    """A run's state once: ``Pending``, not ``Pending (PENDING)``; ``Suspended (PAUSED)`` where the name says
    more than the type."""
    name = state_name or state_type.title()
    if not state_type or name.replace(" ", "").upper() == state_type.replace("_", "").upper():
        return name
    return f"{name} ({state_type})"
