"""`capserve status` and `capserve down` on a campaign left standing in the sandbox: the truth, read-only
first, then torn down twice (the second run still lists what it keeps), refusing a region that is wrong. The
campaign's compile-cache save failed: first, that it kept serving all the same (the rollout's promise)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from capserve_sandbox.environment import SandboxEndpoints, sandbox
from capserve_sandbox.kube import Fault, FaultKind

from capserve.cli import main
from capserve.core.report import CampaignReport
from capserve.core.rollout.service import leader_selector
from capserve.core.spec import CampaignSpec, load_spec
from capserve.flows.campaign import campaign

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kimi-k3-sandbox.yaml"


@dataclass
class Standing:
    """One sandbox campaign run without teardown, every try of its compile-cache save failing: the tests read it
    in file order, and the last ones take it down."""

    far_ends: SandboxEndpoints
    path: Path
    spec: CampaignSpec
    report: CampaignReport
    out: Path


@pytest.fixture(scope="module")
def standing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standing]:
    tmp = tmp_path_factory.mktemp("standing")
    with sandbox(served_model_name="kimi-k3") as far_ends:
        # Every try of the save Job fails (an S3 upload that cannot succeed): the Job runs out of its back-offs.
        far_ends.kube_server.inject(Fault(FaultKind.CRASH_LOOP, pod="vllm-*-cache-save-*", container="save"))
        path = tmp / "spec.yaml"
        path.write_text(EXAMPLE.read_text())
        spec = load_spec(path)
        report = campaign(spec, out_dir=tmp / "out", hub_endpoint=far_ends.hub)  # no teardown: the cluster stays up
        yield Standing(far_ends, path, spec, report, tmp / "out")


def status_json(path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = main(["status", str(path), "--json", *extra])
    return code, json.loads(capsys.readouterr().out)


def test_a_failed_compile_cache_save_leaves_the_server_serving_and_says_so(standing: Standing) -> None:
    written = json.loads((standing.out / "report.json").read_text())
    status = {s["name"]: s for s in written["stages"]}
    assert status["rollout"]["status"] == "completed" and status["evaluate"]["status"] == "completed"
    cache = written["rollout"]["compile_cache"]
    assert (cache["result"], cache["save"]) == ("miss", "failed") and "cache-save" in cache["save_detail"]
    assert written.get("teardown") is None  # nothing was torn down: the block keeps serving
    # The Service still selects the new server's leader, and that leader still runs.
    objects = standing.far_ends.kube_server.store.objects
    assert objects[("", "services", "capserve-k3-demo", "serving")]["spec"]["selector"] == leader_selector("vllm-blue")
    assert standing.report.rollout is not None and standing.report.rollout.name == "vllm-blue"
    assert ("", "pods", "capserve-k3-demo", "vllm-blue-0") in objects


def test_status_then_down_tell_the_truth(standing: Standing, capsys: pytest.CaptureFixture[str]) -> None:
    path, spec = standing.path, standing.spec
    code, status = status_json(path, capsys)
    assert code == 0
    region = status["region"]
    assert region in spec.capacity.regions
    stages = {row["stage"]: row for row in status["stages"]}
    for stage in ("acquire", "stage_weights", "bring_up", "weights_to_nodes", "rollout", "evaluate"):
        assert stages[stage]["status"] == "completed", stages[stage]
        assert len(stages[stage]["inputs_digest"]) == 64
    kinds = {row["kind"] for row in status["aws"]["rows"]}
    assert {"reservation", "s3-bucket", "eks-cluster", "eks-nodegroup", "vpc", "ecr-repository"} <= kinds, kinds
    assert status["kubernetes"]["looked"] is True
    nodes = [row for row in status["kubernetes"]["rows"] if row["kind"] == "node"]
    assert nodes and all("Ready=True" in n["state"] for n in nodes)
    assert any("8 GPUs" in n["state"] for n in nodes)
    assert status["prefect"]["looked"] is True
    runs = [r["state"] for r in status["prefect"]["rows"] if r["name"] == "campaign-k3-demo"]
    assert runs[0] == "Completed"  # newest first (the session's Prefect server also holds earlier tests' runs)

    # The same from the campaign's name and home region, as a table.
    capsys.readouterr()
    assert main(["status", "k3-demo", "--region", spec.capacity.regions[0]]) == 0
    table = capsys.readouterr().out
    assert "acquire" in table and "eks-cluster" in table and "completed" in table

    # A --region the record contradicts is refused: nothing deleted.
    other = next(r for r in ("us-east-2", "us-west-2") if r != region)
    capsys.readouterr()
    assert main(["down", str(path), "--region", other]) == 2
    assert f"says its resources are in {region}" in " ".join(capsys.readouterr().err.split())
    eks = boto3.client("eks", region_name=region)
    assert eks.list_clusters()["clusters"]

    # Down deletes, and lists what it keeps; a second down deletes nothing and still lists the reservation.
    for attempt in range(2):
        capsys.readouterr()
        assert main(["down", str(path)]) == 0, attempt
        out = capsys.readouterr().out
        assert "reservation/cr-" in out and "cannot be cancelled" in out
        for kept in ("s3-bucket/capserve-demo-weights", "campaign-record/s3://", "local-files/out/k3-demo",
                     "prefect/concurrency-limit/capserve-purchase-k3-demo"):
            assert kept in out, (attempt, kept)
        assert ("| deleted" in out) == (attempt == 0)
    assert eks.list_clusters()["clusters"] == []

    code, after = status_json(path, capsys)
    assert {row["kind"] for row in after["aws"]["rows"]} == {"reservation", "s3-bucket"}
    assert after["kubernetes"]["looked"] is False and "no cluster" in after["kubernetes"]["why"]


@pytest.mark.usefixtures("standing")  # the sandbox, with nothing of that name in it
def test_down_and_status_of_a_campaign_that_does_not_exist_refuse(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = yaml.safe_load(EXAMPLE.read_text())
    data["name"] = "k3-misspelt"
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data))

    assert main(["down", str(path), "--region", "us-east-2"]) == 1
    err = " ".join(capsys.readouterr().err.split())  # rich wraps long lines
    assert "nothing of campaign k3-misspelt was found" in err and "nothing was deleted" in err
    # A misspelt name is an answer (no such campaign there, exit 1), not a usage error: one line naming where.
    assert main(["status", "k3-misspelt", "--region", "us-east-2"]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert "no campaign named k3-misspelt was found: no record at s3://" in err and "(home region us-east-2)" in err
