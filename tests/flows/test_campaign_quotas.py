"""Quotas in the campaign's preflight, on the sandbox: a quota the campaign's network would overflow is refused
before anything is bought, naming the quota code and the value to request (docs/preflight.md §3)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from capserve_sandbox.aws_ext import capacity as capacity_ext
from capserve_sandbox.aws_ext import quotas as quotas_ext
from capserve_sandbox.environment import SandboxEndpoints

from capserve.core.preflight import PreflightError
from capserve.core.spec import load_spec
from capserve.flows.campaign import campaign
from tests.flows.test_campaign_preflight import far_ends, spec_file

__all__ = ["far_ends"]  # the fixture, used by name


@pytest.fixture()
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
