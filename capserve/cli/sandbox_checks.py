"""What ``capserve up --sandbox`` checks before it says 0: no stand-in failed, and every act it promises happened.

A stand-in that failed (``failures()`` of the running sandbox: a loop of the stand-ins reported an error) means
the campaign ran against a far end that did not behave as AWS, Kubernetes or the Hub would: the run proves less
than it says, whatever its runs' states. An act the mode promises (``capserve.core.acts``) that the report lacks
is the same. Both end the command with ``UNPROVEN`` and one line each: the stand-in and where its traceback is, or
the act and what is missing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from rich.console import Console
from rich.markup import escape

from capserve.cli.exit_codes import ExitCode
from capserve.core.acts import Act, missing_acts


class Failure(Protocol):
    def line(self) -> str: ...


class StandInFailed(Exception):
    """A stand-in of the sandbox failed while the command followed the campaign: following stops."""


def stop_on_failure(failures: Callable[[], Sequence[Failure]]) -> Callable[[], None]:
    """A check for the command's follow loops: raises ``StandInFailed`` once a stand-in has failed, so the command
    ends at once instead of following a campaign that can no longer prove anything."""

    def check() -> None:
        if failures():
            raise StandInFailed

    return check


@dataclass(frozen=True)
class Promise:
    """What a sandbox campaign promises: no stand-in fails (``failures``: the running sandbox's), and ``acts``,
    with the revisions the sandbox's Hub publishes (``capserve.core.acts``)."""

    failures: Callable[[], Sequence[Failure]]
    acts: Sequence[Act]
    revisions: Sequence[bool]


def kept(code: int, promise: Promise | None, *, out_dir: Path, console: Console) -> int:
    """The command's exit code once the campaign ended with ``code``: ``UNPROVEN`` when a stand-in failed, or when
    the campaign ended well but its report lacks a promised act; else ``code`` (and always without a sandbox)."""
    if promise is None:
        return code
    failures = promise.failures()
    for failure in failures:
        console.print(f"[red]error:[/red] {escape(failure.line())}", highlight=False)
    if failures:
        return int(ExitCode.UNPROVEN)
    if code != ExitCode.OK:
        return code  # the campaign's own failure says more than the acts it could not reach
    missing = missing_acts(_report(out_dir), promise.acts, promise.revisions)
    for line in missing:
        console.print(f"[red]error:[/red] act missing: {escape(line)} ({out_dir / 'report.json'})", highlight=False)
    return int(ExitCode.UNPROVEN) if missing else code


def _report(out_dir: Path) -> dict[str, Any]:
    try:
        found = json.loads((out_dir / "report.json").read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}
