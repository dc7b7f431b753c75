"""`capserve up`'s exit codes: what scripts and schedules rely on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import capserve.flows.campaign as campaign_module
import capserve.tasks.locations as locations_module
from capserve.cli import main
from capserve.core.errors import DoesNotFitError
from capserve.core.evaluation.result import EvaluationResult
from capserve.core.preflight import PreflightError
from capserve.core.report import CampaignReport

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "kimi-k3-sandbox.yaml")


def fake_campaign(result: CampaignReport | Exception) -> Any:
    def run(spec: Any, **_: Any) -> CampaignReport:
        if isinstance(result, Exception):
            raise result
        return result

    return run


def report(verdict: str | None) -> CampaignReport:
    made = CampaignReport(campaign="k3-demo")
    if verdict is not None:
        made.add(EvaluationResult(url="http://127.0.0.1:1", model="kimi-k3", profiles=["smoke"], verdict=verdict))
    return made


@pytest.mark.parametrize(
    ("result", "code"),
    [
        (report(None), 0),
        (report("pass"), 0),
        (report("invalid"), 3),
        (report("fail"), 1),
        (DoesNotFitError("needs 2 nodes: set capacity.instance_count to 2"), 1),
        (PreflightError("k3-demo", ["capacity.instance_count: set capacity.instance_count to 2"]), 2),
    ],
)
def test_exit_codes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str], result: Any, code: int
) -> None:
    monkeypatch.setattr(campaign_module, "campaign", fake_campaign(result))
    # Whose credentials: a question for STS (tests/badinput has the refusals), answered here without AWS.
    monkeypatch.setattr(locations_module, "caller_arn", lambda region: "arn:aws:iam::123456789012:user/tests")
    assert main(["up", EXAMPLE, "--in-process", "--out", str(tmp_path)]) == code
    if isinstance(result, Exception):
        assert "set capacity.instance_count to 2" in capsys.readouterr().err
