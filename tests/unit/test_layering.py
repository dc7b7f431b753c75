"""The layering of docs/design.md §2, declared as contracts and checked on every import statement.

Each module's imports are read with ``ast``, including imports inside functions and under
``TYPE_CHECKING``, so a lazy import cannot slip past; only a contract that says so allows an import
inside a function (the CLI loads the sandbox that way, for ``--sandbox`` only).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "capserve"
SANDBOX = Path(__file__).resolve().parents[2] / "sandbox" / "capserve_sandbox"

# Libraries that talk to the outside world (docs/design.md §2).
SDKS = frozenset(
    {
        "boto3",
        "botocore",
        "s3transfer",
        "kubernetes",
        "huggingface_hub",
        "httpx",
        "aiohttp",
        "requests",
        "urllib3",
        "websocket",
        "moto",
    }
)
PREFECT = frozenset({"prefect", "prefect_aws", "prefect_kubernetes"})


@dataclass(frozen=True)
class Contract:
    """Modules under ``sources`` (minus ``exempt``) import nothing under ``forbidden``."""

    name: str
    sources: tuple[str, ...]
    forbidden: frozenset[str]
    why: str
    exempt: tuple[str, ...] = ()
    lazy_allowed_in: tuple[str, ...] = ()  # sources where a function-level import of ``forbidden`` is allowed


CONTRACTS = (
    Contract(
        name="only tasks talk to the outside world",
        sources=("capserve",),
        exempt=("capserve.tasks",),
        forbidden=SDKS,
        why="tasks/ are where SDK errors become capserve errors (the sandbox, a distribution of its own, speaks the "
        "protocols it imitates: moto, botocore's models, aiohttp servers)",
    ),
    Contract(
        name="core is pure",
        sources=("capserve.core",),
        forbidden=SDKS
        | PREFECT
        | {"capserve.tasks", "capserve.campaign", "capserve.flows", "capserve.blocks", "capserve_sandbox"}
        | {"capserve.cli"},
        why="decisions and builders are tested with plain data, and `capserve plan` runs without Prefect",
    ),
    Contract(
        name="flows only sequence",
        sources=("capserve.flows", "capserve.campaign"),
        forbidden=frozenset({"capserve_sandbox", "capserve.cli"}),
        why="a flow runs the same against AWS and the sandbox; only configuration differs",
    ),
    Contract(
        name="tasks never reach up",
        sources=("capserve.tasks",),
        forbidden=frozenset({"capserve.flows", "capserve.campaign", "capserve_sandbox", "capserve.cli"}),
        why="dependencies flow one way: flows and the campaign engine → tasks → core",
    ),
    Contract(
        name="blocks are configuration",
        sources=("capserve.blocks",),
        forbidden=frozenset(
            {"capserve.tasks", "capserve.campaign", "capserve.flows", "capserve_sandbox", "capserve.cli"}
        ),
        why="a Block is loaded by tasks and flows, never the other way round",
    ),
    Contract(
        name="production never imports the sandbox",
        sources=("capserve",),
        forbidden=frozenset({"capserve_sandbox"}),
        why="a production install has no stand-in (docs/README.md); the CLI finds them through the "
        "capserve.sandbox entry points (capserve/cli/stand_ins.py), never by importing them",
    ),
    Contract(
        name="the sandbox stands on core and tasks",
        sources=("capserve_sandbox",),
        forbidden=frozenset(
            {"capserve.flows", "capserve.campaign", "capserve.cli", "capserve.blocks", "capserve.runtime"}
        ),
        why="the stand-ins imitate the far ends the tasks talk to; what sequences a campaign must not shape them",
    ),
)


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    name: str  # what it imports, absolute
    lazy: bool  # inside a function body


def module_name(path: Path, package_root: Path) -> str:
    parts = path.relative_to(package_root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, package_root: Path) -> list[Import]:
    module = module_name(path, package_root)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[Import] = []

    def visit(node: ast.AST, lazy: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inside = lazy or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            if isinstance(child, ast.Import):
                found.extend(Import(module, alias.name, lazy) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:  # relative: resolve against the importing package
                    anchor = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                found.append(Import(module, base, lazy))
                # ``from capserve import sandbox`` imports capserve_sandbox
                found.extend(Import(module, f"{base}.{alias.name}", lazy) for alias in child.names)
            visit(child, inside)

    visit(tree, lazy=False)
    return found


def _under(name: str, prefixes: tuple[str, ...] | frozenset[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def violations(package_root: Path, contracts: tuple[Contract, ...] = CONTRACTS) -> list[str]:
    hits: dict[tuple[str, str, bool], set[str]] = {}
    for path in sorted(package_root.rglob("*.py")):
        for imp in imports_of(path, package_root):
            for contract in contracts:
                if not _under(imp.module, contract.sources) or _under(imp.module, contract.exempt):
                    continue
                if not _under(imp.name, contract.forbidden):
                    continue
                if imp.lazy and _under(imp.module, contract.lazy_allowed_in):
                    continue
                hits.setdefault((contract.name, imp.module, imp.lazy), set()).add(imp.name)
    found = []
    for (contract_name, module, lazy), names in hits.items():
        # ``from capserve.flows import stage`` reports capserve.flows, not both it and capserve.flows.stage
        for name in sorted(n for n in names if not any(n.startswith(other + ".") for other in names)):
            found.append(f"{contract_name}: {module} imports {name}{' inside a function' if lazy else ''}")
    return sorted(found)


def test_the_packages_keep_every_contract() -> None:
    assert violations(PACKAGE) + violations(SANDBOX) == []


@pytest.mark.parametrize("contract", CONTRACTS, ids=lambda c: c.name)
def test_each_contract_applies_to_real_modules(contract: Contract) -> None:
    modules = {module_name(p, root) for root in (PACKAGE, SANDBOX) for p in root.rglob("*.py")}
    covered = [m for m in modules if _under(m, contract.sources) and not _under(m, contract.exempt)]
    assert covered, f"{contract.name}: no module matches {contract.sources} (renamed?)"
    assert contract.why


def _plant(root: Path, files: dict[str, str]) -> Path:
    package = root / "capserve"
    for relative, source in files.items():
        path = package / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source, encoding="utf-8")
        for parent in path.relative_to(package).parents:
            init = package / parent / "__init__.py"
            if not init.exists():
                init.write_text("", encoding="utf-8")
    return package


def test_the_contracts_catch_planted_violations(tmp_path: Path) -> None:
    package = _plant(
        tmp_path,
        {
            "core/pure.py": "import boto3\nfrom prefect import flow\nfrom typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from capserve.tasks import aws\n",
            "flows/stage.py": "def run():\n    import httpx.client\n",
            "tasks/step.py": "import botocore\nfrom capserve.flows import stage\nimport capserve_sandbox.clock\n",
            "blocks/conf.py": "from capserve_sandbox import aws\n",
            "cli/up.py": "def run():\n    from capserve_sandbox.environment import sandbox\n",
            "cli/eval.py": "def run():\n    import aiohttp\n",
            "__init__.py": "import requests\n",
        },
    )
    stand_ins = tmp_path / "capserve_sandbox"
    stand_ins.mkdir()
    (stand_ins / "__init__.py").write_text("")
    (stand_ins / "aws.py").write_text("import moto\nfrom capserve.tasks import step\nfrom capserve.flows import stage")
    assert violations(package) == [
        "blocks are configuration: capserve.blocks.conf imports capserve_sandbox",
        "core is pure: capserve.core.pure imports boto3",
        "core is pure: capserve.core.pure imports capserve.tasks",
        "core is pure: capserve.core.pure imports prefect",
        "only tasks talk to the outside world: capserve imports requests",
        "only tasks talk to the outside world: capserve.cli.eval imports aiohttp inside a function",
        "only tasks talk to the outside world: capserve.core.pure imports boto3",
        "only tasks talk to the outside world: capserve.flows.stage imports httpx.client inside a function",
        "production never imports the sandbox: capserve.blocks.conf imports capserve_sandbox",
        "production never imports the sandbox: "
        "capserve.cli.up imports capserve_sandbox.environment inside a function",
        "production never imports the sandbox: capserve.tasks.step imports capserve_sandbox.clock",
        "tasks never reach up: capserve.tasks.step imports capserve.flows",
        "tasks never reach up: capserve.tasks.step imports capserve_sandbox.clock",
    ]
    # The stand-ins may import SDKs and capserve's tasks, never what sequences a campaign.
    assert violations(stand_ins) == [
        "the sandbox stands on core and tasks: capserve_sandbox.aws imports capserve.flows"
    ]


def test_imports_are_read_everywhere_and_resolved(tmp_path: Path) -> None:
    package = _plant(tmp_path, {"tasks/weights/fetch.py": "def f():\n    import boto3.session\n    from . import s3\n"})
    found = imports_of(package / "tasks" / "weights" / "fetch.py", package)
    assert Import("capserve.tasks.weights.fetch", "boto3.session", lazy=True) in found
    assert Import("capserve.tasks.weights.fetch", "capserve.tasks.weights.s3", lazy=True) in found
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
