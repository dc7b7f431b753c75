"""``capserve deploy`` and ``capserve up`` on a Prefect server: bad input is exit 2 with what to change, before
anything is registered or started (the registration itself: tests/server/test_wheel_deploy.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from prefect.settings import PREFECT_API_URL, temporary_settings

from capserve.cli import main
from capserve.cli.exit_codes import ExitCode

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kimi-k3-sandbox.yaml"


def test_deploy_without_an_api_url_names_the_variable(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    with temporary_settings(restore_defaults={PREFECT_API_URL}):
        code = main(["deploy"])
    err = capsys.readouterr().err
    assert code == ExitCode.BAD_INPUT, err
    assert "PREFECT_API_URL is not set" in err and "run `capserve deploy` again" in err


def test_a_pull_step_that_is_not_one_json_object_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["deploy", "--pull-step", '["prefect.deployments.steps.git_clone"]'])
    assert exited.value.code == ExitCode.BAD_INPUT
    assert "a pull step is an object with exactly one key" in capsys.readouterr().err


def test_up_on_a_server_without_capserve_deployments_says_to_run_capserve_deploy(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The session's Prefect test server has none of capserve's deployments registered.
    monkeypatch.setenv("PREFECT_API_URL", str(PREFECT_API_URL.value()))
    code = main(["up", str(EXAMPLE), "--sandbox", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == ExitCode.BAD_INPUT, err
    assert "has no capserve deployment acquire, campaign," in err and "run `capserve deploy`" in err
    assert not (tmp_path / "out" / "report.json").exists()  # nothing ran
