"""Preflight in the campaign, on the sandbox: every problem in one message, and nothing bought or created."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from capserve_sandbox.aws_ext import capacity as capacity_ext
from capserve_sandbox.environment import SandboxEndpoints, sandbox
from spec_changes import spec_file

from capserve.core.errors import PermanentError
from capserve.core.preflight import PreflightError
from capserve.core.spec import load_spec
from capserve.flows.campaign import campaign
from capserve.tasks.preflight import PreflightInputs, gather_facts, offering_in_region


@pytest.fixture
def far_ends() -> Iterator[SandboxEndpoints]:
    with sandbox(served_model_name="kimi-k3") as endpoints:
        yield endpoints


def test_the_sandbox_answers_offerings_like_ec2(far_ends: SandboxEndpoints) -> None:
    # moto's static offerings data: p6-b300 in us-west-2, not in us-east-2 (docs/preflight.md §1).
    assert offering_in_region.fn("us-west-2", "p6-b300.48xlarge") is None
    assert offering_in_region.fn("us-east-2", "p6-b300.48xlarge") == "p6-b300.48xlarge is not offered in us-east-2"


def test_facts_of_the_example_spec_pass(tmp_path: Path, far_ends: SandboxEndpoints) -> None:
    spec = load_spec(spec_file(tmp_path))
    inputs = PreflightInputs(out_dir=tmp_path / "out", staging_dir=tmp_path / "staging", hub_endpoint=far_ends.hub)
    facts = gather_facts(spec, inputs, bucket_names=(spec.weights.s3_bucket,))
    assert facts.offering_regions == {
        "us-east-2": "p6-b300.48xlarge is not offered in us-east-2", "us-west-2": None,
    }
    assert facts.download_bytes is not None and 0 < facts.download_bytes < 10**9  # the tiny K3-shaped checkpoint
    assert facts.present_bytes == 0 and facts.out_dir_problem is None


def test_a_bad_campaign_is_refused_with_every_problem_before_anything_is_bought_or_created(
    tmp_path: Path, far_ends: SandboxEndpoints, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CAPSERVE_TEST_UNSET_KEY", raising=False)
    spec = load_spec(spec_file(tmp_path, capacity__regions=["zz-north-1", "us-east-2"]))
    with pytest.raises(PreflightError) as caught:
        campaign(
            spec,
            out_dir=tmp_path / "out",
            hub_endpoint=far_ends.hub,
            endpoint_url=far_ends.inference,
            api_key_env="CAPSERVE_TEST_UNSET_KEY",
            teardown_when_done=True,
        )
    problems = caught.value.problems
    assert len(problems) == 3, problems
    assert "'zz-north-1' is not a region of this AWS partition" in problems[0]
    assert "no region of capacity.regions offers p6-b300.48xlarge" in problems[1]
    assert "CAPSERVE_TEST_UNSET_KEY is not set" in problems[2]

    # Nothing was bought, asked of the capacity APIs, or created.
    assert capacity_ext.calls() == []
    for region in ("us-east-2", "us-west-2"):
        assert boto3.client("s3", region_name=region).list_buckets()["Buckets"] == []
        assert boto3.client("eks", region_name=region).list_clusters()["clusters"] == []
        ec2 = boto3.client("ec2", region_name=region)
        assert ec2.describe_vpcs(Filters=[{"Name": "tag-key", "Values": ["capserve.io/campaign"]}])["Vpcs"] == []
    # The report says where it stopped.
    written = json.loads((tmp_path / "out" / "report.json").read_text())
    assert [(s["name"], s["status"]) for s in written["stages"]] == [("plan", "failed")]
    assert "PreflightError" in written["stages"][0]["detail"]


def test_an_image_tag_the_registry_lacks_is_refused_before_anything_is_bought(
    tmp_path: Path, far_ends: SandboxEndpoints
) -> None:
    spec = load_spec(spec_file(tmp_path, serving__image="vllm/vllm-openai:no-such-tag"))
    with pytest.raises(PermanentError, match="image resolve .*no-such-tag.*MANIFEST_UNKNOWN.*Check serving.image"):
        campaign(spec, out_dir=tmp_path / "out", hub_endpoint=far_ends.hub, teardown_when_done=True)

    assert capacity_ext.calls() == []
    written = json.loads((tmp_path / "out" / "report.json").read_text())
    assert [(s["name"], s["status"]) for s in written["stages"]] == [("plan", "failed")]


def test_a_command_line_vllm_would_refuse_never_reaches_acquire(tmp_path: Path, far_ends: SandboxEndpoints) -> None:
    # The spec reads fine; vLLM's parser (the snapshot the sandbox kubelet runs pods with) refuses the value.
    spec = load_spec(spec_file(tmp_path, serving__extra_args=["--block-size", "opensesame"]))
    with pytest.raises(PreflightError) as caught:
        campaign(spec, out_dir=tmp_path / "out", hub_endpoint=far_ends.hub, teardown_when_done=True)
    [problem] = caught.value.problems
    assert problem.startswith("serving.extra_args: vLLM 0.32.0") and "--block-size: invalid int value" in problem
    assert "opensesame" not in str(caught.value)

    assert capacity_ext.calls() == []  # nothing asked of the capacity APIs, nothing bought
    written = json.loads((tmp_path / "out" / "report.json").read_text())
    assert [(s["name"], s["status"]) for s in written["stages"]] == [("plan", "failed")]
    assert "opensesame" not in written["stages"][0]["detail"]
