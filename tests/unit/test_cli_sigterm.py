"""SIGTERM stops a capserve command as Ctrl-C does: exit 130, one line, no traceback (capserve/cli/__init__.py).

In this process, with a stand-in command that is signalled while it runs: a subprocess running a real
command costs over a minute on a loaded 2-core machine (interpreter, Prefect's temporary server) for the
same path. `make test-faults` SIGTERMs a real `capserve up` following a run, and checks its 130.
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
import time
import weakref
from collections.abc import Callable

import pytest

import capserve.cli as cli

FINISHED: list[bool] = []


def _parser_with_a_command_that_gets_sigterm(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="capserve")
    sub = parser.add_subparsers(dest="command", required=True)

    def run(args: argparse.Namespace) -> int:
        # Only the main thread gets a handler (and signals): anywhere else the signal would end the test process.
        assert threading.current_thread() is threading.main_thread(), "run this test in the main thread"
        os.kill(os.getpid(), signal.SIGTERM)  # what systemd, `kill` or a CI timeout sends
        time.sleep(30)  # interrupted at once by the handler
        FINISHED.append(True)
        return 0

    sub.add_parser("wait").set_defaults(func=run)
    return parser


def test_sigterm_stops_a_command_with_exit_130_and_no_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    before = signal.getsignal(signal.SIGTERM)
    monkeypatch.setattr(cli, "build_parser", _parser_with_a_command_that_gets_sigterm)
    assert cli.main(["wait"]) == 130
    assert not FINISHED  # stopped by the signal, not at the command's end
    said = capsys.readouterr()
    assert "interrupted" in said.err and "Traceback" not in said.err + said.out
    assert signal.getsignal(signal.SIGTERM) == before  # the command's handler does not outlive it


# ---------------------------------------------------------------------------- a SIGTERM landing in a finalizer


class _SignalledWhileFinalized:
    """Its ``__del__`` gets the SIGTERM: the handler runs there, where a raised exception would be ignored."""

    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        until = time.monotonic() + 0.5
        while time.monotonic() < until:  # the handler runs at one of these bytecodes, inside this finalizer
            pass


class _Referent:
    """A weak reference's callback gets the SIGTERM when this is freed (as a ``WeakValueDictionary`` drops an
    entry): an exception raised in that callback is ignored too."""


def _signalled_in_a_weakref_callback() -> None:
    def callback(_: object) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        until = time.monotonic() + 0.5
        while time.monotonic() < until:  # the handler runs at one of these bytecodes, inside the callback
            pass

    referent = _Referent()
    kept = weakref.ref(referent, callback)
    del referent  # the callback runs here, in the main thread
    assert kept() is None


def _signalled_in_a_del() -> None:
    doomed = _SignalledWhileFinalized()
    del doomed  # finalized here, in the main thread


def _parser_with_a_command_signalled_in_a_finalizer(in_a_flow: bool, finalizer: Callable[[], None]) -> object:
    def build(only: str | None = None) -> argparse.ArgumentParser:
        parser = argparse.ArgumentParser(prog="capserve")
        sub = parser.add_subparsers(dest="command", required=True)

        def body() -> None:
            finalizer()
            time.sleep(30)  # the signal is not lost: this is interrupted
            FINISHED.append(True)

        def run(args: argparse.Namespace) -> int:
            assert threading.current_thread() is threading.main_thread(), "run this test in the main thread"
            if not in_a_flow:
                body()
                return 0
            from prefect import flow

            from capserve.cli.signals import defer_prefect_handler_in_finalizers

            defer_prefect_handler_in_finalizers()  # as `capserve up --in-process` does before its flow
            flow(name="signalled-in-a-finalizer")(body)()
            return 0

        sub.add_parser("wait").set_defaults(func=run)
        return parser

    return build


@pytest.mark.parametrize("finalizer", [_signalled_in_a_del, _signalled_in_a_weakref_callback], ids=["del", "weakref"])
@pytest.mark.parametrize("in_a_flow", [False, True], ids=["command", "flow-in-process"])
def test_a_sigterm_landing_in_a_finalizer_is_not_lost(
    in_a_flow: bool, finalizer: Callable[[], None], monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Python ignores an exception raised in __del__: a handler that only raised lost the signal there, and
    # `capserve up --in-process` (under Prefect's flow-engine handler) then ran to its end and exited 0.
    FINISHED.clear()
    monkeypatch.setattr(cli, "build_parser", _parser_with_a_command_signalled_in_a_finalizer(in_a_flow, finalizer))
    assert cli.main(["wait"]) == 130
    assert not FINISHED


def test_a_sigterm_turned_into_another_error_still_exits_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Prefect's task engine, hit by its TerminationSignal while it creates a task run, ends with
    # "ValueError: Task run is not set" instead, and does not send the signal again (seen under
    # `capserve up --in-process`). The command was still asked to stop: 130, not "unexpected error" (5).
    from capserve.cli.signals import outside_finalizers

    def engine_handler(signum: int, frame: object) -> None:
        raise ValueError("Task run is not set")

    def build(only: str | None = None) -> argparse.ArgumentParser:
        parser = argparse.ArgumentParser(prog="capserve")
        sub = parser.add_subparsers(dest="command", required=True)

        def run(args: argparse.Namespace) -> int:
            signal.signal(signal.SIGTERM, outside_finalizers(engine_handler))  # as the flow engine installs it
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(30)
            FINISHED.append(True)
            return 0

        sub.add_parser("wait").set_defaults(func=run)
        return parser

    FINISHED.clear()
    monkeypatch.setattr(cli, "build_parser", build)
    assert cli.main(["wait"]) == 130
    err = capsys.readouterr().err
    assert "interrupted (SIGTERM; ValueError on the way out)" in err and "unexpected error" not in err
