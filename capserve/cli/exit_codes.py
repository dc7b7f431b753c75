"""The exit codes of every ``capserve`` command (the table is in ``capserve/cli/__init__.py`` and docs/cli.md)."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1
    BAD_INPUT = 2
    INVALID = 3
    UNAVAILABLE = 4
    INTERNAL = 5
    UNPROVEN = 6  # a sandbox run: a stand-in failed, or an act it promises is missing from the report
    INTERRUPTED = 130
