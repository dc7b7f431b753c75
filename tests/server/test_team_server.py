"""A team's Prefect server: PostgreSQL for the database, Redis for the concurrency leases (tests/server/conftest.py).

Two campaigns started at once from the campaign deployment, as two people clicking Run in the UI, none given an
output folder, each through purchase, rollout, evaluation and teardown: each buys exactly one block, each writes
its report to its own ``out/<campaign>``, and they run side by side. Identical specs rank the same offer first;
the sandbox holds the first two purchases until both have arrived (``ContestedPurchases``), so that one buys it
and the other meets AWS's ``InvalidCapacityBlockOfferingId.NotFound`` every time, searches again and buys another
block. On AWS each campaign's EKS cluster has its own Kubernetes API; the sandbox gives each its own too
(docs/sandbox.md §4.1), so their LeaderWorkerSets, LWS managers and GPU nodes never meet; each tears its cluster
down when done, and each one's evaluation and weights artifacts stay on the Artifacts page under its own key.
(The window test, tests/server/test_window_on_a_server.py, runs on this server too.) A few minutes on a quiet
2-core machine.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
import redis
import yaml
from capserve_sandbox.aws_ext import capacity as capacity_ext
from capserve_sandbox.aws_ext import eks as eks_ext
from moto.ec2.exceptions import EC2ClientError
from moto.ec2.responses import EC2Response
from prefect.client.schemas.objects import FlowRun, StateType
from prefect.deployments import run_deployment
from team_backends import TeamServer
from test_window_on_a_server import World, wait_final, world_on

from capserve.core.spec import load_spec

pytestmark = [pytest.mark.server, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "kimi-k3-sandbox.yaml"
# The fewest that prove contention: one buys the offer both chose, the other meets NotFound and buys again.
CAMPAIGNS = ["team-1", "team-2"]
PLAYED_WITHIN_S = 1500  # purchase to teardown, side by side; minutes on a machine loaded by other tests


@pytest.fixture(scope="module")
def world(team_server: TeamServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with world_on(team_server.server, tmp_path_factory.mktemp("team")) as world:
        yield world


def _spec(name: str, folder: Path) -> dict[str, Any]:
    """The demo spec under another name, bought without a person (at or under the threshold), with a small load
    (the evaluation's honesty is tests/eval's) and room to search again when the other campaign bought the offer
    first."""
    data = yaml.safe_load(EXAMPLE.read_text())
    data["name"] = name
    data["capacity"]["approval_threshold_usd"] = data["capacity"]["max_upfront_fee_usd"]
    # Blocks of the first day only (one per zone): a block a day later would move the sandbox's one clock past the
    # other's end (``everyone_bought`` below).
    data["capacity"]["latest_end"] = "now+3d"
    data["evaluation"]["load"] = {"concurrency_levels": [1], "request_rates": [], "requests_per_stream": 2,
                                  "min_requests": 2, "max_loop_lag_p99_ms": 10_000.0}
    data["settings"] = {"capacity": {"offer_searches": len(CAMPAIGNS)}}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_spec(path).model_dump(mode="json")


@dataclass
class ContestedPurchases:
    """The sandbox's PurchaseCapacityBlock (in this process: the worker's flows reach it over HTTP) with its first
    ``buyers`` purchases (not their DryRuns) held until all of them have arrived, then let go together: each
    searched before anyone bought, so all chose the same offering, and the first round's answers are one purchase
    and ``buyers - 1`` NotFound, whatever the machine's speed. Later purchases pass straight through."""

    buyers: int
    timeout_s: float = 420  # from the first purchase to the last; minutes only on a machine loaded by other tests
    first_round: list[str] = field(default_factory=list)  # each held purchase's answer: "bought" or an error code
    broken: bool = False  # the barrier timed out: fewer than ``buyers`` purchases arrived together
    _tickets: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._barrier = threading.Barrier(self.buyers, timeout=self.timeout_s)

    def wrap(self, original: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def purchase_capacity_block(resp: Any) -> Any:
            if resp._get_param("DryRun", False):
                return original(resp)
            with self._lock:
                held = self._tickets < self.buyers
                self._tickets += 1
            if not held:
                return original(resp)
            try:
                self._barrier.wait()
            except threading.BrokenBarrierError:
                self.broken = True
            try:
                answer = original(resp)
            except EC2ClientError as exc:
                with self._lock:
                    self.first_round.append(str(exc.code))
                raise
            with self._lock:
                self.first_round.append("bought")
            return answer

        return purchase_capacity_block


@pytest.fixture(scope="module")
def contest() -> ContestedPurchases:
    return ContestedPurchases(buyers=len(CAMPAIGNS))


@pytest.fixture(scope="module")
def campaigns(
    world: World, contest: ContestedPurchases, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, FlowRun]]:
    """The campaign runs, started together, to their ends (each tears down when done); their default folders are
    removed afterwards.

    The sandbox's AWS moves its one clock to a bought block's start at the first look (the demo would otherwise
    wait a day), after which no block of that day is offered any more: each successful purchase is answered once
    every campaign has bought, as when people buy in the same minute, so that all blocks start on the same day (the
    contested offer is searched again and bought before anyone looks)."""
    folders = [ROOT / "out" / name for name in CAMPAIGNS]
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)  # a report from an earlier run would pass for this one's
    # Under the client's 60 s read timeout (capserve/tasks/aws.py): a broken barrier lets every purchase answer.
    everyone_bought = threading.Barrier(len(CAMPAIGNS), timeout=50)

    def hold(_reservation: str) -> None:
        with contextlib.suppress(threading.BrokenBarrierError):
            everyone_bought.wait()

    capacity_ext.SETTINGS.on_purchase = hold
    original = EC2Response.purchase_capacity_block
    EC2Response.purchase_capacity_block = contest.wrap(original)  # type: ignore[method-assign]
    try:
        folder = tmp_path_factory.mktemp("specs")
        specs = {name: _spec(name, folder) for name in CAMPAIGNS}
        started = {name: run_deployment("campaign/campaign", parameters={"spec": spec, "teardown_when_done": True},
                                        timeout=0)
                   for name, spec in specs.items()}  # no out_dir: each run's default
        ended = {name: wait_final(run.id, timeout_s=PLAYED_WITHIN_S)  # type: ignore[union-attr]
                 for name, run in started.items()}
    finally:
        EC2Response.purchase_capacity_block = original  # type: ignore[method-assign]
        capacity_ext.SETTINGS.on_purchase = None
    try:
        yield ended
    finally:
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)


def _reservations_by_campaign(regions: list[str]) -> dict[str, list[str]]:
    held: dict[str, list[str]] = {}
    for region in regions:
        ec2 = boto3.client("ec2", region_name=region)
        for reservation in ec2.describe_capacity_reservations()["CapacityReservations"]:
            tags = {tag["Key"]: tag["Value"] for tag in reservation.get("Tags", [])}
            if tags.get("capserve.io/campaign") in CAMPAIGNS:
                held.setdefault(tags["capserve.io/campaign"], []).append(reservation["CapacityReservationId"])
    return held


def _report(name: str) -> dict[str, Any]:
    report: dict[str, Any] = json.loads((ROOT / "out" / name / "report.json").read_text())
    return report


def test_campaigns_at_once_each_buy_one_block_serve_tear_down_and_write_their_own_report(
    campaigns: dict[str, FlowRun],
) -> None:
    assert {name: run.state_type for name, run in campaigns.items()} == dict.fromkeys(
        CAMPAIGNS, StateType.COMPLETED
    ), {name: run.state for name, run in campaigns.items()}
    reports = {name: _report(name) for name in CAMPAIGNS}
    assert {name: report["campaign"] for name, report in reports.items()} == {n: n for n in CAMPAIGNS}
    for name, report in reports.items():
        stages = {s["name"]: s["status"] for s in report["stages"]}
        assert set(stages.values()) == {"completed"}, (name, stages)
        assert report["rollout"]["kind"] == "LeaderWorkerSet" and report["evaluation"]["verdict"] == "pass", name
        assert report["teardown"]["remaining"] == [], name
    leases = {name: report["lease"] for name, report in reports.items()}
    blocks = {(lease["region"], lease["availability_zone"], lease["start"]) for lease in leases.values()}
    assert len(blocks) == len(CAMPAIGNS), leases  # different blocks: no offer bought twice
    # What the sandbox's AWS holds: exactly one reservation per campaign, the one its report names.
    held = _reservations_by_campaign(sorted({lease["region"] for lease in leases.values()}))
    assert held == {name: [lease["reservation_id"]] for name, lease in leases.items()}, held
    bought = {lease["reservation_id"] for lease in leases.values()}
    assert {r["reservation_id"] for r in capacity_ext.reservations()} == bought  # and no other, in this sandbox


def test_the_campaign_that_lost_its_first_offer_still_bought_one_block(
    campaigns: dict[str, FlowRun], contest: ContestedPurchases
) -> None:
    """A taken offer is searched again, never a permanent failure: the first round's NotFound answer went to a
    campaign that completed (the test above: one block each)."""
    assert not contest.broken, f"only some of the purchases arrived together: {contest.first_round}"
    lost = ["InvalidCapacityBlockOfferingId.NotFound"] * (len(CAMPAIGNS) - 1)
    assert sorted(contest.first_round) == [*lost, "bought"]
    assert all(run.state_type is StateType.COMPLETED for run in campaigns.values()), {
        n: r.state for n, r in campaigns.items()
    }


def test_the_runs_overlapped_in_time(campaigns: dict[str, FlowRun]) -> None:
    """None waited for another: every run started before any of them ended."""
    starts = [run.start_time for run in campaigns.values()]
    ends = [run.end_time for run in campaigns.values()]
    assert all(isinstance(t, datetime) for t in [*starts, *ends]), campaigns
    assert max(starts) < min(ends), sorted(zip(starts, ends, strict=True))  # type: ignore[type-var]


def test_each_campaign_had_its_own_kubernetes_and_its_deletion_took_it(
    world: World, campaigns: dict[str, FlowRun]
) -> None:
    # The sandbox's first Kubernetes served one campaign's cluster and saw nothing of the other (on a busy machine
    # a campaign may end before another creates its cluster: the first Kubernetes is then made new for it, its
    # record begun anew, so what it saw is its last cluster's).
    paths = " ".join(r.path for r in world.far_ends.kube_server.requests)
    assert len(set(re.findall(r"/namespaces/(capserve-team-\d)/", paths))) == 1
    # Both clusters are gone now, and their Kubernetes with them.
    clusters = [f"capserve-{name}" for name in CAMPAIGNS]
    assert [c for c in boto3.client("eks").list_clusters()["clusters"] if c in clusters] == []
    assert [c for c in eks_ext.cluster_kubes() if c in clusters] == []


def test_each_campaign_leaves_its_own_evaluation_and_weights_artifacts(campaigns: dict[str, FlowRun]) -> None:
    """Prefect shows the latest artifact per key: the campaigns evaluated the same model and staged the same repo,
    so each one's summary, gates and weights plan stay on the Artifacts page only when the key holds the
    campaign."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    wanted = [f"{name}-{what}" for name in CAMPAIGNS for what in
              ("eval-kimi-k3-summary", "eval-kimi-k3-gates", "weights-plan-capserve-sandbox-tiny-k3")]
    with get_client(sync_client=True) as client:
        latest = client.read_latest_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=wanted)))
    assert sorted(a.key for a in latest if a.key) == sorted(wanted)
    summaries = {a.key: str(a.data) for a in latest if a.key and a.key.endswith("-summary")}
    assert all("pass" in text.lower() for text in summaries.values()), summaries


def test_the_server_kept_its_runs_in_postgres_and_its_leases_in_redis(
    campaigns: dict[str, FlowRun], team_server: TeamServer
) -> None:
    names = "', '".join(f"campaign-{name}" for name in CAMPAIGNS)
    counted = team_server.postgres.query(f"select count(*) from flow_run where name in ('{names}');")  # noqa: S608 - our own names
    assert counted.split()[2] == str(len(CAMPAIGNS)), counted  # psql prints: count / ----- / 2 / (1 row)
    # Every campaign took its campaign slot and its purchase slot under a lease: the lease storage's Lua scripts
    # ran in this Redis (prefect-redis registers them on first use and calls them by SHA).
    stats = redis.Redis(host="127.0.0.1", port=team_server.redis.port).info("commandstats")
    assert stats.get("cmdstat_evalsha", {}).get("calls", 0) >= 2 * len(CAMPAIGNS), sorted(stats)
