"""`make test`'s cache of rewritten test modules (tests/rewrite_cache.py), read by a pytest that may not write one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import rewrite_cache


def test_a_pytest_under_dontwritebytecode_runs_the_cached_rewrite_instead_of_rewriting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.pytest.ini_options]\n")
    (tmp_path / "test_one.py").write_text("def test_a():\n    left = 1\n    assert left == 2\n")
    monkeypatch.chdir(tmp_path)
    assert rewrite_cache.main([str(tmp_path)]) == 0
    debug = tmp_path / "debug.log"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "addopts=", f"--debug={debug}",
         "--rootdir", str(tmp_path), str(tmp_path)],
        cwd=tmp_path, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}, capture_output=True, text=True,
        timeout=300, check=False,
    )
    trace = [line.strip() for line in debug.read_text().splitlines() if line.strip().endswith("[assertion]")]
    assert f"found cached rewritten pyc for {tmp_path / 'test_one.py'} [assertion]" in trace, trace
    assert "assert 1 == 2" in done.stdout, done.stdout + done.stderr  # the cached code is the rewritten one
