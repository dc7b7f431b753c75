"""A team's Prefect server: PostgreSQL for the database, Redis for the concurrency leases (tests/server/conftest.py).

Five campaigns started at once from the campaign deployment, as five people clicking Run in the UI, none given an
output folder: each buys exactly one block, each writes its report to its own ``out/<campaign>``, and they run side
by side. Identical specs rank the same offer first; the sandbox holds the five first purchases until all five have
arrived (``ContestedPurchases``), so that one buys it and four meet AWS's ``InvalidCapacityBlockOfferingId.NotFound``
every time, search again and buy another block. Then the window test's core case (the purchase approved in the UI,
the lease's runs scheduled once) on the same server. About 2–3 minutes on a quiet 2-core machine.
"""

from __future__ import annotations

import json
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
from moto.ec2.exceptions import EC2ClientError
from moto.ec2.responses import EC2Response
from prefect.client.schemas.objects import FlowRun, StateType
from prefect.deployments import run_deployment
from team_backends import TeamServer

# The window test's core case, run here on the team's server: its tests take this module's `world` and
# `campaign_run` fixtures.
from test_window_on_a_server import (  # noqa: F401  # collected here as tests of this server
    World,
    approved_campaign_run,
    test_the_lease_schedules_each_run_once_with_its_name_and_time,
    test_the_purchase_waited_for_the_approval_given_in_the_ui,
    wait_final,
    world_on,
)

from capserve.core.spec import load_spec

pytestmark = [pytest.mark.server, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "kimi-k3-sandbox.yaml"
CAMPAIGNS = [f"team-{n}" for n in range(1, 6)]
FINAL = {StateType.COMPLETED, StateType.FAILED, StateType.CRASHED, StateType.CANCELLED}


@pytest.fixture(scope="module")
def world(team_server: TeamServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with world_on(team_server.server, tmp_path_factory.mktemp("team")) as world:
        yield world


def _spec(name: str, folder: Path) -> dict[str, Any]:
    """The demo spec under another name, bought without a person (at or under the threshold), with room for four
    taken offers ahead of it; the campaign run ends once the block, a day ahead, is bought and its runs scheduled."""
    data = yaml.safe_load(EXAMPLE.read_text())
    data["name"] = name
    data["capacity"]["approval_threshold_usd"] = data["capacity"]["max_upfront_fee_usd"]
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
    timeout_s: float = 420  # from the first purchase to the fifth; minutes only on a machine loaded by other tests
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
def five(
    world: World, contest: ContestedPurchases, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, FlowRun]]:
    """The five campaign runs, started together, to their ends; their default folders are removed afterwards."""
    folders = [ROOT / "out" / name for name in CAMPAIGNS]
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)  # a report from an earlier run would pass for this one's
    capacity_ext.SETTINGS.auto_activate = False  # the blocks stay a day ahead: each run only plans and buys
    original = EC2Response.purchase_capacity_block
    EC2Response.purchase_capacity_block = contest.wrap(original)  # type: ignore[method-assign]
    try:
        folder = tmp_path_factory.mktemp("specs")
        specs = {name: _spec(name, folder) for name in CAMPAIGNS}
        started = {name: run_deployment("campaign/campaign", parameters={"spec": spec}, timeout=0)
                   for name, spec in specs.items()}  # no out_dir: each run's default
        ended = {name: wait_final(run.id) for name, run in started.items()}  # type: ignore[union-attr]
    finally:
        EC2Response.purchase_capacity_block = original  # type: ignore[method-assign]
        capacity_ext.SETTINGS.auto_activate = True  # as sandbox() had it: the window case below serves at once
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


def test_five_campaigns_at_once_each_buy_one_block_and_write_their_own_report(five: dict[str, FlowRun]) -> None:
    assert {name: run.state_type for name, run in five.items()} == dict.fromkeys(CAMPAIGNS, StateType.COMPLETED), {
        name: run.state for name, run in five.items()
    }
    reports = {name: _report(name) for name in CAMPAIGNS}
    assert {name: report["campaign"] for name, report in reports.items()} == {n: n for n in CAMPAIGNS}
    leases = {name: report["lease"] for name, report in reports.items()}
    blocks = {(lease["region"], lease["availability_zone"], lease["start"]) for lease in leases.values()}
    assert len(blocks) == len(CAMPAIGNS), leases  # five different blocks: no offer bought twice
    # What the sandbox's AWS holds: exactly one reservation per campaign, the one its report names.
    held = _reservations_by_campaign(sorted({lease["region"] for lease in leases.values()}))
    assert held == {name: [lease["reservation_id"]] for name, lease in leases.items()}, held


def test_four_of_the_five_lost_their_first_offer_and_still_bought_one_block(
    five: dict[str, FlowRun], contest: ContestedPurchases
) -> None:
    """A taken offer is searched again, never a permanent failure: the first round's four NotFound answers went
    to campaigns that all completed (the test above: one block each)."""
    assert not contest.broken, f"only some of the five purchases arrived together: {contest.first_round}"
    assert sorted(contest.first_round) == ["InvalidCapacityBlockOfferingId.NotFound"] * 4 + ["bought"]
    assert all(run.state_type is StateType.COMPLETED for run in five.values()), {n: r.state for n, r in five.items()}


def test_the_five_runs_overlapped_in_time(five: dict[str, FlowRun]) -> None:
    """None waited for another: every run started before any of them ended."""
    starts = [run.start_time for run in five.values()]
    ends = [run.end_time for run in five.values()]
    assert all(isinstance(t, datetime) for t in [*starts, *ends]), five
    assert max(starts) < min(ends), sorted(zip(starts, ends, strict=True))  # type: ignore[type-var]


def test_the_server_kept_its_runs_in_postgres_and_its_leases_in_redis(
    five: dict[str, FlowRun], team_server: TeamServer
) -> None:
    names = "', '".join(f"campaign-{name}" for name in CAMPAIGNS)
    counted = team_server.postgres.query(f"select count(*) from flow_run where name in ('{names}');")  # noqa: S608 - our own names
    assert counted.split()[2] == str(len(CAMPAIGNS)), counted  # psql prints: count / ----- / 5 / (1 row)
    # Every campaign took its campaign slot and its purchase slot under a lease: the lease storage's Lua scripts
    # ran in this Redis (prefect-redis registers them on first use and calls them by SHA).
    stats = redis.Redis(host="127.0.0.1", port=team_server.redis.port).info("commandstats")
    assert stats.get("cmdstat_evalsha", {}).get("calls", 0) >= 2 * len(CAMPAIGNS), sorted(stats)


@pytest.fixture(scope="module")
def campaign_run(world: World, five: dict[str, FlowRun], tmp_path_factory: pytest.TempPathFactory) -> FlowRun:
    """The window test's campaign (approved in the UI, served in its own run: the block is made active at once),
    after the five, as the sandbox's clock jumps to its block."""
    # The run's input waits in PostgreSQL while it is suspended.
    return approved_campaign_run(world, tmp_path_factory.mktemp("campaign"))
