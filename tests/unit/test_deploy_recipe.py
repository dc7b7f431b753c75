"""One deploy recipe: the README, the guide and operations.md give the same commands, and no page tells a user to
install an extra that does not exist."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "docs" / "guide.md", ROOT / "docs" / "operations.md"]


def recipe(page: Path) -> str:
    blocks = re.findall(r"```bash\n(.*?)```", page.read_text(), flags=re.S)
    (found,) = [b for b in blocks if "capserve deploy" in b and "prefect worker start" in b and "capserve up" in b]
    return found


def test_the_three_pages_give_one_deploy_recipe() -> None:
    first, *others = (recipe(page) for page in PAGES)
    assert all(other == first for other in others)
    assert "capserve init" in first


def test_no_page_installs_an_extra_the_project_does_not_have() -> None:
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    install = re.compile(r"pip install '?\S*\[([a-z-]+)\]")
    named = {(page.name, extra) for page in pages for extra in install.findall(page.read_text())}
    assert {(page, extra) for page, extra in named if extra not in extras} == set()
