"""Three campaigns started at once on one sandbox, each through purchase, rollout, evaluation and teardown.

On AWS each campaign's EKS cluster has its own Kubernetes API; the sandbox gives each its own too
(docs/sandbox.md §4.1), so their LeaderWorkerSets, LWS managers and GPU nodes never meet. The campaigns run as
three threads of this process (three people running ``capserve up`` at the same minute), on one sandbox; each
buys exactly one block and tears its cluster down when done. A minute or two on a quiet 2-core machine.
"""

from __future__ import annotations

import json
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

from capserve.core.spec import load_spec
from capserve.flows.campaign import campaign

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
        everyone_bought = threading.Barrier(len(NAMES), timeout=600)
        capacity_ext.SETTINGS.on_purchase = lambda _reservation: everyone_bought.wait()
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


@pytest.fixture(scope="module")
def three(far_ends: SandboxEndpoints, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Run the three campaigns at once; each one's report.json (or the error it ended with)."""
    folder = tmp_path_factory.mktemp("side-by-side")
    start = threading.Barrier(len(NAMES))
    errors: dict[str, BaseException] = {}

    def run(name: str) -> None:
        spec = load_spec(spec_path(folder, name))
        start.wait()
        try:
            campaign(spec, out_dir=folder / name, hub_endpoint=far_ends.hub, teardown_when_done=True)
        except BaseException as exc:  # noqa: BLE001 - reported by the test, with the report
            errors[name] = exc

    threads = [threading.Thread(target=run, args=(name,), name=f"campaign-{name}", daemon=True) for name in NAMES]
    for thread in threads:
        thread.start()
    for thread in threads:  # minutes on a quiet machine; a campaign still running after this is a failure
        thread.join(timeout=1500)
    assert not [t.name for t in threads if t.is_alive()], "a campaign was still running after 25 minutes"
    reports = {}
    for name in NAMES:
        path = folder / name / "report.json"
        reports[name] = json.loads(path.read_text()) if path.exists() else {}
        if name in errors:
            reports[name]["error"] = repr(errors[name])
    return reports


def test_three_campaigns_at_once_each_buy_one_block_serve_and_tear_down(three: dict[str, dict[str, Any]]) -> None:
    for name, report in three.items():
        stages = {s["name"]: s["status"] for s in report.get("stages", [])}
        assert "error" not in report and set(stages.values()) == {"completed"}, (name, report.get("error"), stages)
        assert report["rollout"]["kind"] == "LeaderWorkerSet" and report["evaluation"]["verdict"] == "pass", name
        assert report["teardown"]["remaining"] == [], name
    # One block each, and no other: AWS holds exactly the three reservations the reports name.
    bought = {r["lease"]["reservation_id"] for r in three.values()}
    assert len(bought) == len(NAMES) and {r["reservation_id"] for r in capacity_ext.reservations()} == bought


def test_each_campaign_had_its_own_kubernetes_and_its_deletion_took_it(three: dict[str, dict[str, Any]]) -> None:
    # Every cluster answered at its own API endpoint while it lived; all three are gone now, with their APIs.
    endpoints = {c.path.rsplit("/", 1)[-1] for c in eks_ext.calls("eks", "DescribeCluster")}
    assert {f"capserve-{name}" for name in NAMES} <= endpoints
    assert boto3.client("eks").list_clusters()["clusters"] == []
    assert eks_ext.cluster_kubes() == {}
