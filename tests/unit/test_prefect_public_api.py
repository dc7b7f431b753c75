"""capserve uses Prefect's public API only: a module Prefect names with a leading underscore may change or go in
any release, and the flows, the engine and the slots would break on an upgrade nothing warned of."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "capserve"


def private_prefect_imports(root: Path) -> list[str]:
    """``file: module`` for every import under ``root`` of a Prefect module one of whose parts starts with ``_``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                parts = name.split(".")
                if parts[0] == "prefect" and any(part.startswith("_") for part in parts):
                    found.append(f"{path.relative_to(root.parent)}: {name}")
    return found


def test_capserve_imports_no_private_prefect_module() -> None:
    assert private_prefect_imports(PACKAGE) == []


def test_the_check_finds_a_private_module_however_it_is_imported(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(
        "from prefect.concurrency._leases import maintain_concurrency_lease\n"
        "from prefect.concurrency import _sync\n"
        "import prefect.types._concurrency\n"
        "from prefect.concurrency.sync import concurrency\n"  # public
    )
    assert private_prefect_imports(tmp_path) == [
        f"{tmp_path.name}/a.py: prefect.concurrency._leases",
        f"{tmp_path.name}/a.py: prefect.concurrency._leases.maintain_concurrency_lease",
        f"{tmp_path.name}/a.py: prefect.concurrency._sync",
        f"{tmp_path.name}/a.py: prefect.types._concurrency",
    ]
