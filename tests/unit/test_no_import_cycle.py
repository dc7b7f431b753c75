"""No import circle in capserve/: each module can be read, and moved, knowing only what it imports.

import-linter's contracts say which way layers point, not that no two modules import each other (an
``independence`` or ``layers`` contract cannot say "no cycle"), so this test asks grimp, the graph import-linter
builds on, for every import that is part of a circle.
"""

from __future__ import annotations

import sys
from pathlib import Path

import grimp
import pytest


def import_circles(package: str) -> list[tuple[str, ...]]:
    """Every import ``a -> b`` of ``package`` (those inside functions and under TYPE_CHECKING included) for which
    ``b`` leads back to ``a``, as the circle it closes: ``(a, b, ..., a)``."""
    graph = grimp.build_graph(package, cache_dir=None)
    circles = []
    for importer in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            back = graph.find_shortest_chain(importer=imported, imported=importer)
            if back is not None:
                circles.append((importer, *back))
    return circles


def test_capserve_has_no_import_circle() -> None:
    assert import_circles("capserve") == []


def test_the_check_finds_a_circle_through_a_third_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "circled"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from circled import b\n")
    (package / "b.py").write_text("import circled.c\n")
    (package / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from circled.a import x\n")
    (package / "d.py").write_text("from circled import a\n")  # imports into the circle, not part of it
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "circled", raising=False)
    assert import_circles("circled") == [
        ("circled.a", "circled.b", "circled.c", "circled.a"),
        ("circled.b", "circled.c", "circled.a", "circled.b"),
        ("circled.c", "circled.a", "circled.b", "circled.c"),
    ]
