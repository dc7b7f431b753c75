"""``capserve up`` (the default): the campaign as a deployment run on a real Prefect server, followed here.

Without ``PREFECT_API_URL`` it starts a local ``prefect server`` (home and SQLite under ``<out>/prefect``)
while the sandbox comes up, registers capserve's deployments (``capserve deploy``), starts a process worker
(``capserve.runtime.prefect_server``), triggers the ``campaign`` deployment exactly as a click in the UI does,
prints each state change, then follows the runs the lease scheduled (prepare-cluster, serve, drain, teardown) until
none is left to run: on a server the campaign run only prepares and buys, so ``--teardown-when-done`` too follows until
the teardown has run. It stops what it started (``--keep-server`` leaves the server and the worker up and
prints the UI's address). With ``PREFECT_API_URL`` set it starts and registers nothing: the deployments are already
there (``capserve deploy``; it refuses, saying so, when they are not) and a worker of yours runs the campaign.

Ctrl-C or SIGTERM stops following, and says what is true for the mode. With ``--sandbox`` the stand-ins (the
sandbox's AWS, Kubernetes and Hub) live in this command and die with it: the runs cannot go on, so the campaign's
unfinished runs (the campaign run, drain, teardown, Hub watches) are cancelled rather than left to fail, and
nothing real was ever bought. Otherwise, on a server of yours the runs go on; on the server this command started
they stop with it (the server and worker are stopped as it exits): the scheduled runs fire only once a server
with a worker runs again, so the cluster is left to ``capserve down`` and the reaper. Every path ends with the
closing summary (``capserve.cli.console``) read from report.json.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from capserve.cli.console import block_unused, print_summary, read_report
from capserve.cli.exit_codes import ExitCode
from capserve.core.errors import SpecError
from capserve.core.progress import state_text
from capserve.runtime.prefect_server import (
    Child,
    LocalServer,
    ServerError,
    register,
    start_server,
    start_worker,
    stop_together,
)
from capserve.runtime.watchdog import keep

if TYPE_CHECKING:
    from capserve.cli.progress_view import ProgressFollower, ProgressView

FINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}
# A worker asks for runs every 10 s by default (PREFECT_WORKER_QUERY_SECONDS, docs/prefect.md): a run still
# scheduled after four of its polls has no worker, and the person hears so within a minute.
NO_WORKER_AFTER_S = 45
LOGS_LAG_S = 3.0  # a run's last log lines reach the server after its end (Prefect sends them in 2-s batches)


@dataclass(frozen=True)
class Registered:
    """A Prefect server with capserve's deployments on it: its API URL, and what a worker needs to reach it."""

    url: str
    env: dict[str, str]
    started: bool  # this command started it (and starts the worker)
    server: Child | None = None  # the server process, when this command started it


@contextmanager
def server_in_background(out_dir: Path, *, keep_server: bool, console: Console) -> Iterator[Future[Registered]]:
    """Start the local server (unless ``PREFECT_API_URL`` is set) and register the deployments in a thread, while
    the caller brings the sandbox up; the server is stopped on exit unless ``keep_server``. Left before the server
    was used (Ctrl-C, SIGTERM, a stand-in that failed at its start), the command does not wait for the server to
    finish starting, nor registers the deployments: the start is abandoned and the server stopped."""
    logs = out_dir.resolve() / "prefect"
    started: list[LocalServer] = []
    abandoned = threading.Event()

    def bring_up() -> Registered:
        url = os.environ.get("PREFECT_API_URL")
        if url is not None:  # the user's server: `capserve deploy` registered there (require_deployments checked)
            return Registered(url=url, env={}, started=False)
        # --keep-server's server is the user's to stop: it finishes starting whatever happens here.
        server = start_server(logs / "home", tethered=not keep_server, abandoned=None if keep_server else abandoned)
        started.append(server)
        if keep_server:
            keep(server.child.process.pid)
        elif abandoned.is_set():
            raise ServerError("the local Prefect server's start was abandoned")
        # The runs' working directory is this command's, as for a run in this process: a spec's relative paths
        # (a golden set) resolve as they did here, from a checkout or not.
        register(Path.cwd(), {**os.environ, **server.env}, logs / "register.log")
        return Registered(url=server.url, env=server.env, started=True, server=server.child)

    if "PREFECT_API_URL" not in os.environ:
        console.print("starting a local Prefect server (its services, SQLite under the output folder)…")
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="prefect-server") as pool:
        future = pool.submit(bring_up)
        try:
            yield future
        finally:
            abandoned.set()  # a start still under way gives up; a server already registered is not affected
            future.exception()  # wait: a server half-started must still be stopped
            if started and not keep_server:
                started[0].child.stop()


@dataclass(frozen=True)
class HubWatches:
    """Hub watches to ask for once the campaign run has scheduled its lease: the sandbox's block
    publishes revisions at times its clock knows only then (``capserve_sandbox.revisions``)."""

    regions: list[str]  # where the watcher looks for campaign records
    times: Callable[[], list[datetime]]  # when, on the campaign's clock


def run_on_server(
    parameters: dict[str, Any], *, campaign_id: str, out_dir: Path, worker_env: dict[str, str], keep_server: bool,
    console: Console, server: Future[Registered], follow_window: bool = False, watches: HubWatches | None = None,
    run_env: dict[str, str] | None = None, sandbox: bool = False, teardown_when_done: bool = False,
    health: Callable[[], None] | None = None,
) -> int:
    """Start a worker (with a server this command started), run the campaign deployment, follow it, print the
    closing summary; the exit code. ``health`` is called while the server starts and at every look while
    following; what it raises stops the command (with the sandbox, a stand-in that failed:
    ``capserve.cli.sandbox_checks``)."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from capserve.cli.progress_view import ProgressFollower, ProgressView
    from capserve.tasks.the_clock import clock

    logs = out_dir.resolve() / "prefect"
    kept: list[Child] = []  # the worker left running with --keep-server (the server is server_in_background's)
    with ExitStack() as stack:
        registered = _when_ready(server, health or _healthy)
        console.print(f"{'registered' if registered.started else 'using'} capserve's deployments on {registered.url}",
                      highlight=False)
        if registered.started:
            worker = start_worker(Path.cwd(), {**os.environ, **worker_env, **registered.env}, logs / "worker.log",
                                  tethered=not keep_server)
            if not keep_server:
                # The worker and the server stop together (the server's own stop afterwards finds it gone).
                stack.callback(stop_together, [worker, *([registered.server] if registered.server else [])])
            else:
                keep(worker.process.pid)
                kept.append(worker)
        stack.enter_context(temporary_settings({PREFECT_API_URL: registered.url}))
        since = datetime.now(UTC)  # the runs to follow are this campaign run's, not an earlier one's
        view = ProgressView(console, block_now=lambda: clock().now(), block_start=_BlockStart(out_dir))
        campaign_run: list[str] = []  # the campaign run's id, once created
        stack.callback(view.close)
        progress = ProgressFollower(campaign_id, since, view)
        try:
            state = _run_and_follow(parameters, view, run_env or {}, progress, health or _healthy,
                                    started=campaign_run)
            if follow_window and state[0] == "COMPLETED":
                if watches is not None:
                    _ask_for_watches(campaign_id, watches, out_dir, console)
                _follow_scheduled(campaign_id, since, view, progress, health or _healthy)
            progress.poll(now=True)  # the last acts (the teardown's end) before the summary
        except KeyboardInterrupt:
            view.close()
            for line in _interrupted(campaign_id, since, sandbox=sandbox,
                                     ours=registered.started and not keep_server, campaign_runs=campaign_run):
                console.print(line, highlight=False)
            state = ("INTERRUPTED", "")
        finally:
            view.close()
            _print_schedule(campaign_id, since, console)
            if keep_server:
                _print_kept(registered, kept, console)
    print_summary(out_dir)  # on every path, last
    if state[0] == "INTERRUPTED":
        return int(ExitCode.INTERRUPTED)
    return _exit_code(state, out_dir, teardown_when_done=teardown_when_done)


class _BlockStart:
    """The block's start, once the campaign run has written its lease to report.json (read until found)."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = out_dir
        self.found: datetime | None = None

    def __call__(self) -> datetime | None:
        if self.found is None:
            start = _lease_in_report(self.out_dir).get("start")
            self.found = datetime.fromisoformat(str(start)) if start else None
        return self.found


def _interrupted(
    campaign_id: str, since: datetime, *, sandbox: bool, ours: bool, campaign_runs: Sequence[str] = ()
) -> list[str]:
    """What Ctrl-C leaves, true for the mode; with the sandbox, the runs not yet over (the campaign run, the pending
    scheduled ones) are cancelled: against stand-ins that are gone they could only fail."""
    if sandbox:
        cancelled = _cancel_unfinished(campaign_id, since, campaign_runs)
        return [
            "stopped: the sandbox's stand-ins (its AWS, Kubernetes and Hub) ran in this command and stop with it, so "
            "the campaign's runs cannot go on; nothing real was bought or built",
            f"cancelled the campaign's {cancelled} unfinished run(s) (the campaign run, drain, teardown, Hub "
            "watches): against a sandbox that is gone they could only fail; `capserve up --sandbox` again starts "
            "a new block",
        ]
    if ours:
        return ["stopped: the Prefect server and worker this command started stop with it, so the campaign's runs "
                "stop too and the scheduled ones fire only once a server with a worker runs again; run `capserve "
                "down SPEC` to delete what the campaign made"]
    return ["stopped following; the campaign's runs go on on the server without this terminal (its cluster is left "
            "to the scheduled teardown and the reaper)"]


def _cancel_unfinished(campaign_id: str, since: datetime, campaign_runs: Sequence[str]) -> int:
    from capserve.tasks.scheduling import cancel_run, read_run_state, read_runs_about

    try:
        unfinished = [run.flow_run_id for run in read_runs_about(campaign_id, since=since) if run.pending]
        unfinished += [run for run in campaign_runs if read_run_state(run) not in FINAL]
        for run_id in unfinished:
            cancel_run(run_id, "cancelled by capserve up: the sandbox it ran against stopped with it")
    except Exception:  # noqa: BLE001 - the server may be going down too; the summary and `capserve status` say what is left
        return 0
    return len(unfinished)


def _print_kept(registered: Registered, kept: list[Child], console: Console) -> None:
    """Where the server and worker left running are, and how to stop them (each leads its own process group)."""
    console.print(f"Prefect UI: {registered.url.removesuffix('/api')}", highlight=False)
    if not registered.started:
        return  # a server of the user's: nothing of ours is running
    groups = [str(child.process.pid) for child in [*([registered.server] if registered.server else []), *kept]]
    console.print(
        "the Prefect server and worker this command started are left running; stop them with "
        f"kill -INT -- {' '.join('-' + g for g in groups)}",
        highlight=False,
    )


def require_deployments(console: Console) -> None:
    """Refuse (exit 2) when the server ``PREFECT_API_URL`` names lacks a deployment of capserve's, naming them and
    ``capserve deploy``: a campaign there would stop at the first run it starts or schedules."""
    from prefect import get_client
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterName

    from capserve.cli.inputs import prefect_api_url
    from capserve.deployments import definitions

    api = prefect_api_url("capserve up")
    wanted = [definition.name for definition in definitions()]
    with get_client(sync_client=True) as client:
        found = client.read_deployments(deployment_filter=DeploymentFilter(name=DeploymentFilterName(any_=wanted)))
    missing = sorted(set(wanted) - {deployment.name for deployment in found})
    if missing:
        raise SpecError(f"the Prefect server at {api} has no capserve deployment {', '.join(missing)}: run "
                        "`capserve deploy` with the same PREFECT_API_URL first (it registers them and the automations)")
    console.print(f"capserve's deployments are on {api}", highlight=False)


def _when_ready(server: Future[Registered], health: Callable[[], None]) -> Registered:
    """The server once started and registered, ``health`` checked while it starts: a stand-in that failed meanwhile
    ends the command before a worker starts or a run is created (server_in_background abandons the start)."""
    while True:
        health()
        try:
            return server.result(timeout=1.0)
        except TimeoutError:
            continue


def _healthy() -> None:
    """Nothing to check while following (no sandbox)."""


def _run_and_follow(
    parameters: dict[str, Any], view: ProgressView, run_env: dict[str, str], progress: ProgressFollower,
    health: Callable[[], None], started: list[str],
) -> tuple[str, str]:
    from prefect import get_client
    from prefect.deployments import run_deployment

    job_variables = {"env": run_env} if run_env else None
    created_run: Any = run_deployment("campaign/campaign", parameters=parameters, timeout=0,
                                      job_variables=job_variables)
    started.append(str(created_run.id))
    view.say(f"campaign run {created_run.id} created (as a UI click would)")
    created: float | None = time.monotonic()
    last = ("", "")
    with get_client(sync_client=True) as client:
        while True:
            run = client.read_flow_run(created_run.id)
            now = (run.state_type.value if run.state_type else "", run.state_name or "")
            if now != last:
                progress.poll(now=True)  # what the run told before this change comes before it
                view.state(run.name, now[0], state_text(*now))
                last = now
            if now[0] in FINAL:
                return now
            if now[0] == "SCHEDULED" and created is not None and time.monotonic() - created > NO_WORKER_AFTER_S:
                created = None  # said once
                pool = run.work_pool_name or "(the campaign deployment's)"
                view.say(f"no worker has picked up {run.name} in {NO_WORKER_AFTER_S} s: is one running for work pool "
                         f"{pool}? start one with `prefect worker start --pool {pool}` (still waiting; Ctrl-C stops "
                         "waiting, the run stays scheduled)")
            progress.poll()
            health()
            time.sleep(2)


def _ask_for_watches(campaign_id: str, watches: HubWatches, out_dir: Path, console: Console) -> None:
    from capserve.tasks.scheduling import pause_wall_clock_watches, schedule_hub_watch

    reservation = _reservation_in_report(out_dir)
    if reservation is None:
        console.print(f"  sandbox: no lease in {out_dir / 'report.json'}: no Hub watch is asked for", highlight=False)
        return
    pause_wall_clock_watches()
    console.print("  sandbox: the hub-watcher's every-10-minutes schedule (wall time) is off on this server: "
                  "the sandbox's block has a watch after each revision instead", highlight=False)
    for at in watches.times():
        schedule_hub_watch(campaign_id, watches.regions, at, reservation_id=reservation)
        console.print(f"  sandbox: a Hub watch at {at:%Y-%m-%d %H:%M} UTC (block time), just after the Hub publishes "
                      "a new revision", highlight=False)


def _reservation_in_report(out_dir: Path) -> str | None:
    """The reservation the campaign run holds, as its report says (the run wrote it to ``out_dir``)."""
    found = _lease_in_report(out_dir).get("reservation_id")
    return str(found) if found else None


def _lease_in_report(out_dir: Path) -> dict[str, Any]:
    try:
        lease = json.loads((out_dir / "report.json").read_text()).get("lease") or {}
    except (OSError, ValueError):
        return {}
    return lease if isinstance(lease, dict) else {}


def _follow_scheduled(
    campaign_id: str, since: datetime, view: ProgressView, progress: ProgressFollower, health: Callable[[], None]
) -> None:
    """Follow the runs the lease scheduled (serve at the start, drain, teardown), and the Hub watches and
    redeploys of the campaign, until none is left to run."""
    from capserve.tasks.scheduling import read_runs_about

    view.say("following the scheduled runs until the teardown (Ctrl-C stops following)")
    last: dict[str, str] = {}
    ended_at: dict[str, float] = {}  # run → when its end was first seen (its last lines may still be on the way)
    while True:
        runs = read_runs_about(campaign_id, since=since)
        changed = [run for run in runs if last.get(run.flow_run_id) != (run.state_name or run.state_type)]
        ready = [run for run in changed if run.state_type not in FINAL
                 or time.monotonic() - ended_at.setdefault(run.flow_run_id, time.monotonic()) >= LOGS_LAG_S]
        if ready:
            progress.poll(now=True)  # what the runs told before these changes comes before them
        for run in ready:
            now = run.state_name or run.state_type
            view.state(run.name, run.state_type, state_text(run.state_type, run.state_name))
            last[run.flow_run_id] = now
        if runs and len(ready) == len(changed) and all(run.state_type in FINAL for run in runs):
            return
        progress.poll()
        health()
        time.sleep(1)


def _print_schedule(campaign_id: str, since: datetime, console: Console) -> None:
    from capserve.tasks.scheduling import read_runs_about

    try:
        runs = read_runs_about(campaign_id, since=since)
    except Exception as exc:  # noqa: BLE001 - the server may be gone; the report lists them too
        console.print(f"could not list the scheduled runs: {type(exc).__name__}")
        return
    for run in runs:
        when = f"{run.scheduled_at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC" if run.scheduled_at else "—"
        console.print(
            f"  scheduled: {run.name} at {when} (wall time) — {state_text(run.state_type, run.state_name)}",
            highlight=False,
        )
    console.print("  the report gives each run's time and when it fired on the campaign's (block's) clock",
                  highlight=False)


def _exit_code(state: tuple[str, str], out_dir: Path, *, teardown_when_done: bool = False) -> int:
    report = read_report(out_dir) or {}
    verdict = (report.get("evaluation") or {}).get("verdict")
    if teardown_when_done and block_unused(report):
        return int(ExitCode.FAILED)  # the block was torn down unserved: never a success (the summary says so)
    if state[0] == "COMPLETED":
        return int(ExitCode.INVALID if verdict == "invalid" else ExitCode.OK)
    return int(ExitCode.FAILED)
