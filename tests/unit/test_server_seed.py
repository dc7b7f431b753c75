"""A new local server's home is seeded from the migrated database kept per Prefect version
(capserve/runtime/prefect_server.py): kept once from a healthy server, copied only into a home with no database."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from capserve.runtime.prefect_server import keep_seed, seed_dir, seed_home


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache"


def a_started_home(home: Path, revision: str = "head-of-migrations") -> Path:
    """What a server's start leaves in a new home: the migrated database."""
    home.mkdir(parents=True)
    with closing(sqlite3.connect(home / "prefect.db")) as db, db:
        db.execute("CREATE TABLE alembic_version (version_num TEXT)")
        db.execute("INSERT INTO alembic_version VALUES (?)", (revision,))
    return home


def revision_of(home: Path) -> str:
    with closing(sqlite3.connect(home / "prefect.db")) as db:
        (revision,) = db.execute("SELECT version_num FROM alembic_version").fetchone()
    return str(revision)


def test_a_new_home_starts_from_the_database_the_first_server_migrated(tmp_path: Path, cache: Path) -> None:
    keep_seed(a_started_home(tmp_path / "first"))
    assert seed_dir().parent == cache / "capserve" and seed_dir().name.startswith("prefect-3.")

    (new := tmp_path / "new").mkdir()
    assert seed_home(new) is True
    assert revision_of(new) == "head-of-migrations"


def test_a_home_with_its_own_database_keeps_it(tmp_path: Path) -> None:
    keep_seed(a_started_home(tmp_path / "first"))
    restarted = a_started_home(tmp_path / "restarted", revision="its-own")
    assert seed_home(restarted) is False
    assert revision_of(restarted) == "its-own"


def test_with_no_seed_kept_the_server_migrates_on_its_own(tmp_path: Path) -> None:
    (new := tmp_path / "new").mkdir()
    assert seed_home(new) is False
    assert list(new.iterdir()) == []


def test_a_database_that_cannot_be_read_leaves_no_seed_and_no_partial_folder(tmp_path: Path, cache: Path) -> None:
    (home := tmp_path / "first").mkdir()
    (home / "prefect.db").write_bytes(b"not a database")
    keep_seed(home)
    assert not seed_dir().exists()
    assert list((cache / "capserve").iterdir()) == []
