"""The gate before traffic in a whole sandbox campaign: smoke and quality only; the load profile never holds back
the verdict or the serving (it runs on demand against the serving endpoint, docs/evaluation.md §8)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from capserve_sandbox.environment import SandboxEndpoints, sandbox

from capserve.core.spec import load_spec
from capserve.flows.campaign import campaign
from tests.flows.test_campaign import SMALL_LOAD, spec_file


@pytest.fixture
def far_ends() -> Iterator[SandboxEndpoints]:
    with sandbox(served_model_name="kimi-k3") as endpoints:
        yield endpoints


def test_the_endpoint_serves_once_smoke_and_quality_pass_whatever_the_load_profile_would_say(
    tmp_path: Path, far_ends: SandboxEndpoints
) -> None:
    # Latency gates no endpoint meets: judged on a load profile, they would fail the verdict and serve nothing.
    spec = load_spec(spec_file(tmp_path, evaluation__load=SMALL_LOAD, evaluation__gates={"p95_ttft_ms": 0.001}))
    campaign(spec, out_dir=tmp_path / "out", hub_endpoint=far_ends.hub, teardown_when_done=True)

    written = json.loads((tmp_path / "out" / "report.json").read_text())
    evaluation = written["evaluation"]
    assert evaluation["verdict"] == "pass", evaluation["gates"]
    assert evaluation["load"] is None and evaluation["plots"] == []
    assert not any("@" in gate["name"] for gate in evaluation["gates"])  # no load level judged
    assert any("capserve eval --profile load" in note for note in evaluation["notes"])
    # The ledger's serving began at the ready endpoint, not withheld by a failed verdict.
    assert written["cost"]["serving_started_by"] == "rollout ready → teardown began"
