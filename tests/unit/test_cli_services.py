"""A service that does not answer is exit 4 (unavailable, retry) with its address, never exit 5; an address that
cannot be one is exit 2."""

from __future__ import annotations

import pytest
from prefect.settings import PREFECT_API_URL, temporary_settings

from capserve.cli import main
from capserve.cli.exit_codes import ExitCode

CLOSED = "http://127.0.0.1:9"  # the discard port: nothing listens on it here


def test_plan_with_a_hub_that_does_not_answer_is_unavailable(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", "org/repo", "--instance-type", "p6-b300.48xlarge", "--hub-endpoint", CLOSED])
    err = capsys.readouterr().err
    assert code == ExitCode.UNAVAILABLE, err
    assert "the Hub at http://127.0.0.1:9 did not answer" in err


def test_registering_automations_on_a_server_that_does_not_answer_is_unavailable(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with temporary_settings({PREFECT_API_URL: f"{CLOSED}/api"}):
        code = main(["automations", "register"])
    err = capsys.readouterr().err
    assert code == ExitCode.UNAVAILABLE, err
    assert "127.0.0.1:9" in err and "unexpected error" not in err


def test_an_api_url_without_a_scheme_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    with temporary_settings({PREFECT_API_URL: "127.0.0.1:4200/api"}):
        code = main(["automations", "register"])
    assert code == ExitCode.BAD_INPUT
    assert "PREFECT_API_URL '127.0.0.1:4200/api' has no http:// or https:// scheme" in capsys.readouterr().err
