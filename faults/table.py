"""The matrix as a Markdown table, and the copy kept in docs/faults.md (between two marker lines)."""

from __future__ import annotations

import re
from pathlib import Path

from capserve.core.markdown import markdown_table
from faults.matrix import Row

BEGIN, END = "<!-- faults table: begin -->", "<!-- faults table: end -->"


def _cell(value: int, want: int) -> str:
    return f"{value}" if value == want else f"**{value}** ✗" if value >= 0 else "?"


def table(rows: list[Row]) -> str:
    return markdown_table([
        {
            "kill point": row.point.name,
            "signal": row.signal,
            "killed at": row.killed_at or "?",
            "purchases": _cell(row.purchases, 1),
            "healthy clusters destroyed": _cell(row.destroyed, 0),
            "left after teardown": _cell(row.leftovers, 0),
            "orphan processes": _cell(row.orphans, 0),
            "time to recover (s)": f"{row.recover_seconds:.0f}" if row.recover_seconds is not None else "—",
            "next run": row.rerun_state or "?",
            "killed run": row.killed_state or "?",
            "result": "ok" if row.green else "FAIL",
            "notes": "; ".join(row.notes),
        }
        for row in rows
    ])


def write_docs(path: Path, text: str) -> None:
    """Replace what lies between the markers in ``path`` with ``text``."""
    doc = path.read_text()
    pattern = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.S)
    if not pattern.search(doc):
        raise ValueError(f"{path} has no {BEGIN} … {END} markers to put the table between")
    path.write_text(pattern.sub(lambda _: f"{BEGIN}\n{text}\n{END}", doc))
