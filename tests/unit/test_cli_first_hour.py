"""A pip user's first hour: `capserve init` writes a spec to start from, `capserve logs` prints a campaign's runs'
logs, and `--help` says where to begin and where the docs are."""

from __future__ import annotations

from pathlib import Path

import pytest
from prefect import flow, get_run_logger

from capserve.cli import main
from capserve.cli.exit_codes import ExitCode
from capserve.core.schedule import campaign_tag
from capserve.core.spec import load_spec


def test_init_writes_the_sandbox_spec_and_the_aws_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["init", str(tmp_path / "mine.yaml")]) == ExitCode.OK
    sandbox = load_spec(tmp_path / "mine.yaml")
    assert sandbox.model.repo == "capserve-sandbox/tiny-k3"
    assert f"capserve up {tmp_path / 'mine.yaml'} --sandbox" in capsys.readouterr().out
    assert main(["init", str(tmp_path / "aws.yaml"), "--aws"]) == ExitCode.OK
    aws = load_spec(tmp_path / "aws.yaml")
    assert aws.model.repo is None and aws.weights.s3_bucket != sandbox.weights.s3_bucket
    assert (tmp_path / "aws.yaml").read_text().startswith("# A capserve campaign spec, AWS variant")


def test_init_never_replaces_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mine = tmp_path / "capserve.yaml"
    mine.write_text("name: mine\n")
    assert main(["init", str(mine)]) == ExitCode.BAD_INPUT
    assert mine.read_text() == "name: mine\n"
    assert "PATH: " in capsys.readouterr().err


def test_the_help_names_init_and_where_the_docs_are(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "capserve init" in out and "Docs: " in out and "cli.md" in out


@flow(name="campaign", flow_run_name="campaign-logs-demo")
def _a_campaign_run() -> None:
    get_run_logger().info("bought cr-0123 for the block")


@flow(name="serve", flow_run_name="serve-logs-demo")
def _its_serve_run() -> None:
    get_run_logger().info("vLLM is ready")


@flow(name="serve", flow_run_name="serve-someone-else")
def _another_campaigns_run() -> None:
    get_run_logger().info("not mine")


def test_logs_prints_every_run_of_the_campaign_and_no_other(capsys: pytest.CaptureFixture[str]) -> None:
    from prefect import tags

    _a_campaign_run()
    with tags(campaign_tag("logs-demo")):
        _its_serve_run()
    with tags(campaign_tag("logs-other")):
        _another_campaigns_run()
    capsys.readouterr()
    assert main(["logs", "logs-demo"]) == ExitCode.OK
    out = capsys.readouterr().out
    assert "campaign-logs-demo INFO: bought cr-0123 for the block" in out
    assert "serve-logs-demo INFO: vLLM is ready" in out and "not mine" not in out
    assert out.index("bought cr-0123") < out.index("vLLM is ready")  # oldest first


def test_logs_of_a_campaign_with_no_run_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["logs", "logs-nobody"]) == ExitCode.FAILED
    assert "no flow run of campaign logs-nobody" in capsys.readouterr().err
    assert main(["logs", "Not_A_Name"]) == ExitCode.BAD_INPUT


def test_a_sandbox_campaign_on_your_server_is_refused_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """On the user's server the lease's scheduled runs would wait a day of wall time for a block the sandbox's
    stand-ins (which end with the command) played at once: refused before anything starts, naming both ways out."""
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")
    spec = tmp_path / "capserve.yaml"
    assert main(["init", str(spec)]) == ExitCode.OK
    assert main(["up", str(spec), "--sandbox", "--out", str(tmp_path / "out")]) == ExitCode.BAD_INPUT
    err = " ".join(capsys.readouterr().err.split())
    assert "--sandbox with PREFECT_API_URL" in err and "Unset PREFECT_API_URL" in err and "--teardown-when-done" in err
    assert not (tmp_path / "out").exists()
