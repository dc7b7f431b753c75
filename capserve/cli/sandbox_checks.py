"""What ``capserve up --sandbox`` checks before it says 0: no stand-in failed, and every act it promises happened.

A stand-in that failed (``failures()`` of the running sandbox: a loop of the stand-ins reported an error) means
the campaign ran against a far end that did not behave as AWS, Kubernetes or the Hub would: the run proves less
than it says, whatever its runs' states. A run that lost an act (a revision never rolled back, a teardown that never
ran) and still ended 0 would prove less than it says too. So the command declares what it promises from its own
mode, and checks each act against the campaign's report (``report.json``, what the runs recorded; never the
console's text):

- every campaign: the purchase, serving (rollout and evaluation completed) and the ledger;
- followed on a Prefect server (the scheduled runs fire): the preparation before the block, the drain and the
  teardown; in one process (``--in-process``) the teardown only with ``--teardown-when-done``;
- each revision the sandbox's Hub publishes mid-block (``--revisions``): a good one promoted, a bad one rolled back.
  A campaign without revisions promises neither.

Either ends the command with ``UNPROVEN`` and one line each: the stand-in and where its traceback is, or the act
and what is missing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

from rich.console import Console
from rich.markup import escape

from capserve.cli.console import read_report
from capserve.cli.exit_codes import ExitCode


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
    with the revisions the sandbox's Hub publishes."""

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
    missing = missing_acts(read_report(out_dir) or {}, promise.acts, promise.revisions)
    for line in missing:
        console.print(f"[red]error:[/red] act missing: {escape(line)} ({out_dir / 'report.json'})", highlight=False)
    return int(ExitCode.UNPROVEN) if missing else code


class Act(StrEnum):
    PURCHASE = "purchase"
    PREPARE = "prepare before the block"
    SERVE = "serve"
    PROMOTE = "promote a good revision"
    ROLL_BACK = "roll back a bad revision"
    DRAIN = "drain"
    TEARDOWN = "teardown"
    LEDGER = "ledger"


def promised_acts(*, on_a_server: bool, teardown_when_done: bool, revisions: Sequence[bool]) -> list[Act]:
    """The acts a sandbox campaign in this mode promises, in the order they happen. ``revisions``: what the Hub
    publishes mid-block (True: good, False: bad), as ``--revisions`` says."""
    acts = [Act.PURCHASE]
    if on_a_server:
        acts.append(Act.PREPARE)
    acts.append(Act.SERVE)
    if True in revisions:
        acts.append(Act.PROMOTE)
    if False in revisions:
        acts.append(Act.ROLL_BACK)
    if on_a_server:
        acts.append(Act.DRAIN)
    if on_a_server or teardown_when_done:
        acts.append(Act.TEARDOWN)
    acts.append(Act.LEDGER)
    return acts


def missing_acts(report: Mapping[str, Any], promised: Sequence[Act], revisions: Sequence[bool] = ()) -> list[str]:
    """One line per promised act the report does not show, naming the act and what is missing."""
    return [f"{act.value}: {why}" for act in promised if (why := _missing(act, report, revisions)) is not None]


def _missing(act: Act, report: Mapping[str, Any], revisions: Sequence[bool]) -> str | None:
    stages = {line.get("name"): line.get("status") for line in report.get("stages") or [] if isinstance(line, dict)}
    fired = {run.get("stage"): run.get("state") for run in report.get("schedule") or [] if isinstance(run, dict)}
    outcomes = [entry.get("outcome") for entry in report.get("redeploys") or [] if isinstance(entry, dict)]
    match act:
        case Act.PURCHASE:
            lease = report.get("lease") or {}
            if not lease.get("reservation_id"):
                return "the report holds no lease"
            return None
        case Act.PREPARE:
            prepared = report.get("prepared") or {}
            if not prepared.get("ended_at") or not prepared.get("block_start"):
                return "no prepare-cluster run prepared the cluster"
            if datetime.fromisoformat(prepared["ended_at"]) > datetime.fromisoformat(prepared["block_start"]):
                return f"the preparation ended at {prepared['ended_at']}, after the block's start"
            return None
        case Act.SERVE:
            unfinished = [stage for stage in ("rollout", "evaluate") if stages.get(stage) != "completed"]
            if unfinished:
                return f"{' and '.join(unfinished)} did not complete"
            return None
        case Act.PROMOTE:
            return _redeploys(outcomes, "promoted", max(1, sum(1 for good in revisions if good)))
        case Act.ROLL_BACK:
            return _redeploys(outcomes, "rolled-back", max(1, sum(1 for good in revisions if not good)))
        case Act.DRAIN:
            drained = fired.get("drain")
            return None if drained == "Completed" else f"the drain run did not complete (its state: {drained})"
        case Act.TEARDOWN:
            teardown = report.get("teardown") or {}
            if not teardown.get("finished_at"):
                return "the report holds no teardown"
            if teardown.get("remaining"):
                return f"{len(teardown['remaining'])} resources remain"
            return None
        case Act.LEDGER:
            cost = report.get("cost") or {}
            return None if cost.get("paid_gpu_minutes") else "the report holds no cost ledger of the block"
    return None  # pragma: no cover - every act is matched above


def _redeploys(outcomes: Sequence[Any], outcome: str, wanted: int) -> str | None:
    done = sum(1 for found in outcomes if found == outcome)
    if done >= wanted:
        return None
    return f"{done} of {wanted} redeploys {outcome} (outcomes: {', '.join(map(str, outcomes)) or 'no redeploy'})"
