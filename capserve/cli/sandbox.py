"""``capserve sandbox``: the sandbox's stand-ins as a service a Prefect worker can run campaigns against.

It keeps moto (with capserve's extensions: Capacity Blocks, training plans, EKS/HyperPod states), the fake
Kubernetes (pods run as local processes), the local Hub and the OpenAI stand-in up in this one process,
writes the environment a worker needs to a file (``--env-file``, mode 0600: it holds the sandbox's dummy
credentials) and waits until Ctrl-C or SIGTERM, then stops everything it started.

    capserve sandbox --env-file out/sandbox/worker.env &
    set -a; . out/sandbox/worker.env; set +a
    prefect worker start --pool capserve

The stand-ins keep their state in memory for as long as the service runs, so the worker, re-runs of a
campaign and crash tests all see one "AWS" and one "cluster"; it is lost when the service stops. The file
also names a loopback control endpoint (``CAPSERVE_SANDBOX_CONTROL``, ``sandbox/capserve_sandbox/control.py``)
where a harness holds requests and reads what the sandbox sold and deleted (the fault matrix, docs/faults.md).

``capserve up --sandbox`` starts the same stand-ins for the one command (``up_options``, ``started_for_up``): this is
the one module of ``capserve/`` that knows their block may be simulated. It plugs the sandbox's clock in (on the
server ``capserve up`` starts itself), says so on the console, and refuses a simulated window on the user's own
server; every other module asks the clock port (``capserve.core.clock``) and never knows how the block is played.
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, ModuleType
from typing import TYPE_CHECKING, Any

from rich.console import Console

from capserve.cli.arg_types import served_name
from capserve.cli.down import _region
from capserve.cli.exit_codes import ExitCode
from capserve.cli.inputs import writable_dir
from capserve.cli.sandbox_checks import Promise, promised_acts
from capserve.cli.stand_ins import stand_in
from capserve.core.errors import SpecError
from capserve.tasks.the_clock import clock_environment

if TYPE_CHECKING:
    from capserve.cli._server import HubWatches
    from capserve.core.spec import CampaignSpec

WORKER_ENV_KEYS = (
    "AWS_ENDPOINT_URL",
    "AWS_DEFAULT_REGION",
    "AWS_REGION",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_EC2_METADATA_DISABLED",
    "HF_HUB_DISABLE_XET",
    "CAPSERVE_REGISTRY_TOOL",  # the image stage's registry tool: the sandbox's stand-in for crane
    "CAPSERVE_COST__PRICE_LIST_API",  # moto has no Price List API: the ledger prices from the packaged table
)
SHOWN_KEYS = ("AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION", "CAPSERVE_HUB_ENDPOINT", "CAPSERVE_SANDBOX_INFERENCE")


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "sandbox",
        help="keep the sandbox's stand-ins up as a service and write the environment a worker needs",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    parser.add_argument("--region", type=_region, default="us-east-2", help="the sandbox's default AWS region")
    parser.add_argument("--model", type=served_name, default="kimi-k3", help="model name the OpenAI stand-in serves")
    parser.add_argument(
        "--simulate",
        action="store_true",
        help="play reservations on a simulated clock (fast between a campaign's scheduled runs, near wall time "
        "around them) instead of jumping to their start",
    )
    parser.add_argument(
        "--env-file", type=Path, default=Path("out/sandbox/worker.env"),
        help="where to write the worker's environment (KEY=value lines, mode 0600)",
    )
    parser.set_defaults(func=run)


def worker_environment(environ: dict[str, str], *, hub: str, inference: str) -> dict[str, str]:
    """What a worker process needs to reach the sandbox, taken from this process's patched environment."""
    found = {key: environ[key] for key in WORKER_ENV_KEYS if key in environ} | clock_environment(environ)
    return {**found, "CAPSERVE_HUB_ENDPOINT": hub, "CAPSERVE_SANDBOX_INFERENCE": inference}


def write_env_file(path: Path, env: dict[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.writelines(f"{key}={value}\n" for key, value in sorted(env.items()))


def run(args: argparse.Namespace) -> int:
    # Checked before anything starts: a folder or an unwritable place for the file is the user's to fix.
    if args.env_file.is_dir():
        raise SpecError(f"--env-file: {args.env_file} is a folder; give the path of a file to write")
    writable_dir(args.env_file.parent, "--env-file")
    environment, controls = stand_in("environment"), stand_in("control")

    console = Console()
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        simulate = environment.Simulation() if args.simulate else None
        with (
            environment.sandbox(served_model_name=args.model, region=args.region, simulate=simulate) as far_ends,
            controls.control_endpoint() as control,
        ):
            env = worker_environment(dict(os.environ), hub=far_ends.hub, inference=far_ends.inference)
            env["CAPSERVE_SANDBOX_CONTROL"] = control  # for harnesses (python -m faults); a worker ignores it
            write_env_file(args.env_file, env)
            for key in SHOWN_KEYS:
                console.print(f"{key}={env[key]}", highlight=False)
            console.print(
                f"worker environment (with the sandbox's dummy credentials): {args.env_file}\n"
                f"  set -a; . {args.env_file}; set +a; prefect worker start --pool capserve\n"
                "Ctrl-C stops the sandbox.",
                highlight=False,
            )
            stop.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    console.print("sandbox stopped", highlight=False)
    return int(ExitCode.OK)


# `capserve up --sandbox`


def up_options(parser: argparse.ArgumentParser) -> None:
    """``capserve up``'s sandbox options: ``--sandbox``, and how its block is played (``--real-time``,
    ``--revisions``)."""
    parser.add_argument(
        "--sandbox",
        action="store_true",
        help="run against local stand-ins on 127.0.0.1 (moto, …) instead of AWS; nothing leaves this machine",
    )
    parser.add_argument(
        "--real-time",
        action="store_true",
        help="with --sandbox on a local server: do not simulate the block (by default the sandbox plays it at "
        "5760× wall time between scheduled runs and 60× around them, so the demo shows the whole window)",
    )
    parser.add_argument(
        "--revisions",
        default="good,bad",
        type=revisions_option,
        metavar="LIST",
        help="with the simulated sandbox: new revisions of the model the local Hub publishes while the campaign "
        "serves, in order, each redeployed by the revision-published automation: 'good' passes the gates, 'bad' "
        "fails the quality gate (its redeploy rolls back); 'none' for none (default: good,bad)",
    )


def revisions_option(value: str) -> tuple[bool, ...]:
    """``good,bad`` → (True, False); ``none`` → ()."""
    words = [word.strip().lower() for word in value.split(",") if word.strip()]
    if words == ["none"]:
        return ()
    unknown = sorted(set(words) - {"good", "bad"})
    if unknown or not words or len(words) > 4:
        raise argparse.ArgumentTypeError(
            f"{value!r}: give up to 4 of 'good' and 'bad', comma-separated (e.g. good,bad), or 'none'"
        )
    return tuple(word == "good" for word in words)


def refuse_up_on_your_server(args: argparse.Namespace) -> None:
    """Refuse ``up --sandbox`` as a deployment run on the user's server (``PREFECT_API_URL``) unless it tears down
    when done: the simulated window is the clock of the server and worker ``capserve up`` starts (make demo's); on
    the user's server the lease's scheduled runs would fire on wall time, a day or more later, long after these
    stand-ins (this command's) are gone."""
    if args.sandbox and not args.in_process and not args.teardown_when_done and "PREFECT_API_URL" in os.environ:
        raise SpecError(
            "--sandbox with PREFECT_API_URL: the sandbox plays its simulated window only on the server capserve up "
            "starts itself; on yours the scheduled serve, drain and teardown runs would wait for the block on wall "
            "time (a day or more) after this command's stand-ins are gone. Unset PREFECT_API_URL to play the "
            "window (as make demo does), or add --teardown-when-done to buy, serve, evaluate and tear down in one run"
        )


@dataclass(frozen=True)
class StartedForUp:
    """The sandbox ``capserve up`` started: where its stand-ins are, and what the run must show before it says 0."""

    far_ends: Any  # capserve_sandbox.environment.SandboxEndpoints
    promise: Promise

    @property
    def hub(self) -> str:
        return str(self.far_ends.hub)

    def worker_environment(self) -> dict[str, str]:
        """What a worker of the user's needs to reach these stand-ins (dummy credentials only)."""
        return worker_environment(dict(os.environ), hub=self.far_ends.hub, inference=self.far_ends.inference)

    def hub_watches(self, regions: Sequence[str]) -> HubWatches | None:
        """The Hub watches to ask for once the lease is scheduled, when the Hub publishes revisions mid-block."""
        schedule = self.far_ends.revisions
        if schedule is None:
            return None
        from capserve.cli._server import HubWatches

        return HubWatches(regions=list(regions), times=lambda: [p.watch_at for p in schedule.publications])


@contextmanager
def started_for_up(
    stand_ins: ModuleType, args: argparse.Namespace, spec: CampaignSpec, *, out_dir: Path, console: Console
) -> Iterator[StartedForUp]:
    """The stand-ins for one ``capserve up --sandbox``, up while the block is open, stopped after it. On the server
    the command starts itself (no ``--in-process``, no ``PREFECT_API_URL``), unless ``--real-time``, the block is
    simulated: its clock is plugged in and the Hub publishes ``--revisions`` mid-block; the console says so."""
    on_a_server = not args.in_process
    simulate = None
    if on_a_server and not args.real_time and "PREFECT_API_URL" not in os.environ:
        simulate = stand_ins.Simulation(
            revisions=args.revisions, stands_for=stand_ins.stands_for(spec.model.catalog, spec.model.repo)
        )
    with stand_ins.sandbox(
        served_model_name=spec.served_model_name, simulate=simulate, failure_log=out_dir / "sandbox-failures.log"
    ) as far_ends:
        if simulate is not None:
            console.print(
                "sandbox: simulated window: the block's clock holds while a run works and jumps to the next "
                f"instant due when every run waits; runs scheduled {simulate.rate:g}× faster than wall time "
                f"(clock {far_ends.clock})",
                highlight=False,
            )
        console.print(
            f"sandbox: AWS {far_ends.aws} ({far_ends.region}), Hub {far_ends.hub}, Kubernetes {far_ends.kube}",
            highlight=False,
        )
        revisions = args.revisions if far_ends.revisions is not None else ()
        acts = promised_acts(on_a_server=on_a_server, teardown_when_done=args.teardown_when_done, revisions=revisions)
        yield StartedForUp(far_ends, Promise(far_ends.failures, acts, revisions))
