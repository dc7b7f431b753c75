"""`capserve up`'s exit codes: what scripts and schedules rely on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import capserve.flows.campaign as campaign_module
from capserve.cli import main
from capserve.core.errors import DoesNotFitError

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "kimi-k3-sandbox.yaml")


def fake_campaign(result: dict[str, Any] | Exception) -> Any:
    def run(spec: Any, **_: Any) -> dict[str, Any]:
        if isinstance(result, Exception):
            raise result
        return result

    return run


@pytest.mark.parametrize(
    ("result", "code"),
    [
        ({"campaign": "k3-demo", "stages": []}, 0),
        ({"campaign": "k3-demo", "stages": [], "evaluation": {"verdict": "pass", "gates": []}}, 0),
        ({"campaign": "k3-demo", "stages": [], "evaluation": {"verdict": "invalid", "gates": []}}, 3),
        ({"campaign": "k3-demo", "stages": [], "evaluation": {"verdict": "fail", "gates": []}}, 1),
        (DoesNotFitError("needs 2 nodes: set capacity.instance_count to 2"), 1),
    ],
)
def test_exit_codes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str], result: Any, code: int
) -> None:
    monkeypatch.setattr(campaign_module, "campaign", fake_campaign(result))
    assert main(["up", EXAMPLE, "--out", str(tmp_path)]) == code
    if isinstance(result, Exception):
        assert "set capacity.instance_count to 2" in capsys.readouterr().err
