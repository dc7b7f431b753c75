"""Three campaigns started at once on one sandbox, each through purchase, rollout, evaluation and teardown.

On AWS each campaign's EKS cluster has its own Kubernetes API; the sandbox gives each its own too
(docs/sandbox.md §4.1), so their LeaderWorkerSets, LWS managers and GPU nodes never meet. The campaigns run as
three processes (three people running ``capserve up`` at the same minute) against one sandbox in this one; each
buys exactly one block and tears its cluster down when done. A few minutes on a quiet 2-core machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from capserve_sandbox.aws_ext import capacity as capacity_ext
from capserve_sandbox.aws_ext import eks as eks_ext
from capserve_sandbox.environment import SandboxEndpoints, sandbox
from prefect.settings import PREFECT_API_URL

pytestmark = [pytest.mark.server, pytest.mark.slow]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kimi-k3-sandbox.yaml"
NAMES = ("side-1", "side-2", "side-3")


@pytest.fixture(scope="module")
def far_ends() -> Iterator[SandboxEndpoints]:
    """One sandbox for the three. Its AWS moves its one clock to a bought block's start at the first look (the
    demo would otherwise wait a day), after which no block of that day is offered any more: each purchase is
    answered once all three have bought, as when three people buy in the same minute, so that all three blocks
    start on the same day (the contested offers are searched again and bought before anyone looks)."""
    with sandbox(served_model_name="kimi-k3") as endpoints:
        # Under the client's 60 s read timeout (capserve/tasks/aws.py): a broken barrier lets every purchase answer.
        everyone_bought = threading.Barrier(len(NAMES), timeout=50)

        def hold(_reservation: str) -> None:
            with contextlib.suppress(threading.BrokenBarrierError):
                everyone_bought.wait()

        capacity_ext.SETTINGS.on_purchase = hold
        yield endpoints


def spec_path(folder: Path, name: str) -> Path:
    """The demo spec under another name, with a small load (the evaluation's honesty is tests/eval's) and room to
    search again when another campaign bought the offer first."""
    data = yaml.safe_load(EXAMPLE.read_text())
    data["name"] = name
    # Blocks of the first day only (one per zone): a block a day later would move the sandbox's one clock past the
    # others' ends (far_ends).
    data["capacity"]["latest_end"] = "now+3d"
    data["evaluation"]["load"] = {"concurrency_levels": [1], "request_rates": [], "requests_per_stream": 2,
                                  "min_requests": 2, "max_loop_lag_p99_ms": 10_000.0}
    data["settings"] = {"capacity": {"offer_searches": len(NAMES)}}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


# One campaign per process, as three people's `capserve up` (or a worker's flow runs) are: a campaign keeps its
# endpoint's API key in its own process's environment while it evaluates (capserve/tasks/rollout/access.py).
RUN = (
    "import sys; from pathlib import Path; from capserve.core.spec import load_spec; "
    "from capserve.flows.campaign import campaign; "
    "campaign(load_spec(Path(sys.argv[1])), out_dir=Path(sys.argv[2]), hub_endpoint=sys.argv[3], "
    "teardown_when_done=True)"
)


@pytest.fixture(scope="module")
def three(far_ends: SandboxEndpoints, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Start the three campaigns at once, each in its own process against this process's sandbox and Prefect
    server; each one's report.json, with its exit code and, if it failed, its log's tail."""
    folder = tmp_path_factory.mktemp("side-by-side")
    env = {**os.environ, "PREFECT_API_URL": str(PREFECT_API_URL.value())}
    runs: dict[str, subprocess.Popen[bytes]] = {}
    logs = {name: (folder / f"{name}.log").open("wb") for name in NAMES}
    try:
        for name in NAMES:
            command = [sys.executable, "-c", RUN, str(spec_path(folder, name)), str(folder / name), far_ends.hub]
            runs[name] = subprocess.Popen(command, env=env, stdout=logs[name], stderr=subprocess.STDOUT)
        for run in runs.values():  # minutes on a quiet machine; one still running after this is a failure
            try:
                run.wait(timeout=1500)
            except subprocess.TimeoutExpired:
                run.kill()
                run.wait()
    finally:
        for name, run in runs.items():
            if run.poll() is None:
                run.kill()
                run.wait()
            logs[name].close()
    reports = {}
    for name, run in runs.items():
        path = folder / name / "report.json"
        reports[name] = json.loads(path.read_text()) if path.exists() else {}
        reports[name]["exit_code"] = run.returncode
        if run.returncode != 0:
            reports[name]["log_tail"] = (folder / f"{name}.log").read_text(errors="replace")[-3000:]
    return reports


def test_three_campaigns_at_once_each_buy_one_block_serve_and_tear_down(three: dict[str, dict[str, Any]]) -> None:
    for name, report in three.items():
        stages = {s["name"]: s["status"] for s in report.get("stages", [])}
        failed = (name, stages, report.get("log_tail"))
        assert report["exit_code"] == 0 and set(stages.values()) == {"completed"}, failed
        assert report["rollout"]["kind"] == "LeaderWorkerSet" and report["evaluation"]["verdict"] == "pass", name
        assert report["teardown"]["remaining"] == [], name
    # One block each, and no other: AWS holds exactly the three reservations the reports name.
    bought = {r["lease"]["reservation_id"] for r in three.values()}
    assert len(bought) == len(NAMES) and {r["reservation_id"] for r in capacity_ext.reservations()} == bought


def test_each_campaign_had_its_own_kubernetes_and_its_deletion_took_it(
    far_ends: SandboxEndpoints, three: dict[str, dict[str, Any]]
) -> None:
    # The sandbox's first Kubernetes served one campaign's cluster and saw nothing of the other two (on a busy
    # machine a campaign may end before another creates its cluster: the first Kubernetes is then made new for it,
    # its record begun anew, so what it saw is its last cluster's).
    paths = " ".join(r.path for r in far_ends.kube_server.requests)
    assert len(set(re.findall(r"/namespaces/(capserve-side-\d)/", paths))) == 1
    # All three clusters are gone now, and their Kubernetes with them.
    assert boto3.client("eks").list_clusters()["clusters"] == []
    assert eks_ext.cluster_kubes() == {}


def test_each_campaign_leaves_its_own_evaluation_and_weights_artifacts(three: dict[str, dict[str, Any]]) -> None:
    """Prefect shows the latest artifact per key: the three evaluated the same model and staged the same repo, so
    each one's summary, gates and weights plan stay on the Artifacts page only when the key holds the campaign."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    wanted = [f"{name}-{what}" for name in NAMES for what in
              ("eval-kimi-k3-summary", "eval-kimi-k3-gates", "weights-plan-capserve-sandbox-tiny-k3")]
    with get_client(sync_client=True) as client:
        latest = client.read_latest_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=wanted)))
    assert sorted(a.key for a in latest if a.key) == sorted(wanted)
    summaries = {a.key: str(a.data) for a in latest if a.key and a.key.endswith("-summary")}
    assert all("pass" in text.lower() for text in summaries.values()), summaries
