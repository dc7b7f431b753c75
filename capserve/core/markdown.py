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


def _blocks(markdown: str) -> list[list[str]]:
    """``markdown`` cut before each ``# `` or ``## `` heading outside code fences (the first block is what comes
    before any)."""
    blocks: list[list[str]] = [[]]
    fenced = False
    for line in markdown.rstrip().split("\n"):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith(("# ", "## ")):
            blocks.append([])
        blocks[-1].append(line)
    return [block for block in blocks if block]


def merge_sections(markdown: str, added: str, *, heading: str) -> str:
    """``added``'s ``## `` sections put into ``markdown``, the document they complete.

    A section whose heading ``markdown`` already has replaces it where it stands (any other copy of it goes:
    the document shows each section once, the latest); the others are appended under ``# {heading}``. What
    ``added`` holds before its first ``## `` heading is ignored, and a ``# `` heading left with no section after
    it goes.
    """
    replacing: dict[str, list[str]] = {}
    for block in _blocks(added):
        if block[0].startswith("## "):
            replacing[block[0].strip()] = block
    kept: list[list[str]] = []
    placed: set[str] = set()
    for block in _blocks(markdown):
        title = block[0].strip()
        if title in replacing:
            if title not in placed:
                kept.append(replacing[title])
                placed.add(title)
            continue
        kept.append(block)
    appended = [block for title, block in replacing.items() if title not in placed]
    if appended:
        kept.append([f"# {heading}", ""])
        kept.extend(appended)
    # A top-level heading directly followed by another one (or by nothing) heads no section any more.
    cleaned = [
        block for i, block in enumerate(kept)
        if not (block[0].startswith("# ") and i > 0 and (i + 1 == len(kept) or kept[i + 1][0].startswith("# ")))
    ]
    return "\n".join("\n".join(block).rstrip() + "\n" for block in cleaned).rstrip() + "\n"


def without_images(markdown: str) -> str:
    """``markdown`` without its image lines: the Prefect UI's artifact view cannot show the report folder's PNGs."""
    return "\n".join(line for line in markdown.split("\n") if not line.startswith("!["))
