"""The kill matrix: a campaign killed at every kill point in turn, each re-run recovering what the last kill broke.

One *chain* per signal. Its campaign is started as a deployment run (as a UI click would) on a victim worker;
once it reaches the first kill point, the worker and every process under it get the signal at once (what a
host shutdown, or systemd stopping the worker's unit, does). The same campaign is started again, the re-run an
operator would make, on the other victim worker; it must recover (adopt the block, skip what is done, finish
what was cut) and is itself killed at the next point; and so on to the last point. A last re-run on the
steady worker ends the campaign, ``capserve down`` tears it down, and the chain is counted.

Kill points are either a stage boundary (the campaign record says the stage ended) or a request the sandbox
holds (``capserve_sandbox.gates``) until the kill: the purchase after AWS bought, a checkpoint file
mid-download, a server-side apply, the LeaderWorkerSet's apply, a node group's deletion.

Why chains rather than one campaign per kill point: a row's cost is mostly fixed (a flow-run process starts,
a campaign buys, downloads and brings a cluster up), and campaigns cannot run side by side (the sandbox has
one Kubernetes for every EKS cluster). A chain pays the campaign's work once, and each kill costs one more
flow-run start; a killed run's slots are taken back at once (``capserve/tasks/slots.py``: its holder is
provably dead). Each kill is still met by a run that did not see it coming.
"""

from __future__ import annotations

import contextvars
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from prefect import get_client
from prefect.client.schemas.objects import StateType
from prefect.deployments import run_deployment

from capserve.core.cluster.naming import ClusterNames
from capserve.core.record import StageEntry
from capserve.core.settings import RecordSettings
from capserve.core.spec import CampaignSpec, load_spec
from capserve.core.stages import Stage, StageStatus
from faults.processes import alive, cwd, descendants, signal_all, this
from faults.world import ROOT, World

EXAMPLE = ROOT / "examples" / "kimi-k3-sandbox.yaml"
FINAL = {StateType.COMPLETED, StateType.FAILED, StateType.CRASHED, StateType.CANCELLED}
REACH_SECONDS = 240  # a run that has not reached its kill point by then: the row fails, saying so
RERUN_SECONDS = 600
SIGTERM_GRACE_SECONDS = 30  # what a process may take to stop on SIGTERM before it counts as left behind
SIGKILL_GRACE_SECONDS = 3
POD_GRACE_SECONDS = 30  # the kubelet stops a deleted node's pods (grace scaled down by the sandbox)
POLL_SECONDS = 0.5


@dataclass(frozen=True)
class KillPoint:
    name: str
    stage: Stage  # the stage the point ends (a boundary) or lies in: recovered once a re-run has ended it
    boundary: bool = False  # kill once the record shows ``stage`` ended; else the sandbox holds a request
    hold: str | None = None
    match: str = "*"
    teardown_when_done: bool = False  # the killed run tears down when done (to be killed inside teardown)


POINTS: tuple[KillPoint, ...] = (
    KillPoint("after plan", Stage.PLAN, boundary=True),
    KillPoint("inside purchase", Stage.ACQUIRE, hold="purchase"),
    KillPoint("after acquire", Stage.ACQUIRE, boundary=True),
    KillPoint("inside download", Stage.STAGE_WEIGHTS, hold="download", match="*.safetensors"),
    KillPoint("after stage_weights", Stage.STAGE_WEIGHTS, boundary=True),
    KillPoint("inside apply (bring_up)", Stage.BRING_UP, hold="apply"),
    KillPoint("after bring_up", Stage.BRING_UP, boundary=True),
    KillPoint("after weights_to_nodes", Stage.WEIGHTS_TO_NODES, boundary=True),
    KillPoint("inside rollout (LWS apply)", Stage.ROLLOUT, hold="apply", match="LeaderWorkerSet/*"),
    KillPoint("after rollout", Stage.ROLLOUT, boundary=True),
    KillPoint("after evaluate", Stage.EVALUATE, boundary=True),
    KillPoint("inside teardown (DeleteNodegroup)", Stage.TEARDOWN, hold="delete", match="eks:DeleteNodegroup:*",
              teardown_when_done=True),
)
# The last re-run of a chain is started with `capserve up` against the matrix's server (an operator's own
# server: the CLI starts and follows the run, a worker runs it), and the CLI gets the chain's signal once the
# run exists: the run must go on without it, and nothing of the CLI may outlive it.
CLI_POINT = KillPoint("capserve up, following the re-run", Stage.TEARDOWN)
CLI_CREATED = re.compile(r"campaign run ([0-9a-f-]{36}) created")
CLI_SECONDS = 240
SIGNALS = {"SIGKILL": signal.SIGKILL, "SIGTERM": signal.SIGTERM}
CLUSTER_STAGES = {Stage.BRING_UP, Stage.WEIGHTS_TO_NODES, Stage.ROLLOUT, Stage.EVALUATE, Stage.TEARDOWN}
ENDED = {StageStatus.COMPLETED.value, StageStatus.SKIPPED.value, StageStatus.STOPPED.value}


@dataclass
class Row:
    point: KillPoint
    signal: str
    campaign: str
    killed_at: str = ""  # what the kill interrupted (the held request, or the stage that had ended)
    killed_state: str = ""  # the killed run's Prefect state when the chain ended
    rerun_state: str = ""  # the state of the run after the kill (killed at the next point, or the last re-run's)
    purchases: int = -1  # the chain's, at its end
    destroyed: int = -1  # from this kill to the next (or to the final `capserve down`)
    leftovers: int = -1  # the chain's, after the final `capserve down`
    orphans: int = -1
    recover_seconds: float | None = None
    notes: list[str] = field(default_factory=list)
    # harness bookkeeping
    run_id: Any = None
    killed: float | None = None  # monotonic
    rerun_started: float | None = None  # monotonic: the run after the kill was started (recovery's clock)
    started_wall: float = 0.0  # time.time() when its run was started
    killed_wall: float | None = None  # time.time(), to compare with the sandbox's record of deletions
    before: StageEntry | None = None  # the record's entry for the point's stage when the kill went out

    def recovered(self) -> None:
        """The run after this row's kill is past its point: how long that took since the run was started (a
        re-run may wait for the other chain to let go of the sandbox's Kubernetes; that is not recovery)."""
        if self.recover_seconds is None and self.killed is not None:
            self.recover_seconds = time.monotonic() - (self.rerun_started or self.killed)

    @property
    def green(self) -> bool:
        return (self.purchases, self.destroyed, self.leftovers, self.orphans) == (1, 0, 0, 0) and self.rerun_state in (
            "Completed", "Inconclusive", "Killed"
        )


def campaign_spec(campaign: str, out: Path) -> CampaignSpec:
    """The demo spec under another name, its own weights bucket (so every chain downloads), two-week blocks and
    a small load."""
    data = yaml.safe_load(EXAMPLE.read_text())
    data["name"] = campaign
    # Every purchase moves the one sandbox clock to its block's start (the next 11:30 UTC), a day further
    # each time: two-week blocks keep the earlier chains' reservations active while later ones buy theirs.
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


class Watch:
    """What a chain polls, twice a second: its campaign's record and its runs' Prefect states.

    The record's place is resolved once (an STS call) and one Prefect client serves every look: built per
    look, the two cost the harness most of a core, which the runs it watches then lacked.
    """

    def __init__(self, spec: CampaignSpec) -> None:
        from capserve.tasks.locations import record_ref

        self._ref = record_ref(spec, RecordSettings())
        self._prefect = get_client(sync_client=True)

    def __enter__(self) -> Watch:
        self._prefect.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._prefect.__exit__(*exc)

    def state(self, run_id: Any) -> tuple[StateType, str]:
        run = self._prefect.read_flow_run(run_id)
        return run.state_type, (run.state_name or "")  # type: ignore[return-value]

    def entry(self, stage: Stage) -> StageEntry | None:
        from capserve.tasks.record_store import read_record

        try:
            stored = read_record(self._ref)
        except Exception:  # noqa: BLE001 - no bucket yet, or a read racing a write: look again
            return None
        return stored.record.stage(stage) if stored is not None else None


def _ended(entry: StageEntry | None) -> bool:
    return entry is not None and entry.status.value in ENDED


def _reach(world: World, watch: Watch, point: KillPoint, run_id: Any, previous: Row | None) -> str:
    """Wait until the run is at the kill point; what it is doing there. On the way, note when the run got past
    the previous kill (the previous row's time to recover)."""
    deadline = time.monotonic() + REACH_SECONDS
    while time.monotonic() < deadline:
        _note_recovery(previous, watch)
        if point.hold is not None:
            held = world.state()["holds"].get(point.hold, {}).get("held")
            if held:
                return str(held)
        elif _ended(watch.entry(point.stage)):
            return f"{point.stage.value} ended"
        state, name = watch.state(run_id)
        if state in FINAL:
            raise RuntimeError(f"the run ended ({name}) before reaching the kill point")
        time.sleep(POLL_SECONDS)
    raise RuntimeError(f"the run did not reach the kill point within {REACH_SECONDS} s")


def _note_recovery(row: Row | None, watch: Watch) -> None:
    """The re-run has recovered from ``row``'s kill once the killed point's stage has ended again (its entry
    in the record changed since the kill)."""
    if row is None or row.recover_seconds is not None or row.killed is None:
        return
    entry = watch.entry(row.point.stage)
    if _ended(entry) and entry != row.before:
        row.recovered()


def _kill(world: World, watch: Watch, row: Row, victim: int, *, needed_again: bool) -> None:
    """Signal the victim worker's whole tree, count who outlives the grace, let the held request go on; start the
    worker again if a later run of the chain goes to it."""
    worker = world.victims[victim]
    victims = [*this(worker.process.pid), *descendants(worker.process.pid)]
    row.before = watch.entry(row.point.stage)
    signal_all(victims, SIGNALS[row.signal])
    row.killed, row.killed_wall = time.monotonic(), time.time()
    grace = SIGTERM_GRACE_SECONDS if row.signal == "SIGTERM" else SIGKILL_GRACE_SECONDS
    deadline = time.monotonic() + grace
    while alive(victims) and time.monotonic() < deadline:
        time.sleep(0.2)
        worker.process.poll()  # reap the worker so it does not linger as a zombie
    if row.point.hold is not None:
        world.release(row.point.hold)  # the held request goes on, to a client that is gone
    survivors = alive(victims)
    signal_all(survivors, signal.SIGKILL)  # an operator would have to: they count as orphans
    row.orphans = len(survivors)
    # The next run goes to the other victim worker, already polling; this one is back before it is needed (a
    # chain's last two kills need no restart: the last re-run goes to the steady worker).
    if needed_again:
        world.restart_victim_soon(victim)


def run_chain(world: World, kills: list[tuple[KillPoint, str]], campaign: str, out: Path, *, victims: tuple[int, int],
              kube: Kube | None = None, progress: Any = print) -> list[Row]:
    """One campaign killed at each point with its signal in turn (in the pipeline's order), then ended, torn
    down, counted. Its runs alternate between the two ``victims`` workers; it takes ``kube`` (the sandbox's
    one Kubernetes) before its first cluster stage and lets it go once torn down."""
    spec = campaign_spec(campaign, out)
    cluster = ClusterNames(campaign_id=spec.campaign_id).eks_cluster
    rows: list[Row] = []
    kube = kube or Kube()
    with Watch(spec) as watch:
        try:
            for index, (point, sig) in enumerate(kills):
                if point.stage in CLUSTER_STAGES:
                    kube.take(campaign)
                victim = victims[index % 2]
                row = Row(point=point, signal=sig, campaign=campaign)
                previous = rows[-1] if rows else None
                world.wait_victim(victim)
                if point.hold is not None:
                    world.hold(point.hold, point.match)
                row.started_wall = time.time()
                if previous is not None:
                    previous.rerun_started = time.monotonic()
                row.run_id = _start(world, spec, out / campaign / f"{index + 1:02d}",
                                    teardown=point.teardown_when_done, queue=world.victim_queue(victim))
                try:
                    row.killed_at = _reach(world, watch, point, row.run_id, previous)
                except RuntimeError as exc:
                    row.notes.append(str(exc))
                if previous is not None:
                    previous.rerun_state = "Killed" if row.killed_at else watch.state(row.run_id)[1]
                    if row.killed_at:  # got past it (at the next point), the record perhaps not saying so
                        previous.recovered()
                _kill(world, watch, row, victim, needed_again=index + 2 < len(kills))
                rows.append(row)
                progress(f"{campaign}: {point.name} / {sig}: killed at {row.killed_at or '?'} "
                         f"(orphans {row.orphans}) {'; '.join(row.notes)}")
            kube.take(campaign)  # the last re-run and the teardown work on the cluster
            _finish(world, watch, rows, spec, cluster, out)
        finally:
            kube.give(campaign)
    return rows


def _cli_rerun(world: World, row: Row, spec_file: Path, out: Path) -> Any:
    """Start the last re-run as an operator would from a terminal, kill the CLI once its run exists; the run."""
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / "cli.log"
    with log_path.open("wb") as log:
        cli = subprocess.Popen(  # noqa: S603  # our own interpreter and fixed arguments
            [sys.executable, "-m", "capserve.cli", "up", str(spec_file), "--out", str(out)], env=world.env, cwd=ROOT,
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )
    deadline = time.monotonic() + CLI_SECONDS
    while not (found := CLI_CREATED.search(log_path.read_text(errors="replace"))):
        if cli.poll() is not None or time.monotonic() > deadline:
            cli.kill()
            raise RuntimeError(f"`capserve up` started no campaign run (exit {cli.poll()}; see {log_path})")
        time.sleep(POLL_SECONDS)
    row.killed_at = f"run {found.group(1)[:8]} created"
    victims = [*this(cli.pid), *descendants(cli.pid)]
    row.before = None
    signal_all(victims, SIGNALS[row.signal])
    row.killed, row.killed_wall = time.monotonic(), time.time()
    try:
        code = cli.wait(timeout=SIGTERM_GRACE_SECONDS if row.signal == "SIGTERM" else SIGKILL_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        code = None
    if row.signal == "SIGTERM" and code != 130:  # docs: stopped following, exit 130 (README, exit codes)
        row.notes.append(f"capserve up exited {code} on SIGTERM, not 130")
    survivors = alive(victims)
    signal_all(survivors, signal.SIGKILL)
    row.orphans = len(survivors)
    return found.group(1)


def _finish(world: World, watch: Watch, rows: list[Row], spec: CampaignSpec, cluster: str, out: Path) -> None:
    """The last re-run, from `capserve up` killed once the run exists, then ``capserve down``; the chain's
    counts go to every row."""
    last = rows[-1]
    cli = Row(point=CLI_POINT, signal=last.signal, campaign=last.campaign)
    rerun_started = cli.started_wall = time.time()
    last.rerun_started = time.monotonic()
    rows.append(cli)
    try:
        cli.run_id = _cli_rerun(world, cli, out / f"{last.campaign}.yaml", out / last.campaign / "rerun")
    except RuntimeError as exc:
        cli.notes.append(str(exc))
    if cli.run_id is not None:
        deadline = time.monotonic() + RERUN_SECONDS
        while (state := watch.state(cli.run_id))[0] not in FINAL and time.monotonic() < deadline:
            _note_recovery(last, watch)
            time.sleep(1)
        last.rerun_state = cli.rerun_state = state[1]  # the run after the last worker kill is the CLI's
        if state[0] is StateType.COMPLETED:
            cli.recovered()
            last.recovered()
    for row in rows[:-1]:
        row.killed_state = watch.state(row.run_id)[1]
    cli.killed_state = "—"  # the CLI is not a run: its run is the one that went on
    down_started = time.time()
    with (out / cli.campaign / "down.log").open("wb") as log:
        code = subprocess.run(  # noqa: S603  # our own interpreter and fixed arguments
            [sys.executable, "-m", "capserve.cli", "down", str(out / f"{cli.campaign}.yaml")], env=world.env,
            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, check=False,
        ).returncode
    if code != 0:
        cli.notes.append(f"capserve down exited {code} (see {out / cli.campaign / 'down.log'})")
    leftover = len(leftovers(spec, cluster))
    seen = world.state()
    purchases = sum(1 for r in seen["reservations"] if r["tags"].get("capserve.io/campaign") == cli.campaign)
    # Deletions a run asked for itself: the teardown of a run that had teardown_when_done on, until the last
    # re-run began. Any other deletion of the campaign's cluster before `capserve down` destroyed it.
    allowed = [(row.started_wall, rerun_started) for row in rows if row.point.teardown_when_done]
    deletions = [d["at"] for d in seen["deletes"]
                 if d["action"] in ("DeleteCluster", "DeleteNodegroup") and f"/clusters/{cluster}" in d["path"]
                 and not any(start <= d["at"] < end for start, end in allowed)]
    for row, following in zip(rows, [*rows[1:], None], strict=True):
        row.purchases, row.leftovers = purchases, leftover
        start = row.killed_wall or 0.0
        end = following.killed_wall if following is not None and following.killed_wall else down_started
        row.destroyed = sum(1 for at in deletions if start <= at < end)
    cli.orphans += _pods_left(seen["pid"], cli.campaign)


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
    from capserve.tasks.settings import settings_for
    from capserve.tasks.teardown.inventory import inventory_campaign

    region = spec.capacity.regions[0]
    settings = settings_for(spec).teardown
    inventory = getattr(inventory_campaign, "fn", inventory_campaign)
    found = inventory(spec.campaign_id, region, kind=spec.cluster.kind,
                      existing_cluster=spec.cluster.existing_cluster_name, settings=settings)
    return [*plan_teardown(found, settings).resources(), *eks_made_resources(cluster, region)]


def chains(points: list[KillPoint], signals: list[str]) -> list[list[tuple[KillPoint, str]]]:
    """The matrix as chains: one per signal, through every point in the pipeline's order."""
    ordered = [p for p in POINTS if p in points]
    return [[(point, sig) for point in ordered] for sig in signals]


class Kube:
    """The sandbox's one Kubernetes, taken by one chain at a time: two campaigns' clusters up at once would see
    (and schedule on) each other's nodes. A chain's first stages (plan, purchase, download) need none."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holder: str | None = None
        self.takers: set[str] = set()

    def take(self, campaign: str) -> None:
        if self._holder == campaign:
            return
        self._lock.acquire()
        self._holder = campaign
        self.takers.add(campaign)

    def give(self, campaign: str) -> None:
        if self._holder == campaign:
            self._holder = None
            self._lock.release()


def run_matrix(world: World, plan: list[list[tuple[KillPoint, str]]], out: Path,
               progress: Any = print, first: int = 1, on_row: Any = None) -> list[Row]:
    """The chains, two at a time in a pipeline: a chain starts once the one before has taken the sandbox's
    Kubernetes (so that one before it has ended), and meanwhile makes its plan, purchase and download kills.
    Their holds (purchase, download) are never the cluster stages' (apply, delete), and each chain has its own
    two victim workers. Campaigns are named ``faults-<NN>`` from ``first`` on (a name is never reused in one
    sandbox). ``on_row`` is called with the rows so far after each chain."""
    if len(world.victims) < 2 * min(len(plan), 2):
        raise ValueError(f"{len(plan)} chains need {2 * min(len(plan), 2)} victim workers; the world has "
                         f"{len(world.victims)}")
    kube = Kube()
    results: dict[int, list[Row]] = {}
    done = threading.Lock()

    def chain(number: int, kills: list[tuple[KillPoint, str]], victims: tuple[int, int]) -> None:
        campaign = f"faults-{number:02d}"
        (out / campaign).mkdir(parents=True, exist_ok=True)
        try:
            rows = run_chain(world, kills, campaign, out, victims=victims, kube=kube, progress=progress)
        except Exception as exc:  # noqa: BLE001 - one chain's failure is its rows' red, not the matrix's end
            progress(f"{campaign}: the chain stopped: {type(exc).__name__}: {exc}")
            rows = []
        with done:
            results[number] = rows
            for row in rows:
                progress(f"{campaign}: {row.point.name} / {row.signal}: {'ok' if row.green else 'FAIL'} (purchases "
                         f"{row.purchases}, destroyed {row.destroyed}, left {row.leftovers}, orphans "
                         f"{row.orphans}, recovered in {row.recover_seconds or float('nan'):.0f} s, then "
                         f"{row.rerun_state}) {'; '.join(row.notes)}")
            if on_row is not None:
                on_row([row for key in sorted(results) for row in results[key]])

    threads: list[threading.Thread] = []
    for offset, kills in enumerate(plan):
        number = first + offset
        # In this thread's context: Prefect's API URL is a context setting (faults.world), which a new thread
        # would not see (its client would start a temporary server of its own).
        context = contextvars.copy_context()
        thread = threading.Thread(target=context.run,
                                  args=(chain, number, kills, (2 * (offset % 2), 2 * (offset % 2) + 1)))
        threads.append(thread)
        thread.start()
        while thread.is_alive() and f"faults-{number:02d}" not in kube.takers:
            time.sleep(1)
    for thread in threads:
        thread.join()
    return [row for key in sorted(results) for row in results[key]]
