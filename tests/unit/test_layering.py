"""The dependency direction is a rule, so a test keeps it: core is pure, flows call no SDK.

Reads every module's imports with ``ast`` (including imports inside functions), so a lazy import
cannot slip past.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "capserve"
SDKS = {"boto3", "botocore", "kubernetes", "huggingface_hub", "httpx", "aiohttp", "moto", "requests", "urllib3"}
RULES = {
    "core": SDKS
    | {
        "prefect",
        "prefect_aws",
        "capserve.tasks",
        "capserve.flows",
        "capserve.blocks",
        "capserve.sandbox",
        "capserve.cli",
    },
    "flows": SDKS | {"capserve.sandbox", "capserve.cli"},
    "tasks": {"capserve.flows", "capserve.sandbox", "capserve.cli"},
}


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def violations(layer: str) -> list[str]:
    forbidden = RULES[layer]
    found = []
    for path in sorted((PACKAGE / layer).rglob("*.py")):
        for name in imported_modules(path):
            if any(name == bad or name.startswith(bad + ".") for bad in forbidden):
                found.append(f"{path.relative_to(PACKAGE.parent)} imports {name}")
    return found


@pytest.mark.parametrize("layer", sorted(RULES))
def test_layer_imports_only_what_it_may(layer: str) -> None:
    assert violations(layer) == []


def test_the_check_catches_a_forbidden_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    import boto3.session\n    from prefect import flow\n")
    assert imported_modules(bad) == {"boto3.session", "prefect"}
