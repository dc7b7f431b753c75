"""Prefect artifact keys: one campaign's artifacts never replace another's.

Prefect keeps the latest artifact per key (docs/prefect.md §7), so every key a campaign's runs publish starts
with the campaign id; a key names what is inside after it (the model, the Hub repository). Prefect accepts
lower-case letters, digits and dashes only (https://docs.prefect.io/v3/concepts/artifacts).
"""

from __future__ import annotations

import re


def artifact_key(*parts: str | None) -> str:
    """``parts`` (None and empty ones left out) joined by dashes, in the characters Prefect accepts."""
    joined = "-".join(p for p in parts if p).lower()
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", joined)).strip("-")[:200] or "capserve"
