"""A new local server's home is seeded from the migrated database kept per Prefect (and collection) version
(capserve/runtime/prefect_server.py): kept once from a healthy server, copied only into a home with no database, whose
server then does not register the block types the seed holds."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Mapping
from contextlib import closing
from pathlib import Path

import pytest

from capserve.runtime import prefect_server
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


@pytest.mark.parametrize("own_database", [False, True], ids=["new home", "restart"])
def test_only_a_seeded_start_skips_registering_the_block_types_the_seed_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, own_database: bool
) -> None:
    keep_seed(a_started_home(tmp_path / "first"))
    home = a_started_home(tmp_path / "home") if own_database else tmp_path / "home"
    started: list[Mapping[str, str]] = []

    def spawn(name: str, argv: list[str], env: Mapping[str, str], log: Path, **_: object) -> prefect_server.Child:
        started.append(env)
        process = subprocess.Popen(  # a server that stays up, in its own session as _spawn's
            [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True
        )
        return prefect_server.Child(name=name, process=process, log=log)

    monkeypatch.setattr(prefect_server, "_spawn", spawn)
    monkeypatch.setattr(prefect_server, "_healthy", lambda url: True)
    server = prefect_server.start_server(home)
    server.child.stop()

    (env,) = started
    skipped = {name: env.get(name) for name in prefect_server.SEEDED_SETTINGS}
    assert (skipped == prefect_server.SEEDED_SETTINGS) is not own_database, skipped
