"""Markdown helpers shared by every report section (tables a person reads in report.md and the Prefect UI)."""

from __future__ import annotations

from typing import Any


def markdown_table(rows: list[dict[str, Any]], columns: list[str] | None = None) -> str:
    """A GitHub-flavoured markdown table from a list of dicts (same keys, or the given columns)."""
    if not rows:
        return "_none_"
    cols = columns or list(rows[0])
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in rows:
        out.append("| " + " | ".join(_cell(row.get(c)) for c in cols) + " |")
    return "\n".join(out)


def _cell(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:,.2f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value).replace("|", "\\|")


def without_images(markdown: str) -> str:
    """``markdown`` without its image lines: the Prefect UI's artifact view cannot show the report folder's PNGs."""
    return "\n".join(line for line in markdown.split("\n") if not line.startswith("!["))
