"""The CLI's top-level error handling: the documented exit code, one redacted line, a traceback only with --debug."""

from __future__ import annotations

import argparse

import pytest

import capserve.cli.plan as plan_command
from capserve.cli import ExitCode, main
from capserve.core.errors import DoesNotFitError, RetryableError, SpecError
from capserve.tasks.secrets import register_secret

SECRET = "sk-planted-in-an-exception-5521"


def failing_with(exc: BaseException) -> object:
    def run(args: argparse.Namespace) -> int:
        raise exc

    return run


@pytest.mark.parametrize(
    ("exc", "code", "says"),
    [
        (SpecError("capacity.regions: bad"), ExitCode.BAD_INPUT, "capserve plan: capacity.regions: bad"),
        (RetryableError("EC2 throttled"), ExitCode.UNAVAILABLE, "EC2 throttled (running the same command again"),
        (DoesNotFitError("needs 2 nodes"), ExitCode.FAILED, "capserve plan: needs 2 nodes"),
        (KeyboardInterrupt(), ExitCode.INTERRUPTED, "capserve plan: interrupted"),
        (ZeroDivisionError("division by zero"), ExitCode.INTERNAL, "unexpected error: ZeroDivisionError"),
    ],
)
def test_each_kind_of_error_has_its_exit_code_and_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], exc: BaseException, code: int, says: str
) -> None:
    monkeypatch.setattr(plan_command, "run", failing_with(exc))
    assert main(["plan", "kimi-k3", "--instance-type", "p6-b300.48xlarge"]) == code
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err


def test_an_unexpected_error_says_how_to_get_the_traceback_and_debug_shows_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    register_secret(SECRET)
    monkeypatch.setattr(plan_command, "run", failing_with(RuntimeError(f"endpoint echoed {SECRET}")))
    argv = ["plan", "kimi-k3", "--instance-type", "p6-b300.48xlarge"]
    assert main(argv) == ExitCode.INTERNAL
    err = capsys.readouterr().err
    assert "run with --debug for the traceback" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 2 and SECRET not in err and "[redacted]" in err
    assert main([*argv, "--debug"]) == ExitCode.INTERNAL  # --debug after the subcommand works too
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and SECRET not in err


def test_the_exit_code_table_is_documented() -> None:
    import capserve.cli

    doc = capserve.cli.__doc__ or ""
    for code in ExitCode:
        assert f"\n{code.value:<4}  {code.name}" in doc
