"""Stand-ins that fail say so, in one place: a loop of the sandbox never dies, or errs, in silence.

Every background loop of the stand-ins (the simulated clock's tick, the fake Kubernetes' controllers and kubelet,
the API servers' handlers, the local Hub) hands an error it did not expect to ``FAILURES.report``: one line in the
log (the traceback goes to the sandbox's failure log, not into the demo's output) and an entry the command that
started the sandbox reads (``failures()``) to end non-zero, naming the stand-in and where its traceback is. A loop
that failed goes on where each of its turns stands alone (the tick, a controller pass, a request), else it stops;
either way it has been reported, so a campaign that ran on a broken stand-in never passes for one that did not.

Process-global, as the sandbox's clock is (the stand-ins run in the process that started them); ``reset`` at each
sandbox's start.
"""

from __future__ import annotations

import logging
import tempfile
import threading
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import ParamSpec, TypeVar

_log = logging.getLogger(__name__)
P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class Failure:
    """A stand-in that failed: which, its first error (one line), how often it failed, where the tracebacks are."""

    stand_in: str
    error: str
    count: int
    log: Path

    def line(self) -> str:
        again = f" (and {self.count - 1} more time{'s' if self.count > 2 else ''})" if self.count > 1 else ""
        return f"the sandbox's {self.stand_in} failed{again}: {self.error}; traceback in {self.log}"


class Failures:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[str, Failure] = {}
        self._log_path = Path(tempfile.gettempdir()) / "capserve-sandbox-failures.log"

    def reset(self, log: Path | None = None) -> None:
        """Forget earlier failures; tracebacks from now on go to ``log`` (default: one in the temporary folder)."""
        with self._lock:
            self._seen = {}
            if log is not None:
                self._log_path = log

    @property
    def log(self) -> Path:
        with self._lock:
            return self._log_path

    def report(self, stand_in: str, error: BaseException, doing: str = "", traceback_text: str | None = None) -> None:
        """``stand_in`` failed on ``error`` (while ``doing``, for the failure log): one log line the first time (a
        loop failing on every turn must not flood the output), its traceback (``traceback_text`` when the error
        was only logged, not raised here) appended to the failure log every time, and counted."""
        summary = f"{type(error).__name__}: {error}".splitlines()[0][:300] if str(error) else type(error).__name__
        stamp = datetime.now(UTC).isoformat(timespec="milliseconds")
        details = traceback_text if traceback_text is not None else "".join(traceback.format_exception(error))
        with self._lock:
            log = self._log_path
            seen = self._seen.get(stand_in)
            count = 1 if seen is None else seen.count + 1
            self._seen[stand_in] = Failure(stand_in, seen.error if seen else summary, count, log)
            try:
                log.parent.mkdir(parents=True, exist_ok=True)
                with log.open("a", encoding="utf-8") as out:
                    out.write(f"--- {stamp} {stand_in} failed{' on ' + doing if doing else ''}\n")
                    out.write(details)
            except OSError as exc:  # the failure still counts, and the line below still says what it was
                _log.warning("sandbox: could not write %s's traceback to %s: %s", stand_in, log, exc)
        if seen is None:
            _log.error("sandbox: %s failed: %s (traceback in %s)", stand_in, summary, log)

    def failures(self) -> list[Failure]:
        """Every stand-in that failed since the last reset, in the order they first failed."""
        with self._lock:
            return list(self._seen.values())

    @contextmanager
    def guard(self, stand_in: str) -> Iterator[None]:
        """Report an ``Exception`` raised in the block and swallow it: for one turn of a loop that goes on."""
        try:
            yield
        except Exception as exc:  # noqa: BLE001 - reported: the loop's next turn stands on its own
            self.report(stand_in, exc)

    def guarded(self, stand_in: str, action: Callable[P, R]) -> Callable[P, R | None]:
        """``action`` reporting its failures (None then), for a loop's step or a thread's target."""

        def run(*args: P.args, **kwargs: P.kwargs) -> R | None:
            try:
                return action(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - reported
                self.report(stand_in, exc)
                return None

        return run


FAILURES = Failures()


class ReportServerErrors(logging.Filter):
    """On werkzeug's logger (moto's server): a request that raised is reported as ``stand_in``'s failure instead of
    printed to stderr (werkzeug logs "Error on request:" and the traceback as text, and answers 500)."""

    def __init__(self, stand_in: str) -> None:
        super().__init__()
        self.stand_in = stand_in

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if record.levelno < logging.ERROR or "Error on request:" not in message:
            return True
        last = next((line.strip() for line in reversed(message.splitlines()) if line.strip()), "an error")
        FAILURES.report(self.stand_in, RuntimeError(last), traceback_text=message + "\n")
        return False
