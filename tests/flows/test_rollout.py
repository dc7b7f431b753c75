"""The rollout stage in whole campaigns on the sandbox: a failure tears down, a failed second rollout rolls back
(the HyperPod example's whole path is tests/flows/test_rehearse.py's, a failed compile-cache save
tests/flows/test_status_down.py's, on the campaign it leaves standing)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
import yaml
from capserve_sandbox.aws_ext import capacity as capacity_ext
from capserve_sandbox.environment import SandboxEndpoints, sandbox
from capserve_sandbox.kube import Fault, FaultKind

from capserve.core.errors import PermanentError
from capserve.core.preflight import PreflightError
from capserve.core.rollout.start_history import StartHistory, history_uri, shape_key
from capserve.core.settings import RecordSettings
from capserve.core.spec import CampaignSpec, load_spec
from capserve.flows.campaign import campaign
from capserve.tasks.locations import record_ref
from capserve.tasks.record_store import load_record
from tests.flows.test_campaign import SMALL_LOAD, spec_file, tagged_vpcs

pytestmark = pytest.mark.slow  # whole campaigns, minutes: ranked before the other flows (tests/conftest.py)


@pytest.fixture
def far_ends() -> Iterator[SandboxEndpoints]:
    with sandbox(served_model_name="kimi-k3") as endpoints:
        yield endpoints


def test_a_failed_second_rollout_rolls_back_to_the_first(tmp_path: Path, far_ends: SandboxEndpoints) -> None:
    first_spec = load_spec(spec_file(tmp_path, evaluation__load=SMALL_LOAD))
    first = campaign(first_spec, out_dir=tmp_path / "first", hub_endpoint=far_ends.hub)
    assert first.rollout is not None and first.rollout.strategy == "initial"
    # The campaign's endpoint key is only in the cluster's Secret: no file of the run holds it.
    secret = far_ends.kube_server.store.objects[("", "secrets", "capserve-k3-demo", "serving-api-key")]
    key = base64.b64decode(secret["data"]["api-key"])
    assert len(key) >= 32
    assert [p for p in (tmp_path / "first").rglob("*") if p.is_file() and key in p.read_bytes()] == []

    # The second configuration's image is copied to ECR before the block, but its pods cannot pull it (a tag
    # the upstream lacks fails earlier, in the image stage). One p6-b300 holds one K3: recreate.
    broken = "vllm/vllm-openai:v0.33.0"
    mirrored = "*/capserve/k3-demo/vllm/vllm-openai@*"
    far_ends.kube_server.inject(Fault(FaultKind.IMAGE_PULL, image=mirrored, pod="vllm-green-*"))
    second_spec = load_spec(spec_file(tmp_path, evaluation__load=SMALL_LOAD, serving__image=broken))
    second = campaign(second_spec, out_dir=tmp_path / "second", hub_endpoint=far_ends.hub, teardown_when_done=True)

    written = json.loads((tmp_path / "second" / "report.json").read_text())
    status = {s["name"]: s for s in written["stages"]}
    assert status["rollout"]["status"] == "stopped" and "rolled back to revision" in status["rollout"]["detail"]
    rollout = written["rollout"]
    assert rollout["rolled_back"] is True and rollout["revision"] == first.rollout.revision
    assert rollout["image"] == first.rollout.image and rollout["name"] == "vllm-blue"
    failed, undone = rollout["attempts"]
    assert (failed["name"], failed["strategy"], failed["ok"], failed["trouble"]) == (
        "vllm-green",
        "recreate",
        False,
        "image-pull",
    )
    assert "serving.image" in failed["failure"]
    assert (undone["name"], undone["rollback"], undone["ok"]) == ("vllm-blue", True, True)
    # What serves after the rollback is what the evaluation measured.
    assert status["evaluate"]["status"] == "completed" and second.evaluation is not None
    assert "Rolled back" in (tmp_path / "second" / "report.md").read_text()
    record = load_record.fn(record_ref(second_spec, RecordSettings()))
    assert record is not None and record.last_good_rollout is not None
    assert record.last_good_rollout.config is not None
    assert record.last_good_rollout.config.revision == first.rollout.revision
    assert written["teardown"]["reason"] == "campaign-finished"
    # Both starts of the first configuration are kept for its next rollout: the first campaign's cold one and
    # the rollback's warm one (it found the compile cache the first saved), each as vLLM's log measured it.
    assert first.rollout.startup is not None and rollout["startup"]["warm"] is True
    uri = history_uri(second_spec.weights.s3_bucket, second_spec.weights.s3_prefix,
                      shape_key(record.last_good_rollout.config, second_spec.weights.node_target))
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    kept = StartHistory.model_validate_json(boto3.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read())
    assert kept.cold is not None and kept.warm is not None
    assert (kept.cold.to_listening_s, kept.cold.campaign_id) == (
        first.rollout.startup.measured.to_listening_s, first_spec.campaign_id
    )
    assert kept.warm.to_listening_s == rollout["startup"]["measured"]["to_listening_s"]


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def example(name: str, tmp_path: Path) -> CampaignSpec:
    """An example spec as shipped, with the small load of the other campaign tests, whose client lag does not
    invalidate the run on a test machine shared by other test processes (these tests prove the rollout)."""
    data = yaml.safe_load((EXAMPLES / name).read_text())
    data["evaluation"]["load"] = {**SMALL_LOAD, "max_loop_lag_p99_ms": 10_000.0}
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return load_spec(path)


def test_the_two_node_example_rolls_out_one_group_of_two_with_each_nodes_experts(
    tmp_path: Path, far_ends: SandboxEndpoints
) -> None:
    spec = example("kimi-k3-2node-sandbox.yaml", tmp_path)
    report = campaign(spec, out_dir=tmp_path / "out", hub_endpoint=far_ends.hub, teardown_when_done=True)

    assert report.plan is not None and (report.plan.nodes, report.plan.expert_parallel) == (2, 16)
    assert report.rollout is not None and report.rollout.nodes == 2 and not report.rollout.rolled_back
    workload = yaml.safe_load(next((tmp_path / "out" / "manifests").glob("*-LeaderWorkerSet-*")).read_text())
    group = workload["spec"]["leaderWorkerTemplate"]
    assert group["size"] == 2
    # Each pod is pinned to the node staged with its own experts (and its init container checks the marker).
    required = "requiredDuringSchedulingIgnoredDuringExecution"
    hosts = {
        role: group[f"{role}Template"]["spec"]["affinity"]["nodeAffinity"][required]["nodeSelectorTerms"][0][
            "matchExpressions"
        ][0]["values"]
        for role in ("leader", "worker")
    }
    assert report.node_staging is not None
    staged = {job.node: job.kube_node for job in report.node_staging.jobs}
    assert hosts == {"leader": [staged[0]], "worker": [staged[1]]}
    assert report.evaluation is not None and report.evaluation.verdict == "pass"
    assert report.teardown is not None and report.teardown.remaining == ()


def test_the_two_node_example_from_an_image_without_the_efa_stack_is_refused_before_anything_is_bought(
    tmp_path: Path, far_ends: SandboxEndpoints
) -> None:
    spec = example("kimi-k3-2node-sandbox.yaml", tmp_path)
    spec = spec.model_copy(update={"serving": spec.serving.model_copy(update={"image": "vllm/vllm-openai:kimi-k3"})})

    with pytest.raises(PreflightError) as caught:
        campaign(spec, out_dir=tmp_path / "out", hub_endpoint=far_ends.hub, teardown_when_done=True)

    [problem] = caught.value.problems
    assert problem.startswith("serving.image: vllm/vllm-openai:kimi-k3 lacks aws-ofi-nccl (libnccl-net*.so) and "
                              "libfabric (libfabric.so)")
    assert capacity_ext.calls() == []  # nothing asked of the capacity APIs, nothing bought


def test_a_two_node_server_whose_nccl_falls_back_to_sockets_fails_before_the_evaluation_and_tears_down(
    tmp_path: Path, far_ends: SandboxEndpoints
) -> None:
    # The image has no aws-ofi-nccl plugin: NCCL talks between the two nodes over TCP sockets. NCCL says so at
    # communicator init; the server would listen only an hour later (its load and compile).
    far_ends.kube_server.inject(Fault(FaultKind.NO_EFA_PLUGIN, pod="vllm-*", container="vllm"))
    far_ends.kube_server.inject(Fault(FaultKind.SLOW_START, pod="vllm-*", container="vllm", seconds=3600))
    spec = example("kimi-k3-2node-sandbox.yaml", tmp_path)

    socket = "transport: pod vllm-blue-0 container vllm: NCCL uses network Socket"
    with pytest.raises(PermanentError, match=socket) as failed:
        campaign(spec, out_dir=tmp_path / "out", hub_endpoint=far_ends.hub)
    assert "min into the start, before the server was ready" in str(failed.value)

    written = json.loads((tmp_path / "out" / "report.json").read_text())
    status = {s["name"]: s for s in written["stages"]}
    assert status["rollout"]["status"] == "failed" and "aws-ofi-nccl" in status["rollout"]["detail"]
    assert "evaluate" not in status
    # A failed first rollout tears the campaign down (the startup probe's own diagnosis, the other way a first
    # rollout fails, is tests/sandbox/test_rollout_tasks.py's, and the budget's rendering tests/unit's).
    assert written["teardown"]["reason"] == "failed-stage"
    assert tagged_vpcs(spec.campaign_id, written["lease"]["region"]) == []
