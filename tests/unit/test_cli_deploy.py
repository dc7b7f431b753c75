"""``capserve deploy`` and ``capserve up`` on a Prefect server: bad input is exit 2 with what to change, before
anything is registered or started (the registration itself: tests/server/test_wheel_deploy.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prefect.settings import PREFECT_API_URL, temporary_settings

from capserve.cli import main
from capserve.cli.deploy import pull_step_option, redacted_steps
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
    code = main(["up", str(EXAMPLE), "--sandbox", "--teardown-when-done", "--yes", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == ExitCode.BAD_INPUT, err
    assert "has no capserve deployment acquire, campaign," in err and "run `capserve deploy`" in err
    assert not (tmp_path / "out" / "report.json").exists()  # nothing ran


@pytest.mark.parametrize(
    ("pool", "said"),
    [("", "the work pool name is empty"), ("../x", "may not hold /"), ("cap\x1b[2Jserve", "no control or invisible"),
     ("  ", "the work pool name is empty"), ("a%b", "may not hold %")],
    ids=["empty", "path", "escape", "blank", "percent"],
)
def test_a_work_pool_name_prefect_would_refuse_is_a_usage_error(
    pool: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["deploy", "--pool", pool])
    err = capsys.readouterr().err
    assert exited.value.code == ExitCode.BAD_INPUT
    assert said in err and "--pool" in err and "\x1b" not in err, err


@pytest.mark.parametrize(
    ("step", "said"),
    [({"prefect.deployments.steps.no_such_step": {}}, "cannot be imported"),
     ({"nowhere.steps.pull": {"directory": "/srv"}}, "cannot be imported"),
     ({"prefect.deployments.steps.set_working_directory": {"dir": "/srv"}}, "unexpected keyword argument 'dir'"),
     ({"prefect.deployments.steps.git_clone": {}}, "missing a required argument: 'repository'")],
    ids=["no-such-step", "no-such-module", "unknown-argument", "missing-argument"],
)
def test_a_pull_step_a_worker_could_not_run_is_refused_before_anything_is_registered(
    step: dict[str, dict[str, str]], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["deploy", "--pull-step", json.dumps(step)])
    err = capsys.readouterr().err
    assert exited.value.code == ExitCode.BAD_INPUT
    assert said in err, err


def test_a_pull_step_with_a_package_to_install_is_left_to_the_worker() -> None:
    step = {"prefect_aws.deployments.steps.pull_from_s3": {"requires": "prefect-aws>=0.5", "bucket": "b"}}
    assert pull_step_option(json.dumps(step)) == step


def test_credentials_in_a_pull_step_are_never_printed_back(capsys: pytest.CaptureFixture[str]) -> None:
    secret = "ghp_notarealtokenbutsecret123"
    clone = {"prefect.deployments.steps.git_clone": {
        "repository": f"https://bot:{secret}@github.com/org/repo.git", "access_token": secret,
        "credentials": "{{ prefect.blocks.github-credentials.ci }}", "no_such_argument": secret}}
    with pytest.raises(SystemExit):
        main(["deploy", "--pull-step", json.dumps(clone)])  # refused (an unknown argument): the value stays out
    with pytest.raises(SystemExit):
        main(["deploy", "--pull-step", json.dumps(clone)[:-2] + f" {secret}"])  # not JSON: not echoed either
    assert secret not in capsys.readouterr().err
    del clone["prefect.deployments.steps.git_clone"]["no_such_argument"]
    shown = json.dumps(redacted_steps([clone]))
    assert secret not in shown
    assert "{{ prefect.blocks.github-credentials.ci }}" in shown and "github.com/org/repo.git" in shown
