"""The campaign flow end to end on the sandbox: every stage, the report contract, failures that tear down."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from capserve_sandbox.aws import iam_enforced
from capserve_sandbox.aws_ext import capacity as capacity_ext
from capserve_sandbox.aws_ext import iam_rules
from capserve_sandbox.environment import SandboxEndpoints, sandbox
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName, FlowRunFilterParentFlowRunId
from spec_changes import spec_file

from capserve.cli import main
from capserve.core.cluster.addons import AddonOptions, render_addons
from capserve.core.cluster.naming import ClusterNames
from capserve.core.errors import DoesNotFitError, PermanentError
from capserve.core.schedule import campaign_tag
from capserve.core.settings import RecordSettings
from capserve.core.spec import load_spec
from capserve.core.stages import Stage, StageStatus
from capserve.core.timeline import TimeFigures
from capserve.flows.campaign import campaign
from capserve.tasks.locations import record_ref
from capserve.tasks.record_store import load_record
from tests.flows.test_campaign_permissions import committed_policy, run_as_user

pytestmark = pytest.mark.slow  # whole campaigns, minutes: ranked before the other flows (tests/conftest.py)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kimi-k3-sandbox.yaml"
SMALL_LOAD = {"concurrency_levels": [2], "request_rates": [], "requests_per_stream": 2, "min_requests": 4}


@pytest.fixture
def far_ends() -> Iterator[SandboxEndpoints]:
    with sandbox(served_model_name="kimi-k3") as endpoints:
        yield endpoints


def tagged_vpcs(campaign_id: str, region: str) -> list[str]:
    ec2 = boto3.client("ec2", region_name=region)
    found = ec2.describe_vpcs(Filters=[{"Name": "tag:capserve.io/campaign", "Values": [campaign_id]}])["Vpcs"]
    return [v["VpcId"] for v in found]


def purchases() -> int:
    return len(capacity_ext.calls("purchase_capacity_block"))


COST_KEYS = {
    "currency", "upfront_fee", "paid_gpu_hours", "serving_gpu_hours", "utilisation", "lost_gpu_hours",
    "other_resources", "usd_per_million_output_tokens", "price_table_date",
}  # fmt: skip


def checked_cost(written: dict[str, Any]) -> dict[str, Any]:
    """report.json's cost object, after checking its keys (docs/cost.md §1) and that paid = serving + lost."""
    cost: dict[str, Any] = written["cost"]
    assert set(cost) >= COST_KEYS
    lost = cost["lost_gpu_hours"]
    # Hours are GPU-minutes / 60 to 4 decimals: back to whole GPU-minutes, the sum is exact.
    assert round(cost["paid_gpu_hours"] * 60) == round(cost["serving_gpu_hours"] * 60) + sum(
        round(hours * 60) for hours in lost.values()
    )
    assert cost["paid_gpu_minutes"] == cost["serving_gpu_minutes"] + sum(cost["lost_gpu_minutes"].values())
    assert all(isinstance(r["name"], str) and set(r) == {"name", "cost"} for r in cost["other_resources"])
    return cost


@pytest.fixture
def enforced(far_ends: SandboxEndpoints, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """moto enforcing IAM, the test's calls made as a user holding exactly the generated policy
    (docs/iam/controller.json, its bucket filled in; docs/iam/README.md §5). The user, its policy and keys are
    made first, by the sandbox's administrator."""
    run_as_user(committed_policy(load_spec(EXAMPLE)), monkeypatch)
    monkeypatch.delenv("AWS_SESSION_TOKEN")  # an IAM user's long-term keys carry no session token
    # The test's own reads (boto3.client) go as that user too: boto3's default session keeps the credentials it
    # first found, the administrator's, which stop working.
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    with iam_enforced():
        yield


@pytest.mark.usefixtures("enforced")  # a policy short of one action: tests/flows/test_campaign_permissions.py
def test_campaign_as_the_iam_policy_runs_every_stage_gated_before_traffic_keeps_the_report_contract_and_leaves_nothing(
    tmp_path: Path, far_ends: SandboxEndpoints
) -> None:
    # The client's lag does not invalidate the run on a machine shared by other test processes: the test's own
    # condition, so that it expects the one verdict (the evaluation's honesty is tests/eval's).
    load = {**SMALL_LOAD, "max_loop_lag_p99_ms": 10_000.0}
    # Latency gates no endpoint meets: judged on a load profile they would fail the verdict and serve nothing.
    spec = load_spec(spec_file(tmp_path, evaluation__load=load, evaluation__gates={"p95_ttft_ms": 0.001}))
    assert committed_policy(spec) == committed_policy(load_spec(EXAMPLE))  # the policy the user holds
    result = campaign(spec, out_dir=tmp_path / "out", hub_endpoint=far_ends.hub, teardown_when_done=True)

    written = json.loads((tmp_path / "out" / "report.json").read_text())
    assert written == json.loads(json.dumps(result.to_json()))
    assert written["campaign"] == "k3-demo"
    assert [(s["name"], s["status"]) for s in written["stages"]] == [
        (name, "completed")
        for name in (
            "plan",
            "acquire",
            "stage_weights",
            "stage_image",
            "bring_up",
            "weights_to_nodes",
            "rollout",
            "evaluate",
            "teardown",
        )
    ]
    assert all(s["ended_at"] >= s["started_at"] for s in written["stages"])
    assert (written["plan"]["nodes"], written["plan"]["tensor_parallel"]) == (1, 8)
    lease = written["lease"]
    assert set(lease) == {
        "provider",
        "region",
        "availability_zone",
        "reservation_id",
        "start",
        "end",
        "instance_type",
        "instance_count",
        "upfront_fee",
        "currency",
    }
    assert sum(o["chosen"] for o in written["offers_considered"]) == 1
    assert all(o["reason"] for o in written["offers_considered"])
    assert written["weights"]["verified"] is True
    join = written["cluster"].pop("node_join")
    assert written["cluster"] == {"kind": "eks", "name": "capserve-k3-demo", "nodes_ready": 1, "gpus_allocatable": 8}
    assert join["predicted_s"] == TimeFigures().launch_and_join_s and join["measured_s"] > 0, join
    [job] = written["node_staging"]["jobs"]
    assert job["files"] == written["weights"]["files"] and job["bytes"] > 0
    # Applied server-side with an EKS token (the Job is gone now: teardown deletes the campaign's workloads).
    applies = [
        r
        for r in far_ends.kube_server.requests
        if r.method == "PATCH" and r.path.split("?")[0].endswith(f"/namespaces/capserve-k3-demo/jobs/{job['job']}")
    ]
    assert applies and applies[0].content_type == "application/apply-patch+yaml" and applies[0].auth == "eks"
    # The rollout served the plan in the cluster; the evaluation reached that pod through a port-forward.
    rollout = written["rollout"]
    assert set(rollout) >= {
        "kind", "name", "strategy", "nodes", "image", "args", "ready_after_s",
        "endpoint_access", "compile_cache", "rolled_back",
    }  # fmt: skip
    assert (rollout["kind"], rollout["name"], rollout["strategy"], rollout["nodes"]) == (
        "LeaderWorkerSet", "vllm-blue", "initial", 1,
    )  # fmt: skip
    # The pods pulled the campaign's ECR copy by the upstream's digest, in the block's region, and the report
    # says how long that pull took (the kubelet's Pulled event; the sandbox models 20 GB at 250 MB/s).
    image = written["image"]
    assert (image["source"], image["region"], image["copied"]) == (spec.serving.image, lease["region"], True)
    registry = f"123456789012.dkr.ecr.{lease['region']}.amazonaws.com"
    assert image["image"] == f"{registry}/{image['repository']}@{image['digest']}"
    assert rollout["image"] == image["image"] and rollout["rolled_back"] is False
    assert rollout["image_pull"]["image"] == image["image"] and rollout["image_pull"]["seconds"] == 80.0
    # Pulled while the weights were copied to the node (the pre-pull Job), not by the vLLM pod after them.
    assert rollout["image_pull"]["pod"].startswith("image-prepull-0")
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert image["digest"] in markdown and "Image pull: 80.0 s (80.0 s including waiting)" in markdown
    assert "--tensor-parallel-size" in rollout["args"] and "--api-key=$(VLLM_API_KEY)" in rollout["args"]
    assert rollout["endpoint_access"] == "port-forward" and "127.0.0.1" in rollout["endpoint_note"]
    assert rollout["compile_cache"]["result"] == "miss" and rollout["compile_cache"]["saved_jobs"] == 1
    assert rollout["compile_cache"]["save"] == "saved"
    assert "simulated vLLM 0.32" in rollout["server"]
    assert written["evaluation"]["url"].startswith("http://127.0.0.1:")
    assert any("Server: the sandbox kubelet" in note for note in written["evaluation"]["notes"])
    # The gate before traffic is smoke and quality only (docs/evaluation.md §8): the load profile runs on demand
    # against the serving endpoint, so those gates hold back neither the verdict nor the serving (the ledger's
    # serving begins at the ready endpoint, below).
    evaluation = written["evaluation"]
    assert evaluation["verdict"] == "pass", evaluation["gates"]
    assert evaluation["load"] is None and evaluation["plots"] == []
    assert not any("@" in gate["name"] for gate in evaluation["gates"])  # no load level judged
    assert any("capserve eval --profile load" in note for note in evaluation["notes"])
    # Every object applied, in order, as YAML; the API-key Secret with its value redacted.
    manifests = sorted(p.name for p in (tmp_path / "out" / "manifests").iterdir())
    assert manifests[0].startswith("001-CustomResourceDefinition-")
    assert [m.split("-", 1)[1] for m in manifests[-4:]] == [
        "Secret-capserve-k3-demo-serving-api-key.yaml",
        "LeaderWorkerSet-capserve-k3-demo-vllm-blue.yaml",
        "Service-capserve-k3-demo-serving.yaml",
        "Job-capserve-k3-demo-vllm-blue-cache-save-n0.yaml",  # saved once the Service points at the server
    ]
    secret = yaml.safe_load(next((tmp_path / "out" / "manifests").glob("*-Secret-*-serving-api-key.yaml")).read_text())
    # LWS as its release installs it: the webhooks, their Service and the Secret the rotator fills.
    assert {"MutatingWebhookConfiguration-lws-mutating-webhook-configuration.yaml",
            "ValidatingWebhookConfiguration-lws-validating-webhook-configuration.yaml",
            "Service-lws-system-lws-webhook-service.yaml",
            "Secret-lws-system-lws-webhook-server-cert.yaml"} <= {m.split("-", 1)[1] for m in manifests}
    assert secret["data"] == {"api-key": "<redacted>"}
    assert written["teardown"]["reason"] == "campaign-finished" and written["teardown"]["remaining"] == []
    assert tagged_vpcs("k3-demo", lease["region"]) == []
    assert boto3.client("eks", region_name=lease["region"]).list_clusters()["clusters"] == []
    # The pods' S3 calls (weights staging, compile-cache restore and save) were made as the node role.
    node_role = ClusterNames(campaign_id=spec.campaign_id).node_role
    assert {arn.rsplit("/", 1)[-1] for arn in iam_rules.ISSUED} == {node_role}
    assert purchases() == 1
    assert (tmp_path / "out" / "timeline.png").read_bytes().startswith(b"\x89PNG")
    assert "## Teardown" in (tmp_path / "out" / "report.md").read_text()
    assert [e["event"] for e in written["events"]] == [
        "capserve.capacity.purchased", "capserve.weights.staged", "capserve.cluster.ready", "capserve.rollout.ready",
        f"capserve.evaluation.{ {'pass': 'passed', 'invalid': 'invalid'}[written['evaluation']['verdict']] }",
        "capserve.teardown.done",
    ]
    assert written["events"][1]["revision"] == written["weights"]["revision_sha"]
    # The ledger of the block: AWS's fee, a 24 h block of 8 GPUs on AWS's clock, every minute with one cause.
    cost = checked_cost(written)
    assert cost["upfront_fee"] == lease["upfront_fee"] > 0 and cost["currency"] == "USD"
    assert cost["paid_gpu_hours"] == 24 * 8 and cost["block_start"] == lease["start"]
    assert cost["serving_started_by"] == "rollout ready → teardown began"
    assert cost["biggest_loss"]["cause"] == "idle"  # torn down when done: the rest of the block is paid for nothing
    assert cost["price_table_date"] and "cost.price_list_api is off" in cost["price_source"]
    assert {r["name"] for r in cost["other_resources"]} >= {"EKS control plane"}
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert "## Cost" in markdown and "![reservation timeline](cost_timeline.png)" in markdown
    for png in ("cost_timeline.png", "cost_waterfall.png"):
        assert (tmp_path / "out" / png).read_bytes().startswith(b"\x89PNG")
    assert written["offers_forecast"] and all(0 < f["expected_utilisation"] < 1 for f in written["offers_forecast"])

    # A re-run finds the reservation by its tag: nothing is bought twice.
    again = campaign(spec, out_dir=tmp_path / "again", hub_endpoint=far_ends.hub, teardown_when_done=True)
    assert again.acquire is not None and again.acquire.lease is not None
    assert again.acquire.lease.reservation_id == lease["reservation_id"]
    assert purchases() == 1
    # ... and skips staging the weights: same inputs, and the published checkpoint still verifies in S3.
    first_weights = next(s for s in written["stages"] if s["name"] == "stage_weights")
    [skipped] = [s for s in again.stages if s.name is Stage.STAGE_WEIGHTS]
    assert skipped.status is StageStatus.SKIPPED
    assert skipped.detail == f"skipped: unchanged since {first_weights['ended_at'][:19]}+00:00"
    assert again.weights is not None and again.weights.manifest_uri == written["weights"]["manifest_uri"]
    assert (again.weights.downloaded_bytes, again.weights.uploaded_bytes) == (0, 0)
    assert again.status_of(Stage.WEIGHTS_TO_NODES) is StageStatus.COMPLETED
    # The second reservation's first boot is warm: the compile cache saved by the first is restored.
    assert again.rollout is not None and again.rollout.compile_cache["result"] == "hit"
    assert again.rollout.startup_budget_s < rollout["startup_budget_s"]

    # The campaign record holds the spec (so a scheduled run can load it from the id and region alone),
    # each stage with its times, inputs digest and outputs, the lease and what teardown kept.
    record = load_record.fn(record_ref(spec, RecordSettings()))
    assert record is not None and record.load_spec() == spec and record.lease is not None
    assert record.lease.reservation_id == lease["reservation_id"]
    entries = record.stages
    assert all(entries[s].status is StageStatus.COMPLETED for s in (Stage.PLAN, Stage.ACQUIRE, Stage.TEARDOWN))
    weights = entries[Stage.STAGE_WEIGHTS]
    assert weights.inputs_digest and weights.outputs["revision_sha"] == written["weights"]["revision_sha"]
    assert weights.started_at is not None and weights.ended_at is not None and weights.ended_at >= weights.started_at
    assert {k.resource for k in record.kept} >= {f"s3-bucket/{spec.weights.s3_bucket}"}


def test_a_failed_bring_up_tears_down_what_it_made_and_says_why_in_subflows_named_after_stage_and_campaign(
    tmp_path: Path, far_ends: SandboxEndpoints
) -> None:
    spec = load_spec(spec_file(tmp_path, name="k3-story"))  # a campaign of its own on the session's server
    controller = next(
        m["metadata"]["name"]
        for m in render_addons(AddonOptions(campaign_id=spec.campaign_id))
        if m["kind"] == "Deployment"
    )
    far_ends.kube_server.set_outcome("fail", kind="Deployment", name=controller)

    with pytest.raises(PermanentError, match=controller):
        campaign(spec, out_dir=tmp_path, hub_endpoint=far_ends.hub)

    written = json.loads((tmp_path / "report.json").read_text())
    status = {s["name"]: s["status"] for s in written["stages"]}
    assert status["bring_up"] == "failed" and status["teardown"] == "completed"
    assert written["teardown"]["reason"] == "failed-stage"
    assert tagged_vpcs(spec.campaign_id, written["lease"]["region"]) == []
    cost = checked_cost(written)
    assert cost["serving_gpu_hours"] == 0 and cost["serving_started_by"].startswith("nothing served")

    # Every subflow of the run is named after its stage and campaign and carries the campaign's tag.
    tag = campaign_tag(spec.campaign_id)
    with get_client(sync_client=True) as client:
        [top] = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=["campaign-k3-story"]))
        )
        subflows = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[top.id]))
        )
        flow_names = {flow.id: flow.name for flow in client.read_flows()}
    assert tag in top.tags
    assert sorted((run.name, tag in run.tags) for run in subflows) == sorted(
        (f"{flow_names[run.flow_id]}-k3-story", True) for run in subflows
    )
    assert {run.name for run in subflows} >= {"stage-weights-k3-story", "bring-up-k3-story", "teardown-k3-story"}


def test_a_reservation_that_has_not_started_gets_weights_staged_and_waits(
    tmp_path: Path, far_ends: SandboxEndpoints, monkeypatch: pytest.MonkeyPatch
) -> None:
    capacity_ext.SETTINGS.auto_activate = False  # the block starts at the next 11:30 UTC, hours away
    # ... how many hours depends on when the test runs: acquire must not wait for it whatever the hour
    # (by default it waits for a start less than 6 h away).
    monkeypatch.setenv("CAPSERVE_CAPACITY__MAX_ACTIVATION_WAIT_SECONDS", "0")

    written = campaign(load_spec(EXAMPLE), out_dir=tmp_path, hub_endpoint=far_ends.hub).to_json()

    stages = {s["name"]: s for s in written["stages"]}
    assert stages["stage_weights"]["status"] == "completed"
    assert stages["bring_up"]["status"] == "skipped" and "run the campaign again" in stages["bring_up"]["detail"]
    assert "cluster" not in written and "teardown" not in written


def test_a_reservation_too_small_for_the_plan_stops_before_anything_is_bought(tmp_path: Path) -> None:
    path = spec_file(tmp_path, capacity__instance_type="p5en.48xlarge")  # K3 needs two of these

    with pytest.raises(DoesNotFitError, match="set capacity.instance_count to 2"):
        campaign(load_spec(path), out_dir=tmp_path / "out")

    written = json.loads((tmp_path / "out" / "report.json").read_text())
    assert [(s["name"], s["status"]) for s in written["stages"]] == [("plan", "failed")]
    assert "instance_count" in written["stages"][0]["detail"]
    assert "plan" not in written
    # Nothing bought, nothing paid: a ledger of 0 (no division by zero).
    cost = checked_cost(written)
    assert (cost["upfront_fee"], cost["paid_gpu_hours"], cost["utilisation"]) == (0.0, 0.0, None)


def test_up_with_a_bad_spec_exits_2_and_names_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = spec_file(tmp_path, capacity__instance_count=0)

    assert main(["up", str(path), "--sandbox", "--in-process"]) == 2
    err = capsys.readouterr().err
    assert "capacity.instance_count" in err and "greater than or equal to 1" in err
