"""The ``capserve`` command. Each subcommand lives in its own module and registers itself here.

Exit codes (the same for every command; docs/cli.md has the details per command):

====  ===========  ==========================================================================
code  name         meaning
====  ===========  ==========================================================================
0     OK           done: the plan fits, the campaign ran, the evaluation verdict is pass
1     FAILED       the campaign stopped, the verdict is fail, the plan does not fit, or a
                   teardown did not finish (the message says which and what to do)
2     BAD_INPUT    the spec, an option, an environment variable or an output folder is wrong;
                   nothing was started, bought or created
3     INVALID      the evaluation could not judge everything (the load client could not drive
                   or measure the load, or the deadline cut it short); nothing was blamed on
                   the endpoint
4     UNAVAILABLE  a far end (AWS, the Hub, Kubernetes, the endpoint, Prefect) failed in a way
                   that may pass; running the same command again converges
5     INTERNAL     an unexpected error (a bug): one line is printed; ``--debug`` shows the
                   traceback
6     UNPROVEN     ``up --sandbox`` only: a stand-in of the sandbox failed, or an act the run
                   promises (purchase, serve, a rollback, …) is missing from its report; one line
                   names each
130   INTERRUPTED  stopped by Ctrl-C or SIGTERM (what was started is stopped; a campaign run on a
                   Prefect server goes on without this command)
====  ===========  ==========================================================================

Errors are one message naming the field or value and what is allowed; no traceback reaches the
terminal unless ``--debug`` is given (anywhere on the command line). Every message, log line and
file is redacted of the run's secrets (``capserve.tasks.secrets``).
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import threading
import traceback
from collections.abc import Sequence
from pathlib import Path

from capserve.cli import signals
from capserve.cli.exit_codes import ExitCode
from capserve.cli.signals import interrupt
from capserve.core.errors import CapserveError, RetryableError, SpecError
from capserve.tasks.secrets import DEBUG_HINT, install_log_redaction, redact, register_secret_environment

# Each module exposes ``register(subparsers)``; the parser it adds sets ``func(args) -> int``.
# Modules are imported by name so that one command loads only its own module: `capserve plan`
# must not pay for the campaign's imports (and never imports Prefect or a cloud SDK).
SUBCOMMANDS = {
    "init": "capserve.cli.init",
    "plan": "capserve.cli.plan",
    "up": "capserve.cli.up",
    "deploy": "capserve.cli.deploy",
    "rehearse": "capserve.cli.rehearse",
    "down": "capserve.cli.down",
    "eval": "capserve.cli.eval",
    "forward-events": "capserve.cli.forward_events",
    "automations": "capserve.cli.automations",
    "sandbox": "capserve.cli.sandbox",
    "status": "capserve.cli.status",
    "logs": "capserve.cli.logs",
}

__all__ = ["ExitCode", "build_parser", "main"]


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The ``capserve`` parser with every subcommand, or only ``only`` (a known command name)."""
    parser = argparse.ArgumentParser(
        prog="capserve",
        description="GPU reservation → evaluated vLLM endpoint → nothing left running.",
        epilog="Start with `capserve init` (a commented spec). Exit codes: 0 ok, 1 failed, 2 bad input, "
        "3 evaluation invalid, 4 unavailable (retry), 5 internal error, 6 sandbox run unproven, 130 interrupted. "
        f"Docs: {docs_location()}",
    )
    parser.add_argument(
        "--debug", action="store_true", help="print tracebacks (anywhere on the command line; also CAPSERVE_DEBUG=1)"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module in SUBCOMMANDS.items():
        if only is None or name == only:
            importlib.import_module(module).register(sub)
    return parser


def docs_location() -> str:
    """Where this install's documentation is: the checkout's docs/ folder when capserve runs from one (an editable
    install), else the project's source, where docs/ sits beside the package (the wheel carries no docs)."""
    here = Path(__file__).resolve().parents[2] / "docs"
    if (here / "cli.md").is_file():
        return f"{here}/ (guide.md, cli.md)"
    return "docs/guide.md and docs/cli.md in capserve's source, beside the capserve/ package"


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; SIGTERM is handled as Ctrl-C while it runs (never lost: ``capserve.cli.signals``)."""
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, interrupt) if in_main_thread else None
    signals.received.clear()
    try:
        code = _main(argv)
        if code != ExitCode.OK and signals.received.is_set():
            # Whatever the SIGTERM became on its way out (Prefect may turn it into another error), the command
            # was asked to stop and did not finish: that is the outcome to report.
            if code != ExitCode.INTERRUPTED:
                _say("capserve: stopped by SIGTERM")
            return ExitCode.INTERRUPTED
        return code
    finally:
        if in_main_thread:
            signal.signal(signal.SIGTERM, previous)


def _main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    # --debug may follow the subcommand (`capserve up spec.yaml --debug`): take it from anywhere.
    debug = "--debug" in args_list or os.environ.get("CAPSERVE_DEBUG", "") not in ("", "0")
    args_list = [a for a in args_list if a != "--debug"]
    install_log_redaction(console_tracebacks=debug)
    register_secret_environment()
    command_name = args_list[0] if args_list and args_list[0] in SUBCOMMANDS else None
    args = build_parser(command_name).parse_args(args_list)  # usage errors exit 2 (BAD_INPUT) from argparse itself
    command = f"capserve {args.command}"
    try:
        code: int = args.func(args)
        return code
    except KeyboardInterrupt:
        _say(f"{command}: interrupted")
        return ExitCode.INTERRUPTED
    except SpecError as exc:
        _say(f"{command}: {exc}", debug)
        return ExitCode.BAD_INPUT
    except RetryableError as exc:
        _say(f"{command}: {exc} (running the same command again converges)", debug)
        return ExitCode.UNAVAILABLE
    except CapserveError as exc:
        _say(f"{command}: {exc}", debug)
        return ExitCode.FAILED
    except BrokenPipeError:
        # The reader of our output went away (`capserve plan ... | head`): nothing more to say to it.
        _silence_stdout()
        return ExitCode.FAILED
    except (PermissionError, FileNotFoundError, IsADirectoryError, NotADirectoryError) as exc:
        # A path the user gave (an --out folder without permission, a file that is gone): their input, not a bug.
        where = f": {exc.filename}" if exc.filename else ""
        _say(f"{command}: {exc.strerror or type(exc).__name__}{where}: give a path this user can read and write",
             debug)
        return ExitCode.BAD_INPUT
    except Exception as exc:  # noqa: BLE001 - the CLI's last resort: whatever no branch above names is reported, never a traceback on its own
        if signals.received.is_set():  # what a SIGTERM became inside Prefect's engine: not a bug of ours
            _say(f"{command}: interrupted (SIGTERM; {type(exc).__name__} on the way out)", debug)
            return ExitCode.INTERRUPTED
        prefect_down = _prefect_unavailable(exc)
        if prefect_down is not None:
            _say(f"{command}: {prefect_down}", debug)
            return ExitCode.UNAVAILABLE
        unreachable = _unreachable(exc)
        if unreachable is None:
            first = (str(exc).splitlines() or [""])[0][:300]
            _say(f"{command}: unexpected error: {type(exc).__name__}: {first}", debug)
            if not debug:
                _say(f"  {DEBUG_HINT} (capserve --debug {args.command} …)")
            return ExitCode.INTERNAL
        _say(f"{command}: cannot reach {unreachable}; check the address and that the service runs, then run the "
             "same command again", debug)
        return ExitCode.UNAVAILABLE


# Exception classes (by name, anywhere in the class's ancestry) that mean "the service did not answer": httpx's
# (Prefect's client), requests' (older huggingface_hub), botocore's and the standard library's.
_UNREACHABLE = frozenset({
    "ConnectionError", "TransportError", "ConnectError", "TimeoutException", "ConnectTimeout",
    "EndpointConnectionError", "ConnectTimeoutError", "ReadTimeoutError",
})


def _prefect_unavailable(exc: BaseException) -> str | None:
    """What to say when ``exc`` is Prefect saying its API did not answer, or its temporary server did not start in
    time: Prefect raises a ``RuntimeError`` with these words (prefect/client/orchestration, server/api/server.py)."""
    if not isinstance(exc, RuntimeError):
        return None
    text = str(exc)
    if text.startswith("Failed to reach API at ") or ". Failed to reach API at " in text:
        where = text.split("Failed to reach API at ", 1)[1].split()[0].rstrip(".")
        return (f"cannot reach the Prefect API at {where}: check PREFECT_API_URL and that the server runs, then run "
                "the same command again")
    if text.startswith("Timed out while attempting to connect to ephemeral Prefect API server"):
        return ("Prefect's temporary server did not start within its timeout (a busy machine): run the same command "
                "again, raise PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS, or set PREFECT_API_URL to a running "
                "server")
    return None


def _unreachable(exc: BaseException) -> str | None:
    """What could not be reached when ``exc`` says a service did not answer (its address when known); else None."""
    if not any(cls.__name__ in _UNREACHABLE for cls in type(exc).__mro__):
        return None
    request = getattr(exc, "_request", None) or getattr(exc, "request", None)
    url = getattr(request, "url", None) or getattr(exc, "kwargs", {}).get("endpoint_url")
    return str(url) if url else f"a service ({type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]})"


def _say(message: str, debug: bool = False) -> None:
    """One redacted line on stderr; with ``debug`` the current traceback (redacted) first."""
    if debug and sys.exc_info()[0] is not None:
        print(redact(traceback.format_exc()), file=sys.stderr, end="")
    print(redact(message), file=sys.stderr)


def _silence_stdout() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass  # stdout is not a real file (a test's capture): nothing to silence
    finally:
        os.close(devnull)


if __name__ == "__main__":
    sys.exit(main())
