"""Compare the key structure of two report.json files (times, ids and values may differ; keys may not).

    python scripts/report_shape.py BASELINE/report.json out/demo/report.json

Prints every key path present in one report and not the other, and exits 1 when there is any. Lists
are compared by the union of their items' key paths.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def shape(value: Any, path: str = "$") -> set[str]:
    """Every key path of ``value`` (``$.stages[].name``); list items contribute the union of their paths."""
    paths = {path}
    if isinstance(value, dict):
        for key, item in value.items():
            paths |= shape(item, f"{path}.{key}")
    elif isinstance(value, list):
        for item in value:
            paths |= shape(item, f"{path}[]")
    return paths


def differences(old: Any, new: Any) -> list[str]:
    a, b = shape(old), shape(new)
    return [f"only in the first: {p}" for p in sorted(a - b)] + [f"only in the second: {p}" for p in sorted(b - a)]


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__)
        return 2
    old, new = (json.loads(Path(p).read_text(encoding="utf-8")) for p in argv)
    found = differences(old, new)
    print("\n".join(found) if found else "same key structure")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
