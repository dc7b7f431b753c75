"""The run's known secrets, and the logging hook that keeps them out of every log record.

Secrets are registered as they are learnt (the CLI registers the API key it was told to read, the
credentials it took out of a URL, the Hub token and AWS secret key from the environment; the
evaluate flow registers the variables it is given, for runs started by a worker). Logging then
redacts every record **at creation**, through the log-record factory, so every handler sees the
redacted text: the console, Prefect's API handler that writes run logs into its database, and any
handler added later (Prefect re-creates its handlers when it reconfigures logging, so filters on
handler instances alone would be lost). The traceback text of a record is redacted the same way.

Without ``--debug`` the CLI also keeps tracebacks off the console: a filter on every console
handler drops them (the API handler, which runs first for run loggers, keeps them for the Prefect
UI), and the console line says how to see them.

This module holds process state on purpose: a logging hook has no other way to know the secrets.
It is the only such global; it only ever grows, under a lock.
"""

from __future__ import annotations

import logging
import os
import threading
import traceback
from collections.abc import Iterable
from typing import Any

from capserve.core.redaction import Redactor

# Environment variables whose values are secrets wherever they appear.
SECRET_ENVIRONMENT = (
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
)
# Loggers whose handlers write to a terminal: Prefect's console handler sits on the root logger.
_CONSOLE_LOGGERS = ("", "prefect", "prefect._internal", "capserve", "uvicorn", "fastapi")
DEBUG_HINT = "run with --debug for the traceback"

_lock = threading.Lock()
_secrets: set[str] = set()
_redactor = Redactor()
_state: dict[str, Any] = {"installed": False, "console_tracebacks": True}


def register_secret(*values: str | None) -> None:
    """Add secrets (None, empty and too-short values are ignored) to what every log and output hides."""
    global _redactor
    new = {v for v in values if v} - _secrets
    if not new:
        return
    with _lock:
        _secrets.update(new)
        _redactor = Redactor(_secrets)


def register_secret_environment(names: Iterable[str | None] = SECRET_ENVIRONMENT) -> None:
    """Register the values of these environment variables (unset ones are skipped)."""
    register_secret(*(os.environ.get(name) for name in names if name))


def redactor() -> Redactor:
    """A redactor that knows every secret registered so far in this process."""
    return _redactor


def redact(text: str) -> str:
    return _redactor.redact(text)


def install_log_redaction(*, console_tracebacks: bool | None = None) -> None:
    """Redact every log record from now on. ``console_tracebacks=False`` keeps tracebacks off terminals
    (the CLI without --debug); None leaves that choice as it is (flows call this for worker runs)."""
    with _lock:
        if console_tracebacks is not None:
            _state["console_tracebacks"] = console_tracebacks
        if _state["installed"]:
            return
        base = logging.getLogRecordFactory()

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = base(*args, **kwargs)
            _scrub(record)
            if not _state["console_tracebacks"]:
                _guard_console_handlers()
            return record

        logging.setLogRecordFactory(factory)
        _state["installed"] = True


def _scrub(record: logging.LogRecord) -> None:
    current = _redactor
    try:
        message = record.getMessage()
    except Exception:  # noqa: BLE001 - a malformed %-format in someone's log call: leave it to the handler to report
        return
    record.msg, record.args = current.redact(message), None
    if record.exc_info and record.exc_info[1] is not None:
        text = "".join(traceback.format_exception(*record.exc_info)).rstrip("\n")
        record.exc_text = current.redact(text)
    if record.stack_info:
        record.stack_info = current.redact(record.stack_info)


class _NoTracebackOnConsole(logging.Filter):
    """Drops a record's traceback on its way to a terminal, and says how to get it."""

    def filter(self, record: logging.LogRecord) -> bool:
        if _state["console_tracebacks"]:
            return True
        if record.exc_info or record.exc_text or record.stack_info:
            record.exc_info, record.exc_text, record.stack_info = None, None, None
            record.msg = f"{record.msg} ({DEBUG_HINT})"
        return True


_CONSOLE_FILTER = _NoTracebackOnConsole()


def _guard_console_handlers() -> None:
    """Attach the console filter to every terminal handler (cheap: a few handlers, checked by identity)."""
    for name in _CONSOLE_LOGGERS:
        for handler in logging.getLogger(name).handlers:
            if _is_console(handler) and _CONSOLE_FILTER not in handler.filters:
                handler.addFilter(_CONSOLE_FILTER)


def _is_console(handler: logging.Handler) -> bool:
    stream = getattr(handler, "stream", None)
    return isinstance(handler, logging.StreamHandler) and getattr(stream, "name", "") in ("<stderr>", "<stdout>")
