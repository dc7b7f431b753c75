"""No module of capserve imports matplotlib when it is imported: every flow run's process imports the report and
evaluation modules and most never draw (pyplot alone costs about 0.6 CPU seconds to import). Plots ask
``capserve.tasks.pyplot.pyplot()`` when they draw."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "capserve"


def _module_level_imports(tree: ast.Module) -> list[str]:
    names: list[str] = []
    for node in tree.body:  # module level only: an import inside a function runs when it is called
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            names.append(node.module)
    return names


def test_no_module_imports_matplotlib_at_import_time() -> None:
    eager = sorted(
        str(path.relative_to(PACKAGE.parent))
        for path in PACKAGE.rglob("*.py")
        if any(name.split(".")[0] == "matplotlib"
               for name in _module_level_imports(ast.parse(path.read_text(encoding="utf-8"))))
    )
    assert eager == []


def test_pyplot_draws_on_the_agg_backend() -> None:
    from capserve.tasks.pyplot import pyplot

    assert pyplot().get_backend().lower() == "agg"
