"""``capserve deploy``: register capserve's deployments and automations on the Prefect server.

What ``prefect deploy --all`` did from a checkout, from the installed package: the work pool (a process pool,
created when missing), every deployment of ``capserve/deployments/prefect.yaml`` with its module-path entrypoint,
then the automations that start them (``capserve automations register``, docs/events.md §4). Prefect's server
creates a deployment as an upsert on (flow, name) and replaces its schedules (``prefect/server/models/deployments.py``
``create_deployment``), so running it again after an upgrade converges: the same deployments, none twice.

The runs' pull step: by default the directory this command runs from becomes their working directory (what
``prefect deploy`` records when its file has no ``pull:`` section, docs/prefect.md §13), so relative paths in a spec
resolve as they did here; ``--pull-step`` gives others (a directory a remote worker has, a git clone), and
``--image`` an image with capserve installed for a container pool (docker, kubernetes, ecs), with no pull step.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capserve.cli.inputs import prefect_api_url
from capserve.core.errors import SpecError
from capserve.deployments import DEFAULT_POOL, Definition, definitions

WORKING_DIRECTORY_STEP = "prefect.deployments.steps.set_working_directory"
PROCESS = "process"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "deploy",
        help="register capserve's deployments and automations on the Prefect server (PREFECT_API_URL)",
        description=(
            "Create the work pool if missing, then create or update every capserve deployment and automation on "
            "the Prefect server PREFECT_API_URL names. Running it again changes nothing that is already right."
        ),
    )
    parser.add_argument("--pool", default=DEFAULT_POOL, help="work pool the deployments run on (default: capserve; "
                        "created as a process pool when missing)")
    how = parser.add_mutually_exclusive_group()
    how.add_argument("--image", default=None, metavar="IMAGE",
                     help="container image with capserve installed, for a docker, kubernetes or ecs pool")
    how.add_argument("--pull-step", dest="pull_steps", action="append", default=None, metavar="JSON",
                     type=pull_step_option,
                     help='a pull step the runs take first, as JSON, e.g. \'{"prefect.deployments.steps.'
                     'set_working_directory": {"directory": "/srv/capserve"}}\' (repeatable, in order; default: '
                     "set the working directory to the one this command runs from)")
    parser.set_defaults(func=run)


def pull_step_option(value: str) -> dict[str, Any]:
    """One pull step: a JSON object with one key, the step's import path, mapping to its keyword arguments."""
    try:
        step = json.loads(value)
    except ValueError as exc:
        example = json.dumps({WORKING_DIRECTORY_STEP: {"directory": "/srv/capserve"}})
        raise argparse.ArgumentTypeError(f"{value!r} is not JSON ({exc}): write one object, e.g. '{example}'") from exc
    if not (isinstance(step, dict) and len(step) == 1):
        raise argparse.ArgumentTypeError(f"{value!r}: a pull step is an object with exactly one key, the step's "
                                         "import path (e.g. prefect.deployments.steps.git_clone)")
    ((path, arguments),) = step.items()
    if "." not in path or not isinstance(arguments, dict):
        raise argparse.ArgumentTypeError(f"{value!r}: the key is the step's dotted import path and its value an "
                                         "object of the step's arguments")
    return step


@dataclass(frozen=True)
class Registered:
    pool: str
    pool_created: bool
    deployments: list[str]  # flow/name
    automations: list[str]
    pull_steps: list[dict[str, Any]]


def run(args: argparse.Namespace) -> int:
    api = prefect_api_url("capserve deploy")
    pull_steps = args.pull_steps if args.pull_steps is not None else (
        [] if args.image else [{WORKING_DIRECTORY_STEP: {"directory": str(Path.cwd().resolve())}}]
    )
    done = deploy(pool=args.pool, image=args.image, pull_steps=pull_steps)
    print(f"on {api}:")
    print(f"  work pool {done.pool}" + (" (created, type process)" if done.pool_created else " (exists)"))
    for name in done.deployments:
        print(f"  deployment {name}")
    for name in done.automations:
        print(f"  automation {name}")
    if done.pull_steps:
        print(f"  the runs' pull steps: {json.dumps(done.pull_steps)}")
    if args.image:
        print(f"  the runs' image: {args.image}")
    print(f"start a worker: prefect worker start --pool {done.pool}")
    return 0


def deploy(*, pool: str, image: str | None, pull_steps: list[dict[str, Any]]) -> Registered:
    """Register the pool (when missing), the deployments and the automations on the current Prefect server."""
    from prefect import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            pool_type = client.read_work_pool(pool).type
            created = False
        except ObjectNotFound:
            if image:
                raise SpecError(f"--image: there is no work pool {pool!r}, and the one capserve creates is a process "
                                "pool, which runs no image; create a docker, kubernetes or ecs pool of that name "
                                "first, or drop --image") from None
            from prefect.workers.process import ProcessWorker

            client.create_work_pool(WorkPoolCreate(
                name=pool, type=PROCESS, base_job_template=ProcessWorker.get_default_base_job_template()
            ))
            pool_type, created = PROCESS, True
        if image and pool_type == PROCESS:
            raise SpecError(f"--image: work pool {pool!r} is a process pool, which runs no image: drop --image "
                            "(capserve must be installed where the worker runs) or name a container pool with --pool")
        names = [_apply(client, definition, pool=pool, pool_type=pool_type, image=image, pull_steps=pull_steps)
                 for definition in definitions()]
    from capserve.tasks.automations import register_automations

    automations = register_automations.fn()
    return Registered(pool=pool, pool_created=created, deployments=names, automations=automations,
                      pull_steps=pull_steps)


def _apply(client: Any, definition: Definition, *, pool: str, pool_type: str, image: str | None,
           pull_steps: list[dict[str, Any]]) -> str:
    """Create or update one deployment (the server upserts on flow and name); its ``flow/name``."""
    from prefect.client.schemas.actions import DeploymentScheduleCreate
    from prefect.client.schemas.objects import ConcurrencyLimitStrategy, ConcurrencyOptions
    from prefect.client.schemas.schedules import CronSchedule
    from prefect.flows import load_flow_from_entrypoint
    from prefect.utilities.callables import parameter_schema

    flow: Any = load_flow_from_entrypoint(definition.entrypoint)
    # stream_output is the process pool's variable; another pool type's template has no such field.
    job_variables = dict(definition.job_variables) if pool_type == PROCESS else {}
    if image:
        job_variables["image"] = image
    schedules = [
        DeploymentScheduleCreate(
            schedule=CronSchedule(cron=entry["cron"], timezone=entry.get("timezone", "UTC")),
            active=bool(entry.get("active", True)),
        )
        for entry in definition.schedules
    ]
    limit = definition.concurrency_limit
    flow_id = client.create_flow_from_name(flow.name)
    client.create_deployment(
        flow_id=flow_id,
        name=definition.name,
        entrypoint=definition.entrypoint,
        work_pool_name=pool,
        job_variables=job_variables,
        pull_steps=pull_steps,
        parameters=definition.parameters,
        parameter_openapi_schema=parameter_schema(flow).model_dump(exclude_unset=True),
        schedules=schedules,
        concurrency_limit=limit["limit"] if limit else None,
        concurrency_options=ConcurrencyOptions(
            collision_strategy=ConcurrencyLimitStrategy(limit.get("collision_strategy", "ENQUEUE"))
        ) if limit else None,
        description=(flow.description or "").strip() or None,
    )
    return f"{flow.name}/{definition.name}"
