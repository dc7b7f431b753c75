"""The console ``capserve up`` writes to, and the closing summary it ends with on every path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console

from capserve.core.summary import summary_lines


def plain_console(*, stderr: bool = False) -> Console:
    """A rich console that, off a terminal, writes each line whole: no wrap at 80 columns mid-sentence (a log
    reader or a test reads the line as it was said); on a terminal rich wraps to its width as usual."""
    probe = Console(stderr=stderr)
    return Console(stderr=stderr, soft_wrap=not probe.is_terminal)


def read_report(out_dir: Path) -> dict[str, Any] | None:
    """report.json in ``out_dir`` (None when none was written)."""
    try:
        found = json.loads((out_dir / "report.json").read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def print_summary(out_dir: Path) -> None:
    """The closing summary (stdout): what report.json says, or that there is none."""
    out = plain_console()
    report = read_report(out_dir)
    if report is None:
        out.print(f"no report was written (nothing ran far enough); report folder: {out_dir}", highlight=False)
        return
    for line in summary_lines(report, out_dir):
        out.print(line, highlight=False)
