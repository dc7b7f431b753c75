"""The repository stands alone: citations name docs/ pages and sections that exist, never notes outside it.

Comments cite facts as ``docs/<page>.md §N`` (docs/README.md); a renumbered section or a citation of a
file a user's clone does not have would leave a reader with nothing to check.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
SCANNED = ("capserve", "tests", "bench", "faults", "scripts", "deployments", "examples", "docs", ".ci")
TOP_LEVEL = ("Makefile", "README.md", "pyproject.toml")
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".sh", ".txt", ".cfg", ""}

# Notes that lived beside the project during its development and are not part of it.
# (Written with character classes so that a plain grep for those paths does not find this file itself.)
OUTSIDE = re.compile(r"shared[/]reference|[.][.][/]shared|\bFACTS[.]md|\banchors[.]md|\bDESIGN[.]md|\bSTYLE[.]md")
# "docs/weights.md §3.4" in code, "[weights.md §3.4](weights.md)" between docs pages.
CITATION = re.compile(r"(?:docs/|\[)([a-z0-9-]+)\.md(?: §(\d+(?:\.\d+)*))?")
HEADING = re.compile(r"^#{2,4} (\d+(?:\.\d+)*)\.? ", re.MULTILINE)


def scanned_files() -> list[Path]:
    files = [ROOT / name for name in TOP_LEVEL if (ROOT / name).is_file()]
    for top in SCANNED:
        base = ROOT / top
        if base.is_dir():
            files += [
                p for p in base.rglob("*") if p.is_file() and p.suffix in SUFFIXES and "__pycache__" not in p.parts
            ]
    return sorted(files)


def sections(page: Path) -> set[str]:
    return set(HEADING.findall(page.read_text(encoding="utf-8")))


def bad_citations(files: list[Path], docs: Path) -> list[str]:
    """Each citation of a docs page that does not exist, or of a section that page does not have."""
    known = {page.stem: sections(page) for page in docs.glob("*.md")}
    found = []
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        for match in CITATION.finditer(text):
            page, section = match.group(1), match.group(2)
            where = f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: {match.group(0)}"
            if page not in known:
                if match.group(0).startswith("docs/"):
                    found.append(f"{where} (no docs/{page}.md)")
            elif section is not None and section not in known[page]:
                found.append(f"{where} (docs/{page}.md has no section {section})")
    return found


def test_nothing_cites_notes_outside_the_repository() -> None:
    hits = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in scanned_files()
        if path.name != Path(__file__).name
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert hits == []


def test_every_docs_citation_names_an_existing_section() -> None:
    files = [path for path in scanned_files() if path.name != Path(__file__).name]
    assert bad_citations(files, DOCS) == []


def test_the_check_catches_a_wrong_citation(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "page.md").write_text("# Page\n\n## 1. One\n\n### 1.2 Sub\n\n## 2. Two\n", encoding="utf-8")
    code = tmp_path / "code.py"
    code.write_text(
        "# docs/page.md §1.2 and docs/page.md §2 and docs/page.md are fine\n"
        "# docs/page.md §3 is not, nor docs/gone.md §1\n",
        encoding="utf-8",
    )
    assert bad_citations([code], docs) == [
        f"{code}: docs/page.md §3 (docs/page.md has no section 3)",
        f"{code}: docs/gone.md §1 (no docs/gone.md)",
    ]


@pytest.mark.parametrize(
    "line", ["see .." "/shared" "/reference/FACTS" ".md", "(anchors" ".md §4.4)", "(STYLE" ".md rule 8)"]
)
def test_the_outside_pattern_matches_old_citations(line: str) -> None:
    assert OUTSIDE.search(line)
