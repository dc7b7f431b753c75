"""``capserve up --prefect-server``: the campaign as a deployment run on a real Prefect server, followed here.

Without ``PREFECT_API_URL`` it starts a local ``prefect server`` (home and SQLite under ``<out>/prefect``)
and a process worker (``capserve.runtime.prefect_server``), registers deployments/prefect.yaml, triggers
the ``campaign`` deployment exactly as a click in the UI does, and prints each state change and, at the
end, the runs the lease scheduled. It stops what it started (``--keep-server`` leaves the server and the
worker up and prints the UI's address). With ``PREFECT_API_URL`` set it registers on that server and
starts nothing: a worker of yours runs the campaign.

Ctrl-C or SIGTERM stops following; the campaign run is left to its own fate (its cluster to the
scheduled teardown and the reaper), and the children this command started are stopped.
"""

from __future__ import annotations

import json
import os
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from rich.console import Console

from capserve.cli.exit_codes import ExitCode
from capserve.runtime.prefect_server import PREFECT_YAML, register, start_server, start_worker

ROOT = Path(__file__).resolve().parents[2]
FINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}


def run_on_server(
    parameters: dict[str, Any], *, campaign_id: str, out_dir: Path, worker_env: dict[str, str], keep_server: bool,
    console: Console,
) -> int:
    """Register, start what is missing, run the campaign deployment, follow it; the exit code."""
    if not (ROOT / PREFECT_YAML).exists():
        console.print(f"[red]error:[/red] no {PREFECT_YAML} under {ROOT}: --prefect-server runs from a checkout")
        return int(ExitCode.BAD_INPUT)
    from prefect.settings import PREFECT_API_URL, temporary_settings

    logs = out_dir.resolve() / "prefect"
    with ExitStack() as stack:
        url = os.environ.get("PREFECT_API_URL")
        env = {**os.environ, **worker_env}
        if url is None:
            console.print("starting a local Prefect server (its services, SQLite under the output folder)…")
            server = start_server(logs / "home")
            env.update(server.env)
            url = server.url
            if not keep_server:
                stack.callback(server.child.stop)
        console.print(f"registering {PREFECT_YAML} on {url}", highlight=False)
        register(ROOT, env, logs / "register.log")
        if "PREFECT_API_URL" not in os.environ:
            worker = start_worker(ROOT, env, logs / "worker.log")
            if not keep_server:
                stack.callback(worker.stop)
        stack.enter_context(temporary_settings({PREFECT_API_URL: url}))
        try:
            state = _run_and_follow(parameters, console)
        except KeyboardInterrupt:
            console.print("stopped following; the campaign run goes on without this terminal "
                          "(its cluster is left to the scheduled teardown and the reaper)")
            return int(ExitCode.INTERRUPTED)
        finally:
            _print_schedule(campaign_id, console)
            if keep_server:
                console.print(f"Prefect UI: {url.removesuffix('/api')} (server and worker left running)")
    return _exit_code(state, out_dir)


def _run_and_follow(parameters: dict[str, Any], console: Console) -> tuple[str, str]:
    from prefect import get_client
    from prefect.deployments import run_deployment

    started: Any = run_deployment("campaign/campaign", parameters=parameters, timeout=0)
    console.print(f"campaign run {started.id} created (as a UI click would)", highlight=False)
    last = ("", "")
    with get_client(sync_client=True) as client:
        while True:
            run = client.read_flow_run(started.id)
            now = (run.state_type.value if run.state_type else "", run.state_name or "")
            if now != last:
                console.print(f"  {run.name}: {now[1]} ({now[0]})", highlight=False)
                last = now
            if now[0] in FINAL:
                return now
            time.sleep(2)


def _print_schedule(campaign_id: str, console: Console) -> None:
    from capserve.tasks.scheduling import read_campaign_runs

    try:
        runs = read_campaign_runs(campaign_id)
    except Exception as exc:  # the server may be gone; the report lists them too
        console.print(f"could not list the scheduled runs: {type(exc).__name__}")
        return
    for run in sorted(runs, key=lambda r: r.scheduled_at.isoformat() if r.scheduled_at else ""):
        when = run.scheduled_at.isoformat() if run.scheduled_at else "—"
        console.print(f"  scheduled: {run.name} at {when} — {run.state_name or run.state_type}", highlight=False)


def _exit_code(state: tuple[str, str], out_dir: Path) -> int:
    report_path = out_dir / "report.json"
    verdict = None
    if report_path.exists():
        evaluation = json.loads(report_path.read_text()).get("evaluation") or {}
        verdict = evaluation.get("verdict")
    if state[0] == "COMPLETED":
        return int(ExitCode.INVALID if verdict == "invalid" else ExitCode.OK)
    return int(ExitCode.FAILED)
