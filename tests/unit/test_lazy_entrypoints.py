"""What a process imports before it acts: each flow run a worker starts imports its deployment's entrypoint module,
and every ``capserve`` command imports the CLI's entry module. A drain or teardown run must not import the whole
campaign (its nine flows' imports and parameter schemas cost about a CPU second), and the CLI imports Prefect, a
cloud SDK or a flow only in the command that uses it.

Read from the source (module-level imports, followed through capserve's own modules), not by importing it."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _source(module: str) -> Path | None:
    base = ROOT.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


@cache
def _imports(module: str) -> tuple[str, ...]:
    """The modules ``module`` imports at module level (an import inside a function runs when it is called)."""
    path = _source(module)
    if path is None:
        return ()
    names: list[str] = []
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            names.append(node.module)
            # `from capserve.x import y` imports the module capserve.x.y when y is one
            names += [f"{node.module}.{alias.name}" for alias in node.names if _source(f"{node.module}.{alias.name}")]
    return tuple(names)


def _imported_by(module: str) -> set[str]:
    """Every module importing ``module`` imports, following capserve's modules and their packages."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for known in (".".join(parts[:i]) for i in range(1, len(parts) + 1)):
            if known not in seen:
                seen.add(known)
                if known.split(".")[0] == "capserve":
                    todo += _imports(known)
    return seen


def _heavy(found: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(name for name in found if any(name == n or name.startswith(f"{n}.") for n in names))


@pytest.mark.parametrize("entrypoint", ["drain", "scheduled_teardown", "teardown_orphan"])
def test_a_window_run_imports_no_flow_of_the_campaign(entrypoint: str) -> None:
    from capserve.deployments import definitions

    modules = {d.module for d in definitions() if d.function == entrypoint}
    assert modules == {"capserve.flows.window"}
    found = _imported_by("capserve.flows.window")
    assert _heavy(found, ("capserve.flows.campaign", "capserve.flows.bring_up", "capserve.flows.evaluate",
                          "capserve.flows.rollout", "capserve.flows.stage_weights", "capserve.campaign.runner",
                          "aiohttp", "huggingface_hub")) == []


def test_the_flows_import_the_load_generator_only_in_its_own_process() -> None:
    assert _heavy(_imported_by("capserve.flows.campaign"), ("capserve.tasks.evaluation.loadgen", "aiohttp")) == []


def test_the_cli_entry_module_imports_no_prefect_cloud_sdk_or_flow() -> None:
    found = _imported_by("capserve.cli")
    assert _heavy(found, ("prefect", "boto3", "botocore", "kubernetes", "huggingface_hub", "aiohttp",
                          "capserve.flows", "capserve.campaign")) == []


def test_a_campaign_run_that_ends_at_prepare_imports_no_serve_subflow() -> None:
    """The campaign run days before its block plans, buys and stages only: its process neither imports bring-up,
    rollout, evaluation nor teardown, nor makes their flows' parameter schemas (about 0.6 CPU s); the serve run
    imports each when its stage runs."""
    from capserve.deployments import definitions

    assert {d.module for d in definitions() if d.name == "campaign"} == {"capserve.flows.campaign"}
    assert _heavy(_imported_by("capserve.flows.campaign"), (
        "capserve.flows.bring_up", "capserve.flows.rollout", "capserve.flows.evaluate", "capserve.flows.teardown",
        "capserve.campaign.rollout",
    )) == []
