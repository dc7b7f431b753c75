"""The kill matrix: for each kill point, start a campaign, kill its worker there, re-run it, tear it down, count.

A row (``run_row``) has two halves. The *kill* half runs on the victim worker: the campaign is started as a
deployment run (as a UI click would), and once it reaches the kill point the worker and every process
under it get the signal at once (what a host shutdown, or systemd stopping the worker's unit, does).
Kill points are either a stage boundary (the campaign record says the stage ended) or a request the
sandbox holds (``capserve.sandbox.gates``) until the kill: the purchase after AWS bought, a checkpoint
file mid-download, a server-side apply, the LeaderWorkerSet's apply, a node group's deletion. The *recover*
half runs on the steady worker: the same campaign again, then ``capserve down``, then the counts of ``Row``.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from prefect import get_client
from prefect.client.schemas.objects import StateType
from prefect.deployments import run_deployment

from capserve.core.cluster.naming import ClusterNames
from capserve.core.settings import RecordSettings
from capserve.core.spec import CampaignSpec, load_spec
from capserve.core.stages import Stage, StageStatus
from faults.processes import Proc, alive, cwd, descendants, signal_all, this
from faults.world import ROOT, VICTIM_QUEUE, World

EXAMPLE = ROOT / "examples" / "kimi-k3-sandbox.yaml"
FINAL = {StateType.COMPLETED, StateType.FAILED, StateType.CRASHED, StateType.CANCELLED}
REACH_SECONDS = 240  # a run that has not reached its kill point by then: the row fails, saying so
RERUN_SECONDS = 600
SIGTERM_GRACE_SECONDS = 30  # what a process may take to stop on SIGTERM before it counts as left behind
SIGKILL_GRACE_SECONDS = 3
POD_GRACE_SECONDS = 30  # the kubelet stops a deleted node's pods (grace scaled down by the sandbox)


@dataclass(frozen=True)
class KillPoint:
    name: str
    after: Stage | None = None  # a boundary: kill once the record shows this stage ended
    hold: str | None = None  # inside a step: the sandbox holds a request at this point
    match: str = "*"
    teardown_when_done: bool = False  # the killed run tears down when done (to be killed inside teardown)


POINTS: tuple[KillPoint, ...] = (
    KillPoint("after plan", after=Stage.PLAN),
    KillPoint("inside purchase", hold="purchase"),
    KillPoint("after acquire", after=Stage.ACQUIRE),
    KillPoint("inside download", hold="download", match="*.safetensors"),
    KillPoint("after stage_weights", after=Stage.STAGE_WEIGHTS),
    KillPoint("inside apply (bring_up)", hold="apply"),
    KillPoint("after bring_up", after=Stage.BRING_UP),
    KillPoint("after weights_to_nodes", after=Stage.WEIGHTS_TO_NODES),
    KillPoint("inside rollout (LWS apply)", hold="apply", match="LeaderWorkerSet/*"),
    KillPoint("after rollout", after=Stage.ROLLOUT),
    KillPoint("after evaluate", after=Stage.EVALUATE),
    KillPoint("inside teardown (DeleteNodegroup)", hold="delete", match="eks:DeleteNodegroup:*",
              teardown_when_done=True),
)
SIGNALS = {"SIGKILL": signal.SIGKILL, "SIGTERM": signal.SIGTERM}
ENDED = {StageStatus.COMPLETED.value, StageStatus.SKIPPED.value, StageStatus.STOPPED.value}


@dataclass
class Row:
    point: KillPoint
    signal: str
    campaign: str
    killed_at: str = ""  # what the kill interrupted (the held request, or the stage that had ended)
    killed_state: str = ""  # the killed run's Prefect state when the re-run ended
    rerun_state: str = ""
    purchases: int = -1
    destroyed: int = -1
    leftovers: int = -1
    orphans: int = -1
    recover_seconds: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def green(self) -> bool:
        return (self.purchases, self.destroyed, self.leftovers, self.orphans) == (1, 0, 0, 0) and self.rerun_state in (
            "Completed", "Inconclusive"
        )


def campaign_spec(campaign: str, out: Path) -> CampaignSpec:
    """The demo spec under another name, its own weights bucket (so every row downloads), two-week blocks and
    a small load."""
    data = yaml.safe_load(EXAMPLE.read_text())
    data["name"] = campaign
    # Every purchase moves the one sandbox clock to its block's start (the next 11:30 UTC), a day further
    # each time: two-week blocks keep the earlier rows' reservations active while later rows buy theirs.
    fee = 60_000
    data["capacity"].update({"duration_hours": 14 * 24, "latest_end": "now+56d", "max_upfront_fee_usd": fee,
                             "approval_threshold_usd": fee})
    data["weights"]["s3_bucket"] = f"{campaign}-weights"
    data["evaluation"]["load"] = {"concurrency_levels": [1], "request_rates": [], "requests_per_stream": 2,
                                  "min_requests": 2}
    path = out / f"{campaign}.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_spec(path)


def _start(world: World, spec: CampaignSpec, out: Path, *, teardown: bool, queue: str | None) -> Any:
    parameters = {"spec": spec.model_dump(mode="json"), "out_dir": str(out), "teardown_when_done": teardown,
                  "hub_endpoint": world.env["CAPSERVE_HUB_ENDPOINT"]}
    run = run_deployment("campaign/campaign", parameters=parameters, timeout=0, work_queue_name=queue)
    return run.id  # type: ignore[union-attr]  # sync in a sync caller


def _state(run_id: Any) -> tuple[StateType, str]:
    with get_client(sync_client=True) as client:
        run = client.read_flow_run(run_id)
    return run.state_type, (run.state_name or "")  # type: ignore[return-value]


def _stage_ended(spec: CampaignSpec, stage: Stage) -> bool:
    from capserve.tasks.locations import record_ref
    from capserve.tasks.record_store import read_record

    try:
        stored = read_record(record_ref(spec, RecordSettings()))
    except Exception:  # noqa: BLE001 - no bucket yet, or a read racing a write: look again
        return False
    entry = stored.record.stage(stage) if stored is not None else None
    return entry is not None and entry.status.value in ENDED


def _reach(world: World, point: KillPoint, spec: CampaignSpec, run_id: Any) -> str:
    """Wait until the run is at the kill point; what it is doing there."""
    deadline = time.monotonic() + REACH_SECONDS
    while time.monotonic() < deadline:
        if point.hold is not None:
            held = world.state()["holds"].get(point.hold, {}).get("held")
            if held:
                return str(held)
        elif point.after is not None and _stage_ended(spec, point.after):
            return f"{point.after.value} ended"
        state, name = _state(run_id)
        if state in FINAL:
            raise RuntimeError(f"the run ended ({name}) before reaching the kill point")
        time.sleep(0.3)
    raise RuntimeError(f"the run did not reach the kill point within {REACH_SECONDS} s")


def kill_half(
    world: World, point: KillPoint, sig: str, index: int, out: Path
) -> tuple[Row, CampaignSpec, Any, float, list[Proc]]:
    """Start the row's campaign on the victim worker, kill the worker at the point; the victims left alive."""
    campaign = f"faults-{index:02d}"
    spec = campaign_spec(campaign, out)
    row = Row(point=point, signal=sig, campaign=campaign)
    if point.hold is not None:
        world.hold(point.hold, point.match)
    run_id = _start(world, spec, out / campaign / "killed", teardown=point.teardown_when_done, queue=VICTIM_QUEUE)
    try:
        row.killed_at = _reach(world, point, spec, run_id)
    except RuntimeError as exc:
        row.notes.append(str(exc))
    victims = [*this(world.victim.process.pid), *descendants(world.victim.process.pid)]
    signal_all(victims, SIGNALS[sig])
    killed = time.monotonic()
    grace = SIGTERM_GRACE_SECONDS if sig == "SIGTERM" else SIGKILL_GRACE_SECONDS
    deadline = time.monotonic() + grace
    while alive(victims) and time.monotonic() < deadline:
        time.sleep(0.2)
        world.victim.process.poll()  # reap the worker so it does not linger as a zombie
    world.release()  # the held request goes on, to a client that is gone
    survivors = alive(victims)
    signal_all(survivors, signal.SIGKILL)  # an operator would have to: they count as orphans
    world.restart_victim()
    return row, spec, run_id, killed, survivors


def recover_half(
    world: World, row: Row, spec: CampaignSpec, killed_run: Any, killed: float, survivors: list[Proc], out: Path
) -> None:
    """Re-run the campaign on the steady worker, tear it down with ``capserve down``, count."""
    cluster = ClusterNames(campaign_id=spec.campaign_id).eks_cluster
    rerun_started = time.time()
    run_id = _start(world, spec, out / row.campaign / "rerun", teardown=False, queue=None)
    deadline = time.monotonic() + RERUN_SECONDS
    while (state := _state(run_id))[0] not in FINAL and time.monotonic() < deadline:
        time.sleep(1)
    row.rerun_state = state[1]
    if state[0] is StateType.COMPLETED:
        row.recover_seconds = time.monotonic() - killed
    row.killed_state = _state(killed_run)[1]
    down_started = time.time()
    spec_file = out / f"{row.campaign}.yaml"
    with (out / row.campaign / "down.log").open("wb") as log:
        code = subprocess.run(  # noqa: S603  # our own interpreter and fixed arguments
            [sys.executable, "-m", "capserve.cli", "down", str(spec_file)], env=world.env, cwd=ROOT,
            stdout=log, stderr=subprocess.STDOUT, check=False,
        ).returncode
    if code != 0:
        row.notes.append(f"capserve down exited {code} (see {out / row.campaign / 'down.log'})")
    row.leftovers = len(leftovers(spec, cluster))
    seen = world.state()
    row.purchases = sum(1 for r in seen["reservations"] if r["tags"].get("capserve.io/campaign") == row.campaign)
    # A deletion of the campaign's cluster or node group that nobody asked for: not in the final `capserve
    # down`, and not in the killed run's own teardown when that row asked for one (until the re-run began).
    allowed_until = rerun_started if row.point.teardown_when_done else 0.0
    row.destroyed = sum(
        1 for d in seen["deletes"]
        if d["action"] in ("DeleteCluster", "DeleteNodegroup") and f"/clusters/{cluster}" in d["path"]
        and allowed_until <= d["at"] < down_started
    )
    row.orphans = len(survivors) + _pods_left(seen["pid"], row.campaign)


def _pods_left(sandbox_pid: int, campaign: str) -> int:
    """The campaign's pods still running as local processes of the sandbox's kubelet, after a grace."""
    deadline = time.monotonic() + POD_GRACE_SECONDS
    while True:
        left = [p for p in descendants(sandbox_pid) if campaign in cwd(p[0])]
        if not left or time.monotonic() > deadline:
            return len(left)
        time.sleep(1)


def leftovers(spec: CampaignSpec, cluster: str) -> list[str]:
    """What a teardown of the campaign would still delete, and what EKS made for its cluster (what
    ``capserve down --dry-run`` lists), read without starting a flow."""
    from capserve.core.teardown.plan import plan_teardown
    from capserve.tasks.eks_leftovers import eks_made_resources
    from capserve.tasks.settings import settings_from_environment
    from capserve.tasks.teardown.inventory import inventory_campaign

    region = spec.capacity.regions[0]
    settings = settings_from_environment().for_campaign(spec.campaign_settings()).teardown
    inventory = getattr(inventory_campaign, "fn", inventory_campaign)
    found = inventory(spec.campaign_id, region, kind=spec.cluster.kind,
                      existing_cluster=spec.cluster.existing_cluster_name, settings=settings)
    return [*plan_teardown(found, settings).resources(), *eks_made_resources(cluster, region)]


def run_matrix(world: World, points: list[KillPoint], signals: list[str], out: Path,
               progress: Any = print, first: int = 1, on_row: Any = None) -> list[Row]:
    """Every point × signal, one row after the other: the sandbox has one Kubernetes for every EKS cluster,
    so two campaigns' clusters up at once would see (and schedule on) each other's nodes. Campaigns are
    named ``faults-<NN>`` from ``first`` on (a name is never reused in one sandbox). Every point with the
    first signal, then every point with the next: a matrix stopped early still covers every point.
    ``on_row`` is called with the rows so far after each row."""
    rows: list[Row] = []
    for sig in signals:
        for point in points:
            index = first + len(rows)
            (out / f"faults-{index:02d}").mkdir(parents=True, exist_ok=True)
            row, spec, run_id, killed, survivors = kill_half(world, point, sig, index, out)
            rows.append(row)
            try:
                recover_half(world, row, spec, run_id, killed, survivors, out)
            except Exception as exc:  # noqa: BLE001 - one row's failure is that row's red, not the matrix's end
                row.notes.append(f"recovery failed: {type(exc).__name__}: {exc}")
            progress(f"{row.campaign}: {point.name} / {sig}: killed at {row.killed_at or '?'}: "
                     f"{'ok' if row.green else 'FAIL'} (purchases {row.purchases}, destroyed {row.destroyed}, "
                     f"left {row.leftovers}, orphans {row.orphans}, re-run {row.rerun_state}) {'; '.join(row.notes)}")
            if on_row is not None:
                on_row(rows)
    return rows
