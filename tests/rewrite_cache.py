"""Write pytest's cache of rewritten test modules once, before `make test`'s pool starts.

pytest rewrites the asserts of every test module and conftest it imports, and of every module of an installed
pytest plugin's distribution (anyio, hypothesis, xdist, platformdirs here), then caches the rewritten code beside
the source, in ``__pycache__/<name>.cpython-311-pytest-<version>.pyc``. It writes that cache only when Python may
write bytecode: under ``PYTHONDONTWRITEBYTECODE`` (set on this machine and in CI) each of the pool's processes
rewrote them all again, ~6.7 CPU s each while it collected (the plugins' modules, ~1 s more, on a fresh venv).
pytest reads the cache whatever that variable says, and trusts a file whose source hash matches (a checked
hash-based pyc, PEP 552), so writing it here, once and across the machine's cores, spares every process that
work: ``python tests/rewrite_cache.py tests`` (the Makefile's test target), run from the project's root.

This calls pytest internals (``_pytest.assertion.rewrite``: ``_rewrite_test``, ``_read_pyc``, ``_write_pyc``,
``get_cache_dir``, ``try_makedirs``), the same calls its import hook makes. If they change, it writes nothing and
says so: the pool then rewrites as before, only slower. The rewritten code depends on one setting, the
``enable_assertion_pass_hook`` ini option (pytest's help: delete the cache when it changes); where it is set, this
writes nothing either.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
import tomllib
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

DEFAULT_PYTHON_FILES = ("test_*.py", "*_test.py")  # pytest's default `python_files`
_INTERNALS = ("_rewrite_test", "_read_pyc", "_write_pyc", "get_cache_dir", "try_makedirs", "PYC_TAIL")


def main(roots: list[str]) -> int:
    try:
        from _pytest.assertion import rewrite
        from _pytest.config import _iter_rewritable_modules
        from _pytest.pathlib import fnmatch_ex
    except ImportError as error:
        return _nothing(f"pytest's internals changed ({error!r})")
    if not all(hasattr(rewrite, name) for name in _INTERNALS):
        return _nothing("pytest's internals changed (_pytest.assertion.rewrite)")
    ini = tomllib.loads(Path("pyproject.toml").read_text()).get("tool", {}).get("pytest", {}).get("ini_options", {})
    if ini.get("enable_assertion_pass_hook"):
        return _nothing("enable_assertion_pass_hook is set")
    patterns = ini.get("python_files", DEFAULT_PYTHON_FILES)
    if isinstance(patterns, str):
        patterns = patterns.split()
    sources = [
        path
        for root in roots
        for path in sorted(Path(root).resolve().rglob("*.py"))
        if path.name == "conftest.py" or any(fnmatch_ex(pattern, path) for pattern in patterns)
    ]
    sources += _plugin_modules(_iter_rewritable_modules)
    stale = [path for path in sources if rewrite._read_pyc(path, _cache_file(path)) is None]
    if not stale:
        return 0
    workers = min(os.cpu_count() or 1, len(stale))
    with ProcessPoolExecutor(max_workers=workers) as pool:  # forked: the children have _pytest imported already
        written = sum(pool.map(_write, stale, chunksize=max(1, len(stale) // (workers * 4))))
    print(f"rewrite_cache: {written} of {len(sources)} modules rewritten and cached", file=sys.stderr)
    return 0


def _nothing(why: str) -> int:
    print(f"rewrite_cache: {why}; nothing cached (the test processes rewrite as before)", file=sys.stderr)
    return 0


def _plugin_modules(iter_rewritable_modules: Callable[[Iterable[str]], Iterator[str]]) -> list[Path]:
    """The source files of the modules pytest marks for rewriting: every top-level module and package of an
    installed distribution that registers a pytest plugin (``Config._mark_plugins_for_rewrite``)."""
    found = []
    for dist in importlib.metadata.distributions():
        if not any(entry.group == "pytest11" for entry in dist.entry_points):
            continue
        files = [str(file) for file in dist.files or []]
        names = set(iter_rewritable_modules(files))
        for file in files:
            top = file.split("/", 1)[0].removesuffix(".py")
            if file.endswith(".py") and top in names:
                found.append(Path(str(dist.locate_file(file))).resolve())
    return found


def _cache_file(source: Path) -> Path:
    from _pytest.assertion import rewrite

    return rewrite.get_cache_dir(source) / (source.name[:-3] + rewrite.PYC_TAIL)


def _write(source: Path) -> bool:
    """Rewrite one module as pytest's import hook does (with no config: no assertion-pass hook) and cache it."""
    from _pytest.assertion import rewrite

    try:
        source_hash, code = rewrite._rewrite_test(source, None)
        cache = _cache_file(source)
        return rewrite.try_makedirs(cache.parent) and rewrite._write_pyc(_NoTrace(), code, source_hash, cache)
    except SyntaxError:
        return False  # pytest reports it when it imports the module
    except (TypeError, ValueError, AttributeError, OSError):
        return False  # an internal that changed its signature, or a directory not writable: not cached


class _NoTrace:
    """The one attribute of pytest's ``AssertionState`` that ``_write_pyc`` uses."""

    @staticmethod
    def trace(message: str) -> None:
        pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["tests"]))
