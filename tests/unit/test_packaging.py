"""What `pip install capserve` brings, and what only the stand-ins' distribution (sandbox/) may (docs/README.md).

The declared requirements come from pyproject.toml; what they pull in transitively is read from the
installed distributions' metadata (``importlib.metadata``), so the closure is the one pip resolved.
"""

from __future__ import annotations

import ast
import importlib.metadata as metadata
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "capserve"
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
SANDBOX = tomllib.loads((ROOT / "sandbox" / "pyproject.toml").read_text(encoding="utf-8"))["project"]

# Stand-ins and test tools: a production install must pull in none of them, not even transitively.
NOT_IN_PRODUCTION = {"moto", "kubernetes-validate", "responses", "pytest", "ruff", "mypy", "prefect-aws"}


def requirements(extra: str | None = None) -> list[Requirement]:
    declared = PROJECT["dependencies"] if extra is None else PROJECT["optional-dependencies"][extra]
    return [Requirement(line) for line in declared]


def sandbox_requirements() -> list[Requirement]:
    """What capserve-sandbox declares, without capserve itself."""
    declared = [Requirement(line) for line in SANDBOX["dependencies"]]
    return [r for r in declared if canonicalize_name(r.name) != "capserve"]


def closure(roots: list[Requirement]) -> set[str]:
    """Canonical names of every distribution the requirements pull in (markers evaluated here)."""
    seen: set[tuple[str, frozenset[str]]] = set()
    pending = [(req, frozenset[str]()) for req in roots]
    while pending:
        req, parent_extras = pending.pop()
        environments = [{"extra": extra} for extra in parent_extras] or [{"extra": ""}]
        if req.marker is not None and not any(req.marker.evaluate(env) for env in environments):
            continue
        name = canonicalize_name(req.name)
        if name == "capserve":  # a self-reference, such as capserve[extra] in another extra
            pending += [(r, frozenset[str]()) for extra in req.extras for r in requirements(extra)]
            continue
        key = (name, frozenset(req.extras))
        if key in seen:
            continue
        seen.add(key)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:  # not installed here (e.g. a platform marker elsewhere)
            continue
        pending += [(Requirement(line), frozenset(req.extras)) for line in requires]
    return {name for name, _ in seen}


def third_party_imports(paths: list[Path]) -> set[str]:
    """Top-level names of the non-stdlib modules these files import (anywhere, lazily included)."""
    names: set[str] = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module.split(".")[0])
    own = {"capserve", "capserve_sandbox", "__future__"}
    return {n for n in names if n not in sys.stdlib_module_names and n not in own}


def distributions_of(modules: set[str]) -> dict[str, set[str]]:
    providers = metadata.packages_distributions()
    return {m: {canonicalize_name(d) for d in providers.get(m, [])} for m in modules}


def modules_not_covered(paths: list[Path], allowed: set[str]) -> list[str]:
    """Imported modules no distribution of ``allowed`` (declared, direct) provides."""
    return sorted(m for m, dists in distributions_of(third_party_imports(paths)).items() if not dists & allowed)


def direct(reqs: list[Requirement]) -> set[str]:
    return {canonicalize_name(r.name) for r in reqs}


def production_files() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_a_production_install_carries_no_emulator() -> None:
    assert closure(requirements()) & NOT_IN_PRODUCTION == set()


def test_the_sandbox_distribution_brings_the_emulators_on_top_of_capserve() -> None:
    assert {"moto", "kubernetes-validate", "jsonpatch", "numpy"} <= direct(sandbox_requirements())
    assert "capserve" in {canonicalize_name(Requirement(line).name) for line in SANDBOX["dependencies"]}
    assert "moto" in closure(sandbox_requirements())


def test_production_code_imports_only_declared_dependencies() -> None:
    # Declared directly, not just arriving through another package: a transitive one can vanish.
    assert modules_not_covered(production_files(), direct(requirements())) == []


def test_the_sandbox_imports_only_what_it_or_production_declares() -> None:
    sandbox = sorted((ROOT / "sandbox" / "capserve_sandbox").rglob("*.py"))
    assert modules_not_covered(sandbox, direct(requirements()) | direct(sandbox_requirements())) == []


def test_the_closure_follows_requirements_transitively() -> None:
    planted = closure(requirements() + [Requirement("moto[server]")])
    assert {"moto", "responses"} <= planted & NOT_IN_PRODUCTION  # responses comes only through moto


def test_the_coverage_check_catches_an_undeclared_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    import moto\n    import yaml\n    import json\n", encoding="utf-8")
    assert modules_not_covered([module], {"pyyaml"}) == ["moto"]


def test_the_cli_finds_the_stand_ins_through_their_entry_points() -> None:
    from capserve.cli.stand_ins import GROUP

    found = {ep.name: ep.value for ep in metadata.entry_points(group=GROUP)}
    assert found == {"environment": "capserve_sandbox.environment", "control": "capserve_sandbox.control"}


def test_capserve_up_sandbox_without_the_stand_ins_says_what_to_install(tmp_path: Path) -> None:
    # As a production install sees it: no distribution registers the group.
    code = (
        "import sys, importlib.metadata as md\n"
        "real = md.entry_points\n"
        "md.entry_points = lambda **kw: real(group='capserve.none') if kw.get('group') == 'capserve.sandbox' "
        "else real(**kw)\n"
        "from capserve.cli import main\n"
        f"sys.exit(main(['up', {str(ROOT / 'examples' / 'kimi-k3-sandbox.yaml')!r}, '--sandbox', "
        f"'--out', {str(tmp_path)!r}]))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr
    assert "pip install ./sandbox" in " ".join(run.stderr.split())
