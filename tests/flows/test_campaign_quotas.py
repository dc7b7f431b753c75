"""Quotas in the campaign's preflight, on the sandbox: a quota the campaign's network would overflow is refused
before anything is bought, naming the quota code and the value to request (docs/preflight.md §3)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from capserve_sandbox.aws_ext import capacity as capacity_ext
from capserve_sandbox.aws_ext import quotas as quotas_ext
from capserve_sandbox.environment import SandboxEndpoints

from capserve.cli import main
from capserve.core.preflight import PreflightError
from capserve.core.spec import load_spec
from capserve.flows.campaign import campaign
from tests.flows.test_campaign_preflight import far_ends, spec_file

__all__ = ["far_ends"]  # the fixture, used by name


@pytest.fixture
def quotas(far_ends: SandboxEndpoints) -> Iterator[SandboxEndpoints]:
    quotas_ext.reset()
    yield far_ends
    quotas_ext.reset()


def test_a_vpc_quota_too_small_for_the_network_is_refused_before_any_purchase(
    tmp_path: Path, quotas: SandboxEndpoints
) -> None:
    # Each region's default VPC fills a quota of 1; the block may be bought in either region of the example.
    quotas_ext.SETTINGS.applied["L-F678F1CE"] = 1
    spec = load_spec(spec_file(tmp_path))
    with pytest.raises(PreflightError) as caught:
        campaign(spec, out_dir=tmp_path / "out", hub_endpoint=quotas.hub, teardown_when_done=True)
    assert [p.split(":")[0] for p in caught.value.problems] == [
        "quota VPCs per Region (L-F678F1CE) in us-east-2", "quota VPCs per Region (L-F678F1CE) in us-west-2",
    ]
    assert "1 used of 1, the campaign adds 1: request an increase of L-F678F1CE in us-west-2 to at least 2" in (
        caught.value.problems[1]
    )
    # Before this check the campaign bought a block and met VpcLimitExceeded building its network.
    assert capacity_ext.calls() == []  # nothing searched, nothing bought


def test_a_rehearsal_the_on_demand_vcpu_quota_cannot_hold_is_refused_before_it_launches_anything(
    tmp_path: Path,
) -> None:
    quotas_ext.reset()
    quotas_ext.SETTINGS.applied["L-417A185B"] = 64  # one p6-b200.48xlarge needs 192 vCPUs
    try:
        out = tmp_path / "rehearsal"
        code = main(["rehearse", str(spec_file(tmp_path)), "--sandbox", "--out", str(out)])
    finally:
        quotas_ext.reset()
    assert code == 2
    written = json.loads((out / "report.json").read_text())
    assert [(s["name"], s["status"]) for s in written["stages"]] == [("plan", "failed")]  # nothing launched
    said = written["stages"][0]["detail"]
    assert "Running On-Demand P instances (L-417A185B) in us-east-2 (1 × p6-b200.48xlarge): 0 vCPUs used of 64" in said
    assert "request an increase of L-417A185B in us-east-2 to at least 192" in said
