"""What import-linter cannot say about the layering of docs/design.md §2: flows only sequence.

The import rules themselves are import-linter's contracts (``[tool.importlinter]`` in pyproject.toml, checked by
``lint-imports`` in ``make check`` on every import statement, those inside functions and under ``TYPE_CHECKING``
included); the test below proves each contract bites on a planted violation.
"""

from __future__ import annotations

import ast
import itertools
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "capserve"


def _plant(root: Path, files: dict[str, str]) -> None:
    for relative, source in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source, encoding="utf-8")
        for parent in list(path.relative_to(root).parents)[:-1]:
            (root / parent / "__init__.py").touch()


def broken_contracts(root: Path) -> dict[str, set[str]]:
    """lint-imports with the project's contracts on the packages under ``root``: each broken contract's short name
    (before its colon) and its "A is not allowed to import B" lines."""
    lint_imports = Path(sys.executable).with_name("lint-imports")
    env = {**os.environ, "PYTHONPATH": str(root), "COLUMNS": "400", "NO_COLOR": "1"}
    done = subprocess.run(
        [str(lint_imports), "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=root, env=env, capture_output=True, text=True, timeout=120,
    )
    _, _, broken = done.stdout.partition("Broken contracts")
    found: dict[str, set[str]] = {}
    contract = ""
    for line, underline in itertools.pairwise([*broken.splitlines(), ""]):
        if underline.startswith("---") and line.strip():
            contract = line.split(":")[0].strip()
        elif match := re.match(r"^(\S+) is not allowed to import (\S+):$", line):
            found.setdefault(contract, set()).add(f"{match[1]} -> {match[2]}")
    assert done.returncode in (0, 1) and (found or done.returncode == 0), done.stdout + done.stderr
    return found


def test_each_import_contract_catches_its_planted_violation(tmp_path: Path) -> None:
    _plant(
        tmp_path,
        {
            # an SDK and, under TYPE_CHECKING, a task in core
            "capserve/core/pure.py": "import boto3\nfrom typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from capserve.tasks import step\n",
            "capserve/flows/stage.py": "def run():\n    import httpx.client\n",  # inside a function
            "capserve/tasks/step.py": "import botocore\nfrom capserve.flows import stage\n",  # allowed, then up
            "capserve/cli/up.py": "def run():\n    from capserve_sandbox import aws\n",
            "capserve/added_later/mod.py": "import requests\n",  # a package no contract names
            "capserve/campaign/engine.py": "from capserve.flows import stage\n",  # the engine runs what it is given
            "capserve/blocks/hub.py": "",
            "capserve/runtime/watchdog.py": "",
            "capserve/deployments/__init__.py": "",
            "capserve_sandbox/aws.py": "import moto\nfrom capserve.tasks import step\n"
            "from capserve.campaign import engine\n",
        },
    )
    assert broken_contracts(tmp_path) == {
        "core is pure": {
            "capserve.core -> boto3",
            "capserve.core -> botocore",  # through the task it imports
            "capserve.core -> capserve.flows",
            "capserve.core -> capserve.tasks",
            "capserve.core -> httpx",
        },
        "only tasks talk to the outside world": {
            "capserve -> boto3",
            "capserve -> httpx",
            "capserve -> requests",
        },
        "production never imports the sandbox": {"capserve -> capserve_sandbox"},
        "dependencies flow one way": {
            "capserve.tasks -> capserve.flows",
            "capserve.core -> capserve.tasks",
            "capserve.campaign -> capserve.flows",
        },
        "the engine imports no flow": {"capserve.campaign -> capserve.flows"},
        "the sandbox stands on core and tasks": {
            "capserve_sandbox -> capserve.campaign",
            "capserve_sandbox -> capserve.flows",  # through the task it imports
        },
    }


# Flows only sequence: a flow function that grows past this holds logic that belongs in tasks/ or core/.
MAX_FLOW_FUNCTION_LINES = 60


def long_functions(path: Path, limit: int) -> list[str]:
    """Functions, methods and classes of ``path`` longer than ``limit`` lines, decorators and docstring included."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            length = (node.end_lineno or node.lineno) - first + 1
            if length > limit:
                found.append(f"{path.name}::{node.name} has {length} lines")
    return found


def test_flow_functions_only_sequence() -> None:
    flows = sorted((PACKAGE / "flows").rglob("*.py"))
    assert flows and [line for path in flows for line in long_functions(path, MAX_FLOW_FUNCTION_LINES)] == []


def defines_a_flow(path: Path) -> bool:
    """Whether a function of ``path`` is decorated with Prefect's ``flow`` (``@flow`` or ``@flow(...)``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for decorator in node.decorator_list:
                called = decorator.func if isinstance(decorator, ast.Call) else decorator
                if isinstance(called, ast.Name) and called.id == "flow":
                    return True
    return False


def test_every_module_in_flows_defines_a_flow() -> None:
    """flows/ holds flows; the machinery they share is the campaign engine's (capserve/campaign/)."""
    modules = [p for p in sorted((PACKAGE / "flows").rglob("*.py")) if p.name != "__init__.py"]
    assert modules and [p.name for p in modules if not defines_a_flow(p)] == []


def test_the_flow_check_tells_a_flow_from_a_helper(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("@flow(name='a')\ndef a():\n    pass\n")
    (tmp_path / "b.py").write_text("@task\ndef b():\n    pass\n")
    assert (defines_a_flow(tmp_path / "a.py"), defines_a_flow(tmp_path / "b.py")) == (True, False)


def test_the_length_check_catches_a_long_function(tmp_path: Path) -> None:
    long = tmp_path / "long.py"
    long.write_text("@flow\ndef f():\n" + "    x = 1\n" * 59 + "\ndef g():\n    pass\n"
                    "class C:\n" + "    x = 1\n" * 60)
    assert long_functions(long, MAX_FLOW_FUNCTION_LINES) == ["long.py::f has 61 lines", "long.py::C has 61 lines"]
