"""deployments/prefect.yaml on a real Prefect server, as an operator runs it.

A real ``prefect server start`` (with its scheduler) on the team's backends (PostgreSQL and Redis,
tests/server/conftest.py), ``prefect deploy --all`` from the checkout, a process
worker, and the sandbox's stand-ins served from this test process over HTTP (moto, the fake Kubernetes,
the local Hub, the OpenAI stand-in): the worker's flow processes reach them through their environment.

Checked: a campaign deployment run schedules serve/drain/teardown runs once, with their names, tags and
times; scheduling again (as every re-run does) makes no duplicates; a failing verdict makes the run Failed;
the reaper and the Hub watcher never run twice at once, and a late run waits instead of being cancelled;
killing the worker mid-run leaves the cluster standing and the run Crashed. About 3–5 minutes on a quiet
2-core machine (server start, registration, one campaign).
"""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from capserve_sandbox.environment import SandboxEndpoints, sandbox
from prefect import get_client
from prefect.automations import RunDeployment
from prefect.client.schemas.filters import (
    FlowRunFilter,
    FlowRunFilterName,
    FlowRunFilterTags,
)
from prefect.client.schemas.objects import FlowRun, StateType
from prefect.deployments import run_deployment
from prefect.settings import PREFECT_API_URL, temporary_settings
from team_backends import TeamServer

from capserve.core.lease import Lease
from capserve.core.schedule import SCHEDULED_TAG, campaign_tag
from capserve.core.spec import TeardownSpec, load_spec
from capserve.runtime.prefect_server import Child, LocalServer, register, start_worker
from capserve.tasks.reporting import REPORT_DIR_ENV
from capserve.tasks.scheduling import (
    WALL_CLOCK_WATCHES,
    pause_wall_clock_watches,
    schedule_hub_watch,
    schedule_lease_runs,
)

pytestmark = pytest.mark.server

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "kimi-k3-sandbox.yaml"
CAMPAIGN = "k3-demo"
PREPARE_LEAD = timedelta(minutes=50)  # cluster_lead of an EKS campaign (tests/unit/test_schedule.py)
FINAL = {StateType.COMPLETED, StateType.FAILED, StateType.CRASHED, StateType.CANCELLED}


@dataclass
class World:
    server: LocalServer
    far_ends: SandboxEndpoints
    worker: Child
    env: dict[str, str]
    logs: Path

    def restart_worker(self) -> None:
        self.worker.stop()
        self.worker = start_worker(ROOT, self.env, self.logs / "worker.log")


@contextmanager
def world_on(server: LocalServer, logs: Path) -> Iterator[World]:
    """The sandbox, capserve's deployments on ``server`` and one worker, for as long as the tests need them."""
    with sandbox(served_model_name="kimi-k3") as far_ends:
        # The environment a worker needs to reach the sandbox (what `capserve sandbox` prints).
        env = {**os.environ, **server.env, "CAPSERVE_HUB_ENDPOINT": far_ends.hub,
               REPORT_DIR_ENV: str(logs / "reports" / "{campaign}")}  # where the scheduled runs write the report
        register(ROOT, env, logs / "register.log")
        pause_wall_clock_watches(WALL_CLOCK_WATCHES, api_url=server.url)  # the tests' own runs
        worker = start_worker(ROOT, env, logs / "worker.log")
        world = World(server=server, far_ends=far_ends, worker=worker, env=env, logs=logs)
        try:
            with temporary_settings({PREFECT_API_URL: server.url}):
                yield world
        finally:
            world.worker.stop()


@pytest.fixture(scope="module")
def world(team_server: TeamServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """On the team's server (PostgreSQL, leases in Redis: conftest.py), the production-like backend: a suspended
    run's input waits in PostgreSQL."""
    with world_on(team_server.server, tmp_path_factory.mktemp("prefect")) as world:
        yield world


def wait_final(flow_run_id: Any, timeout_s: float = 600) -> FlowRun:
    deadline = time.monotonic() + timeout_s
    with get_client(sync_client=True) as client:
        while True:
            run = client.read_flow_run(flow_run_id)
            if run.state_type in FINAL or time.monotonic() > deadline:
                return run
            time.sleep(1)


def campaign_spec(tmp_path: Path) -> dict[str, Any]:
    """The demo spec with a small load, asking for a model the endpoint does not serve: the smoke checks
    fail, so the verdict is fail whatever the machine's load (a latency gate could come out invalid)."""
    data = yaml.safe_load(EXAMPLE.read_text())
    data["evaluation"]["load"] = {"concurrency_levels": [1], "request_rates": [], "requests_per_stream": 2,
                                  "min_requests": 2}
    data["serving"]["served_model_name"] = "not-served-here"
    data["capacity"]["approval_threshold_usd"] = 100  # the block costs more: a person must approve it
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_spec(path).model_dump(mode="json")


@pytest.fixture(scope="module")
def campaign_run(world: World, tmp_path_factory: pytest.TempPathFactory) -> FlowRun:
    """One campaign started as a deployment run (exactly what a UI click does), approved as the UI approves a
    suspended run, to its end."""
    return approved_campaign_run(world, tmp_path_factory.mktemp("campaign"))


def approved_campaign_run(world: World, out: Path) -> FlowRun:
    """The campaign deployment run, suspended for its purchase's approval, approved as the UI does, to its end."""
    started = run_deployment(
        "campaign/campaign",
        parameters={"spec": campaign_spec(out), "out_dir": str(out / "out"), "hub_endpoint": world.far_ends.hub,
                    "endpoint_url": world.far_ends.inference},
        timeout=0,
    )
    suspended = wait_suspended(started.id)  # type: ignore[union-attr]
    assert suspended.state_name == "Suspended", suspended.state
    approve_as_the_ui_does(world, suspended, approver="ops-test", note="within budget")
    return wait_final(started.id)  # type: ignore[union-attr]


def wait_suspended(flow_run_id: Any, timeout_s: float = 300) -> FlowRun:
    deadline = time.monotonic() + timeout_s
    with get_client(sync_client=True) as client:
        while True:
            run = client.read_flow_run(flow_run_id)
            if run.state_type in {StateType.PAUSED, *FINAL} or time.monotonic() > deadline:
                return run
            time.sleep(1)


def approve_as_the_ui_does(world: World, run: FlowRun, *, approver: str, note: str) -> None:
    """The UI reads the form's schema (its defaults carry the offer) and posts the filled form to /resume."""
    keyset = run.state.state_details.run_input_keyset  # type: ignore[union-attr]
    assert keyset is not None, "the suspended run waits for no input"
    api = world.server.url
    schema = _form_schema(f"{api}/flow_runs/{run.id}/input/{keyset['schema']}")
    offering = schema["properties"]["offering_id"]["default"]
    body = {"run_input": {"approved": True, "offering_id": offering, "approver": approver, "note": note}}
    request = urllib.request.Request(
        f"{api}/flow_runs/{run.id}/resume", data=json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/json"},
    )
    assert _call_as_a_client_does(request)["status"] == "ACCEPT"


def _form_schema(url: str, timeout_s: float = 120) -> Any:
    """The approval form's schema, once the run has saved it: Prefect's ``suspend_flow_run`` proposes the Suspended
    state first and saves the schema after (prefect/flow_runs.py), so a reader that sees the state at once may find
    no schema for a moment (404) on a loaded machine. A person opening the form in the UI comes seconds later."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return _call_as_a_client_does(urllib.request.Request(url))
        except urllib.error.HTTPError as exc:
            if exc.code != 404 or time.monotonic() > deadline:
                raise
            time.sleep(1)


def _call_as_a_client_does(request: urllib.request.Request, attempts: int = 6) -> Any:
    """One API call, retried on 503 as Prefect's own client and the UI do: the server answers 503 for errors it
    marks retryable (on a loaded machine, SQLite's "database is locked"), and nothing was applied."""
    for attempt in range(1, attempts + 1):
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:  # loopback
                return json.loads(answer.read())
        except urllib.error.HTTPError as exc:
            if exc.code != 503 or attempt == attempts:
                raise
            time.sleep(2 * attempt)
    raise AssertionError("unreachable")


def test_the_purchase_waited_for_the_approval_given_in_the_ui(campaign_run: FlowRun) -> None:
    acquire = next(line for line in _report(campaign_run)["stages"] if line["name"] == "acquire")
    assert acquire["status"] == "completed"
    lease = _report(campaign_run)["lease"]
    assert lease["upfront_fee"] > 100
    approvals = _report(campaign_run).get("approvals") or []
    assert [(a["approver"], a["approved"], a["note"]) for a in approvals] == [("ops-test", True, "within budget")]


def scheduled_runs() -> list[FlowRun]:
    tags = FlowRunFilterTags(all_=[campaign_tag(CAMPAIGN), SCHEDULED_TAG])
    with get_client(sync_client=True) as client:
        return client.read_flow_runs(flow_run_filter=FlowRunFilter(tags=tags))


def test_a_failing_verdict_makes_the_campaign_run_failed(campaign_run: FlowRun) -> None:
    assert campaign_run.state_type is StateType.FAILED, campaign_run.state
    assert "verdict FAIL" in (campaign_run.state.message or "")  # type: ignore[union-attr]
    assert campaign_run.name == f"campaign-{CAMPAIGN}"


def test_the_lease_schedules_each_run_once_with_its_name_and_time(campaign_run: FlowRun, world: World) -> None:
    lease = Lease.model_validate(_report(campaign_run)["lease"])
    runs = {run.name: run for run in scheduled_runs()}
    stages = ("drain", "prepare-cluster", "serve", "teardown")
    assert sorted(runs) == [f"{stage}-{CAMPAIGN}" for stage in stages]
    end = lease.end
    assert runs[f"prepare-cluster-{CAMPAIGN}"].expected_start_time == lease.start - PREPARE_LEAD
    assert runs[f"drain-{CAMPAIGN}"].expected_start_time == end - _minutes(34)
    assert runs[f"teardown-{CAMPAIGN}"].expected_start_time == end - _minutes(32)
    assert runs[f"serve-{CAMPAIGN}"].expected_start_time == lease.start
    # The campaign served in its own run (the sandbox's block was active): preparation and bring-up are no longer
    # needed.
    assert runs[f"serve-{CAMPAIGN}"].state_type is StateType.CANCELLED
    assert runs[f"prepare-cluster-{CAMPAIGN}"].state_type is StateType.CANCELLED
    for name in (f"drain-{CAMPAIGN}", f"teardown-{CAMPAIGN}"):
        assert runs[name].state_type is StateType.SCHEDULED
        assert runs[name].parameters == {
            "campaign_id": CAMPAIGN, "region": lease.region, "reservation_id": lease.reservation_id
        }
    reported = {entry["name"]: entry for entry in _report(campaign_run)["schedule"]}
    assert reported[f"teardown-{CAMPAIGN}"]["flow_run_id"] == str(runs[f"teardown-{CAMPAIGN}"].id)

    # What every re-run does: the same lease asks for the same keys, and the server has them all.
    again = schedule_lease_runs.fn(CAMPAIGN, lease, TeardownSpec(), prepare_lead=PREPARE_LEAD)
    assert len(scheduled_runs()) == 4
    assert {entry.flow_run_id for entry in again.runs} == {str(run.id) for run in runs.values()}

    # A lease that moved (extended by a day): the old pending runs are cancelled, new ones made once.
    moved = lease.model_copy(update={"end": lease.end + _minutes(24 * 60)})
    schedule_lease_runs.fn(CAMPAIGN, moved, TeardownSpec(), prepare_lead=PREPARE_LEAD)
    schedule_lease_runs.fn(CAMPAIGN, moved, TeardownSpec(), prepare_lead=PREPARE_LEAD)
    pending = [run for run in scheduled_runs() if run.state_type is StateType.SCHEDULED]
    assert sorted((run.name, run.expected_start_time) for run in pending) == [
        (f"drain-{CAMPAIGN}", moved.end - _minutes(34)), (f"teardown-{CAMPAIGN}", moved.end - _minutes(32)),
    ]


def test_a_hub_watch_is_asked_for_once_per_block_and_time(world: World) -> None:
    # `make demo` run again on the same server database plays a block on the same simulated times: keyed by
    # campaign and time only, the server handed back the first block's finished watch and no redeploy happened.
    at = datetime.now(UTC).replace(microsecond=0) + timedelta(days=30)
    first = schedule_hub_watch("watched", ["us-east-2"], at, reservation_id="cr-0000000000000000a")
    again = schedule_hub_watch("watched", ["us-east-2"], at, reservation_id="cr-0000000000000000a")
    later = schedule_hub_watch("watched", ["us-east-2"], at, reservation_id="cr-0000000000000000b")
    assert again.flow_run_id == first.flow_run_id  # a re-ask in the same block
    assert later.flow_run_id != first.flow_run_id and later.state_type == "SCHEDULED"
    with get_client(sync_client=True) as client:
        for run in (first, later):
            client.delete_flow_run(uuid.UUID(run.flow_run_id))  # never to fire in another test


@pytest.mark.parametrize(
    ("deployment", "parameters"),
    [("reaper/reaper", {"dry_run": True}), ("hub-watcher/hub-watcher", {})],
    ids=["reaper", "hub-watcher"],
)
def test_two_overlapping_watches_both_run_one_after_the_other(
    world: World, deployment: str, parameters: dict[str, Any]
) -> None:
    """A periodic watch that comes while another runs waits for it (ENQUEUE), never cancelled: a cancelled Hub
    watch is a revision never rolled back."""
    params = {"regions": [world.far_ends.region], **parameters}
    first = run_deployment(deployment, parameters=params, timeout=0)
    second = run_deployment(deployment, parameters=params, timeout=0)
    ends = [wait_final(first.id), wait_final(second.id)]  # type: ignore[union-attr]
    assert [run.state_type for run in ends] == [StateType.COMPLETED] * 2, [run.state for run in ends]
    earlier, later = sorted(ends, key=lambda run: run.start_time)  # type: ignore[arg-type, return-value]
    assert earlier.end_time is not None and later.start_time is not None
    assert earlier.end_time <= later.start_time, (earlier.end_time, later.start_time)  # never two at once


def test_killing_the_worker_mid_run_leaves_the_cluster_standing_then_drain_and_teardown_end_the_window(
    campaign_run: FlowRun, world: World
) -> None:
    lease = _report(campaign_run)["lease"]
    started = run_deployment(
        "serve/serve",
        parameters={"campaign_id": CAMPAIGN, "region": lease["region"], "reservation_id": lease["reservation_id"]},
        timeout=0,
    )
    run_id = started.id  # type: ignore[union-attr]
    _wait_running(run_id)
    time.sleep(5)  # inside the campaign's stages
    tether = world.worker.process.pid  # the worker runs under capserve's tether (capserve/runtime/tether.py)
    worker, *flows = _descendants(tether)
    for pid in (worker, tether):
        os.kill(pid, signal.SIGKILL)  # the worker dies at once
    for pid in flows:  # its flow process is stopped, as a host shutdown or an OOM-killed pod would
        _signal(pid, signal.SIGTERM)
    try:
        ended = wait_final(run_id, timeout_s=120)
        assert ended.state_type is StateType.CRASHED, ended.state
        eks = boto3.client("eks", region_name=lease["region"])
        assert f"capserve-{CAMPAIGN}" in eks.list_clusters()["clusters"]  # a crash tears nothing down
    finally:
        world.restart_worker()

    # The window then ends as scheduled (fired now rather than at end − 45 / end − 35): drain, then teardown.
    window = {"campaign_id": CAMPAIGN, "region": lease["region"], "reservation_id": lease["reservation_id"]}
    drained = wait_final(run_deployment("drain/drain", parameters=window, timeout=0).id)  # type: ignore[union-attr]
    assert (drained.state_type, drained.name) == (StateType.COMPLETED, f"drain-{CAMPAIGN}"), drained.state
    assert f"capserve-{CAMPAIGN}" in eks.list_clusters()["clusters"]  # draining keeps the cluster
    gone = wait_final(
        run_deployment("scheduled-teardown/scheduled-teardown", parameters=window, timeout=0).id  # type: ignore[union-attr]
    )
    assert (gone.state_type, gone.name) == (StateType.COMPLETED, f"teardown-{CAMPAIGN}"), gone.state
    assert f"capserve-{CAMPAIGN}" not in eks.list_clusters()["clusters"]
    # A run scheduled for a reservation the campaign does not hold does nothing.
    stale = wait_final(run_deployment(
        "drain/drain", parameters={**window, "reservation_id": "cr-00000000000000000"}, timeout=0
    ).id)  # type: ignore[union-attr]
    assert (stale.state_type, stale.state_name) == (StateType.CANCELLED, "Stale"), stale.state


def test_registration_wires_every_automation_and_the_expiration_warning_drains_then_tears_down(
    world: World,
) -> None:
    with get_client(sync_client=True) as client:
        deployments = {d.id: d for d in client.read_deployments()}
        flows = {f.id: f.name for f in client.read_flows()}
        automations = {a.name: a for a in client.read_automations() if a.name.startswith("capserve-")}
    assert sorted(automations) == [
        "capserve-crash-silent-campaign-run", "capserve-drain-on-expiration-warning",
        "capserve-notify-late-teardown", "capserve-redeploy-on-new-revision", "capserve-teardown-crashed-campaign",
    ]
    started = {
        name: [f"{flows[deployments[a.deployment_id].flow_id]}/{deployments[a.deployment_id].name}"
               for a in automation.actions if isinstance(a, RunDeployment) and a.deployment_id in deployments]
        for name, automation in automations.items()
    }
    assert started == {
        "capserve-crash-silent-campaign-run": [],  # it changes the run's state; the Crashed one reacts
        "capserve-drain-on-expiration-warning": ["drain/drain", "scheduled-teardown/scheduled-teardown"],
        "capserve-notify-late-teardown": ["notify/notify"],
        "capserve-redeploy-on-new-revision": ["redeploy/redeploy"],
        "capserve-teardown-crashed-campaign": ["teardown-orphan/teardown-orphan"],
    }

    # AWS's warning for a campaign (as the forwarder posts it). A campaign with no record, so that the runs
    # touch nothing the other tests use: they start with the parameters, then refuse for want of a record.
    ghost = "ghost-campaign"
    warning = {
        "id": str(uuid.uuid4()), "occurred": datetime.now(UTC).isoformat(),
        "event": "capserve.aws.capacity-block.expiration-warning",
        "resource": {"prefect.resource.id": f"capserve.campaign.{ghost}", "prefect.resource.name": ghost},
        "payload": {"region": world.far_ends.region, "reservation_id": "cr-0123456789abcdef0",
                    "kind": "expiration-warning"},
        "related": [],
    }
    _post_events(world.server.url, [warning, warning])  # the same event twice: one reaction
    names = [f"drain-{ghost}", f"teardown-{ghost}"]
    runs = _runs_named(names, expected=2)
    time.sleep(5)  # long enough for a second reaction to show its runs
    runs = _runs_named(names, expected=2)
    assert sorted(run.name for run in runs) == names
    window = {"campaign_id": ghost, "region": world.far_ends.region, "reservation_id": "cr-0123456789abcdef0",
              "reason": "expiration-warning"}
    for run in runs:
        assert run.parameters == window
        ended = wait_final(run.id)
        assert ended.state_type is StateType.FAILED, ended.state
        assert f"no record of campaign {ghost!r}" in (ended.state.message or ""), ended.state  # type: ignore[union-attr]


def _post_events(api_url: str, events: list[dict[str, Any]]) -> None:
    """What the forwarder does: POST /api/events (self-hosted Prefect has no webhooks, docs/events.md §2.2)."""
    request = urllib.request.Request(  # the test's own loopback server
        f"{api_url}/events", data=json.dumps(events).encode(), headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert answer.status == 204


def _runs_named(names: list[str], expected: int, timeout_s: float = 60) -> list[FlowRun]:
    found: list[FlowRun] = []
    deadline = time.monotonic() + timeout_s
    with get_client(sync_client=True) as client:
        while time.monotonic() < deadline:
            found = client.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=names)))
            if len(found) >= expected:
                break
            time.sleep(0.5)
    return found


def _report(run: FlowRun) -> dict[str, Any]:
    out = Path(run.parameters["out_dir"]) / "report.json"
    return yaml.safe_load(out.read_text())


def _minutes(n: int) -> timedelta:
    return timedelta(minutes=n)


def _wait_running(flow_run_id: Any, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    with get_client(sync_client=True) as client:
        while time.monotonic() < deadline:
            if client.read_flow_run(flow_run_id).state_type is StateType.RUNNING:
                return
            time.sleep(0.5)
    raise AssertionError(f"flow run {flow_run_id} did not start within {timeout_s} s")


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _signal(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
