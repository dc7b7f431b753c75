"""Holds the fault matrix sets on the running sandbox: one matching request waits until released."""

from __future__ import annotations

import json
import threading
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from capserve_sandbox.control import control_endpoint
from capserve_sandbox.failures import FAILURES
from capserve_sandbox.gates import GATES, Gates


def _post(url: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.load(answer)


def test_a_hold_keeps_the_first_matching_request_only_until_it_is_released() -> None:
    gates = Gates()
    gates.arm("download", "*.safetensors")
    gates.wait("download", "config.json")  # does not match: passes at once
    passed = threading.Event()

    def download() -> None:
        gates.wait("download", "model-1.safetensors")
        passed.set()

    held = threading.Thread(target=download)
    held.start()
    while gates.status()["download"]["held"] is None:
        held.join(0.01)
    gates.wait("download", "model-2.safetensors")  # a hold keeps one request; the rest go on
    assert not passed.is_set()
    gates.release("download")
    held.join(10)
    assert passed.is_set() and gates.status() == {}


def test_an_unknown_point_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown hold point 'purchse'"):
        Gates().arm("purchse")


def test_the_control_endpoint_arms_reports_and_releases(tmp_path: Path) -> None:
    FAILURES.reset(tmp_path / "failures.log")
    FAILURES.report("local Hub", KeyError("main"))
    with control_endpoint() as url:
        assert _post(f"{url}/hold", {"point": "apply", "match": "LeaderWorkerSet/*"})["holds"] == {
            "apply": {"match": "LeaderWorkerSet/*", "held": None}
        }
        with urllib.request.urlopen(f"{url}/state", timeout=10) as answer:
            state = json.load(answer)
        assert state["holds"]["apply"]["match"] == "LeaderWorkerSet/*"
        assert {"reservations", "deletes", "pid"} <= set(state)
        failed = [line.split(";")[0] for line in state["failures"]]
        assert failed == ["the sandbox's local Hub failed: KeyError: 'main'"]
        assert _post(f"{url}/release", {})["holds"] == {}
        with pytest.raises(urllib.error.HTTPError) as refused:
            _post(f"{url}/hold", {"point": "nowhere"})
        assert refused.value.code == 400
    assert GATES.status() == {}
