"""A parallel run's progress (tests/file_progress.py): a line per finished file instead of a row of dots."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from file_progress import FileProgress, _File

TESTS = Path(__file__).resolve().parents[1]

CONFTEST = "import file_progress\n\ndef pytest_configure(config):\n    file_progress.register(config)\n"
FILES = {
    "test_one.py": (
        "import time\n\ndef test_a():\n    begun = time.process_time()\n"
        "    while time.process_time() - begun < 1.0:\n        pass\n\ndef test_b():\n    pass\n"
    ),
    "test_two.py": "import pytest\n\ndef test_c():\n    assert 1 == 2\n\n@pytest.mark.skip\ndef test_d():\n    pass\n",
}


def run_pytest(folder: Path, *options: str) -> subprocess.CompletedProcess[str]:
    """pytest in a subprocess on ``folder``'s files alone, with tests/file_progress.py importable."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-m", "pytest", *options, "-p", "no:cacheprovider", "-o", "addopts=",
         "--rootdir", str(folder), str(folder)],
        cwd=folder, env=env, capture_output=True, text=True, timeout=300, check=False,
    )


def test_a_parallel_run_prints_each_finished_file_with_its_outcomes_and_ranks_the_slowest(tmp_path: Path) -> None:
    for name, source in {"conftest.py": CONFTEST, **FILES}.items():
        (tmp_path / name).write_text(source)
    done = run_pytest(tmp_path, "-n", "1")
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    done_line = re.compile(
        r"^done (test_\w+\.py): (.*?) in \d+ s \(CPU (\d+) s\)  \[\d+:\d\d, \d/2 files\]$", re.MULTILINE
    )
    lines = {m[1]: (m[2], int(m[3])) for m in done_line.finditer(out)}
    assert {name: outcomes for name, (outcomes, _) in lines.items()} == {
        "test_one.py": "2 passed", "test_two.py": "1 failed, 1 skipped"}, out
    assert lines["test_one.py"][1] >= 1, out  # test_a's second of CPU, counted in its worker
    assert not re.search(r"^\.+", out, re.MULTILINE), out  # no dots for the passing tests
    assert re.search(r"slowest 12 files .*\n.*s  CPU +\d+\.\ds  test_(one|two)\.py \(2 tests\)", out), out
    assert re.search(r"^CPU of all files: \d+ s \(at least \d+ s of wall time on 2 cores\)$", out, re.MULTILINE), out


def test_a_run_without_xdist_starts_and_prints_no_progress(tmp_path: Path) -> None:
    """``-p no:xdist``: FileProgress's xdist hooks would be unknown hooks (PluginValidationError), so it is not
    registered; the run goes on, and its output is pytest's own."""
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_one.py").write_text("def test_a():\n    pass\n")
    done = run_pytest(tmp_path, "-p", "no:xdist")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout and "done test_one.py" not in done.stdout, done.stdout


def test_a_quiet_minute_names_the_files_still_running_or_says_the_workers_are_starting(
    pytestconfig: pytest.Config,
) -> None:
    progress = FileProgress(pytestconfig)
    begun = progress.begun
    assert progress.quiet_line(begun + 61) == "no test has begun yet [1:01]: the workers are still starting"
    progress.files = {
        "tests/a.py": _File(tests=2, started=begun + 10),
        "tests/b.py": _File(tests=1, started=begun + 40),
        "tests/c.py": _File(tests=1, finished=1, started=begun),
    }
    assert progress.quiet_line(begun + 30) is None  # not quiet for a minute yet
    assert progress.quiet_line(begun + 130) == "still running [2:10]: tests/a.py (2:00), tests/b.py (1:30)"
    progress.files["tests/a.py"].finished = progress.files["tests/b.py"].finished = 2
    assert progress.quiet_line(begun + 190) is None  # all done: the summary follows


def test_the_session_server_reaped_at_the_end_is_counted_apart_not_on_the_last_file(tmp_path: Path) -> None:
    """A child's CPU counts when it is reaped: the worker's Prefect test server, stopped when the session ends, would
    land whole on the worker's last file (a file of a few CPU seconds once showed 105)."""
    server = (
        "import subprocess, sys\nimport pytest\n\n@pytest.fixture(autouse=True, scope='session')\n"
        "def server():\n    child = subprocess.Popen([sys.executable, '-c', 'import time\\n"
        "begun = time.process_time()\\nwhile time.process_time() - begun < 1.5:\\n    pass'])\n    yield\n"
        "    with file_progress.server_reaped():\n        child.wait()\n"
    )
    (tmp_path / "conftest.py").write_text(CONFTEST + server)
    (tmp_path / "test_one.py").write_text("def test_a():\n    pass\n")
    done = run_pytest(tmp_path, "-n", "1")
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert re.search(r"^done test_one\.py: 1 passed in \d+ s \(CPU 0 s\)", out, re.MULTILINE), out
    assert re.search(r"^CPU of all files: 0 s and of the workers' Prefect test servers [12] s ", out, re.MULTILINE), out
