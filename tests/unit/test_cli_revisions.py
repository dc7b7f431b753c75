"""`capserve up --revisions`: which revisions the simulated sandbox's Hub publishes mid-block."""

from __future__ import annotations

import argparse

import pytest

from capserve.cli import main
from capserve.cli.sandbox import revisions_option


@pytest.mark.parametrize(
    ("given", "goods"),
    [("good,bad", (True, False)), ("bad", (False,)), (" Good , good ", (True, True)), ("none", ())],
)
def test_revisions_read_in_order(given: str, goods: tuple[bool, ...]) -> None:
    assert revisions_option(given) == goods


@pytest.mark.parametrize("given", ["good,ugly", "", "none,good", "good,good,good,good,good"])
def test_anything_else_names_the_choices(given: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="'good' and 'bad'"):
        revisions_option(given)


def test_the_command_refuses_before_anything_starts(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["up", "examples/kimi-k3-sandbox.yaml", "--sandbox", "--revisions", "good,ugly"])
    assert stopped.value.code == 2
    assert "--revisions: 'good,ugly'" in capsys.readouterr().err
