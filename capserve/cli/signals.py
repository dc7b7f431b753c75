"""SIGTERM that is never lost: not in a finalizer, not under Prefect's flow engine.

A Python signal handler runs in the main thread between two bytecodes of whatever runs there, a
finalizer included: the garbage collector may be calling an object's ``__del__`` (an asyncio transport
left unclosed, say) or a weak reference's callback (a ``WeakValueDictionary`` dropping an entry) at that
moment. An exception raised from there is not propagated: Python hands it to ``sys.unraisablehook``
("Exception ignored in: …") and the interrupted code goes on (Python data model, ``__del__``: "exceptions
that occur during their execution are ignored"; ``sys.unraisablehook``). So a handler that only raises
loses the signal now and then: a `capserve up --in-process` SIGTERMed during bring-up carried on to the end.

Both handlers that can be installed while a command runs therefore mark what they raise, and an
unraisable hook that meets a marked exception sends the signal again a moment later, when the finalizer
has returned.

- ours (``interrupt``): SIGTERM becomes ``KeyboardInterrupt``, as Ctrl-C;
- Prefect's, which its flow engine installs while a flow runs in this process
  (``prefect.utilities.engine.capture_sigterm`` raises ``TerminationSignal``, crashes the run, restores
  the previous handler — ours — and sends the signal again, so the command still ends with exit 130).
  It is replaced by the same handler wrapped (``defer_prefect_handler_in_finalizers``); the engine looks
  its handler up by that module-level name, both to install it and to recognise it as installed.
"""

from __future__ import annotations

import atexit
import gc
import os
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

REDELIVER_AFTER_S = 0.05

# Set by every SIGTERM a wrapped handler sees. Prefect's engine may still turn its ``TerminationSignal`` into
# another error (one that lands while a task run is being created ends as ``ValueError: Task run is not set``,
# and the signal is not sent again): the command then knows it was asked to stop, and says so (exit 130).
received = threading.Event()

Handler = Callable[[int, FrameType | None], Any]
SIGNAL_ATTR = "capserve_signal"  # set on what a wrapped handler raises: the signal it stands for


def _redeliver(signum: int) -> None:
    timer = threading.Timer(REDELIVER_AFTER_S, os.kill, (os.getpid(), signum))
    timer.daemon = True  # never keeps a finished command alive
    timer.start()


def _catch_lost_signals() -> None:
    """Make ``sys.unraisablehook`` send a signal again when an exception a wrapped handler raised is ignored in a
    finalizer (and not print it: it was no error); anything else goes to the hook in place. Installed when a
    signal arrives, over whatever hook is in place then (a test runner replaces hooks between tests)."""
    previous = sys.unraisablehook
    if getattr(previous, SIGNAL_ATTR, False):
        return

    def redeliver_if_lost(unraisable: Any) -> None:
        signum = getattr(unraisable.exc_value, SIGNAL_ATTR, None)
        if signum is None:
            previous(unraisable)
        else:
            _redeliver(signum)

    setattr(redeliver_if_lost, SIGNAL_ATTR, True)
    sys.unraisablehook = redeliver_if_lost


def outside_finalizers(handler: Handler) -> Handler:
    """``handler``, except that what it raises inside a finalizer is not lost: the signal is sent again."""

    def deferring(signum: int, frame: FrameType | None) -> Any:
        received.set()
        _catch_lost_signals()
        try:
            return handler(signum, frame)
        except BaseException as raised:
            setattr(raised, SIGNAL_ATTR, signum)
            raise

    deferring.__wrapped__ = handler  # type: ignore[attr-defined]
    return deferring


@outside_finalizers
def interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # SIGTERM (systemd, `kill`, a CI timeout) stops a command as Ctrl-C does


def defer_prefect_handler_in_finalizers() -> None:
    """Wrap Prefect's flow-engine SIGTERM handler with ``outside_finalizers`` (once; before a flow runs)."""
    from prefect.utilities import engine

    current = engine._prefect_sigterm_handler
    if getattr(current, "__wrapped__", None) is None:
        engine._prefect_sigterm_handler = outside_finalizers(current)  # type: ignore[assignment]


def skip_the_final_collection() -> None:
    """Freeze the heap once the atexit handlers registered after this call have run (they run first), so the
    interpreter's final garbage collections skip it. A command that ran a campaign in process holds millions of
    objects (Prefect, boto3, the sandbox's moto); collecting them all at exit took 10 s of the 15 a SIGTERMed
    command may take on a loaded machine (``gc.freeze``: frozen objects are ignored by every later collection,
    https://docs.python.org/3/library/gc.html#gc.freeze). Nothing is lost: files and logs are flushed by their
    own handlers and by the interpreter, not by the collector."""
    atexit.register(gc.freeze)
