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
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from rich.console import Console

from capserve.cli.arg_types import served_name
from capserve.cli.down import _region
from capserve.cli.exit_codes import ExitCode
from capserve.cli.inputs import writable_dir
from capserve.cli.stand_ins import stand_in
from capserve.core.errors import SpecError
from capserve.tasks.the_clock import clock_environment

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
