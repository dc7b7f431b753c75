"""The acts a sandbox campaign promises, checked against its report (cli/sandbox_checks.py)."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from capserve.cli.exit_codes import ExitCode
from capserve.cli.sandbox_checks import Act, Promise, StandInFailed, kept, missing_acts, promised_acts, stop_on_failure

DEMO = promised_acts(on_a_server=True, teardown_when_done=False, revisions=(True, False))

# The parts of `make demo`'s report.json the acts are read from (shape as the runs write it).
STORY: dict[str, Any] = {
    "stages": [{"name": name, "status": "completed"} for name in ("acquire", "bring_up", "rollout", "evaluate")],
    "lease": {"reservation_id": "cr-f4ab252eca574d82a", "start": "2026-12-06T11:30:00+00:00"},
    "prepared": {"ended_at": "2026-12-06T11:06:43+00:00", "block_start": "2026-12-06T11:30:00+00:00"},
    "schedule": [{"stage": "drain", "state": "Completed"}, {"stage": "teardown", "state": "Completed"}],
    "redeploys": [{"outcome": "promoted"}, {"outcome": "rolled-back"}],
    "teardown": {"deleted": ["eks-cluster/capserve-k3-demo"], "remaining": [], "finished_at": "2026-12-07T10:56:00Z"},
    "cost": {"paid_gpu_minutes": 11520, "serving_gpu_minutes": 8712},
}


def test_the_demo_promises_every_act_of_its_story() -> None:
    assert DEMO == [Act.PURCHASE, Act.PREPARE, Act.SERVE, Act.PROMOTE, Act.ROLL_BACK, Act.DRAIN, Act.TEARDOWN,
                    Act.LEDGER]
    assert missing_acts(STORY, DEMO, (True, False)) == []


def test_a_campaign_without_revisions_promises_no_promotion_and_no_rollback() -> None:
    acts = promised_acts(on_a_server=True, teardown_when_done=False, revisions=())
    assert Act.PROMOTE not in acts and Act.ROLL_BACK not in acts
    in_process = promised_acts(on_a_server=False, teardown_when_done=False, revisions=())
    assert in_process == [Act.PURCHASE, Act.SERVE, Act.LEDGER]  # no scheduled run ever fires in one process
    assert Act.TEARDOWN in promised_acts(on_a_server=False, teardown_when_done=True, revisions=())


@pytest.mark.parametrize(
    ("cut", "line"),
    [
        (lambda r: r["redeploys"].pop(), "roll back a bad revision: 0 of 1 redeploys rolled-back (outcomes: promoted)"),
        (lambda r: r["redeploys"].pop(0), "promote a good revision: 0 of 1 redeploys promoted (outcomes: rolled-back)"),
        (lambda r: r.pop("prepared"), "prepare before the block: no prepare-cluster run prepared the cluster"),
        (lambda r: r["prepared"].update(ended_at="2026-12-06T11:31:00+00:00"),
         "prepare before the block: the preparation ended at 2026-12-06T11:31:00+00:00, after the block's start"),
        (lambda r: r["schedule"][0].update(state="Cancelled"), "drain: the drain run did not complete (its state: "
                                                                "Cancelled)"),
        (lambda r: r["stages"].pop(), "serve: evaluate did not complete"),
        (lambda r: r.pop("teardown"), "teardown: the report holds no teardown"),
        (lambda r: r["teardown"].update(remaining=["vpc/x"]), "teardown: 1 resources remain"),
        (lambda r: r.pop("cost"), "ledger: the report holds no cost ledger of the block"),
        (lambda r: r.pop("lease"), "purchase: the report holds no lease"),
    ],
)
def test_a_report_that_lacks_an_act_names_it(cut: Any, line: str) -> None:
    report = copy.deepcopy(STORY)
    cut(report)
    assert missing_acts(report, DEMO, (True, False)) == [line]


@dataclass(frozen=True)
class _Failed:
    stand_in: str

    def line(self) -> str:
        return f"the sandbox's {self.stand_in} failed: ValueError: x; traceback in /tmp/f.log"


def _console() -> tuple[Console, Any]:
    import io

    text = io.StringIO()
    return Console(file=text, width=400), text


def test_a_campaign_whose_report_lacks_an_act_ends_unproven_with_one_line_naming_it(tmp_path: Path) -> None:
    report = copy.deepcopy(STORY)
    report["redeploys"] = [{"outcome": "promoted"}]
    (tmp_path / "report.json").write_text(json.dumps(report))
    console, text = _console()
    code = kept(ExitCode.OK, Promise(lambda: [], DEMO, (True, False)), out_dir=tmp_path, console=console)
    assert code == ExitCode.UNPROVEN
    assert text.getvalue().splitlines() == [
        f"error: act missing: roll back a bad revision: 0 of 1 redeploys rolled-back (outcomes: promoted) "
        f"({tmp_path / 'report.json'})"
    ]


def test_a_failed_stand_in_makes_even_a_complete_story_unproven(tmp_path: Path) -> None:
    (tmp_path / "report.json").write_text(json.dumps(STORY))
    console, text = _console()
    promise = Promise(lambda: [_Failed("sandbox-clock-tick thread")], DEMO, (True, False))
    assert kept(ExitCode.OK, promise, out_dir=tmp_path, console=console) == ExitCode.UNPROVEN
    assert "sandbox-clock-tick thread failed" in text.getvalue()
    with pytest.raises(StandInFailed):
        stop_on_failure(promise.failures)()


def test_without_a_sandbox_the_code_is_the_campaigns(tmp_path: Path) -> None:
    console, _ = _console()
    assert kept(ExitCode.FAILED, None, out_dir=tmp_path, console=console) == ExitCode.FAILED
    promise = Promise(lambda: [], DEMO, (True, False))
    assert kept(ExitCode.OK, promise, out_dir=tmp_path / "none", console=console) == ExitCode.UNPROVEN  # no report
    assert kept(ExitCode.FAILED, promise, out_dir=tmp_path / "none", console=console) == ExitCode.FAILED
