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


# Flows only sequence: a flow function that grows past this holds logic that belongs in tasks/ or core/.
MAX_FLOW_FUNCTION_LINES = 60


def long_functions(path: Path, limit: int) -> list[str]:
    """Functions (and methods) of ``path`` longer than ``limit`` lines, decorators and docstring included."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            length = (node.end_lineno or node.lineno) - first + 1
            if length > limit:
                found.append(f"{path.name}::{node.name} has {length} lines")
    return found


def test_flow_functions_only_sequence() -> None:
    flows = sorted((PACKAGE / "flows").rglob("*.py"))
    assert flows and [line for path in flows for line in long_functions(path, MAX_FLOW_FUNCTION_LINES)] == []


def test_the_length_check_catches_a_long_function(tmp_path: Path) -> None:
    long = tmp_path / "long.py"
    long.write_text("@flow\ndef f():\n" + "    x = 1\n" * 59 + "\ndef g():\n    pass\n")
    assert long_functions(long, MAX_FLOW_FUNCTION_LINES) == ["long.py::f has 61 lines"]
