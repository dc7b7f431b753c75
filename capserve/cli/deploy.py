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
import inspect
import json
import re
import unicodedata
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
    parser.add_argument("--pool", default=DEFAULT_POOL, type=pool_name_option,
                        help="work pool the deployments run on (default: capserve; "
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


def pool_name_option(value: str) -> str:
    """A work pool name as Prefect's API takes it (``prefect.types.NonEmptyishName``: not blank, none of
    ``BANNED_CHARACTERS``, which would break the ``/work_pools/{name}`` path) and printable."""
    from prefect.types import BANNED_CHARACTERS

    shown = ascii(value)  # an escape sequence in the name is shown, not played
    if not value.strip("' \""):
        raise argparse.ArgumentTypeError("the work pool name is empty: give one, e.g. --pool capserve")
    banned = sorted({c for c in value if c in BANNED_CHARACTERS})
    if banned:
        raise argparse.ArgumentTypeError(f"{shown}: a work pool name may not hold {' '.join(banned)} (Prefect "
                                         "refuses / % & < > in names): choose another, e.g. --pool capserve")
    if any(unicodedata.category(c) in ("Cc", "Cf") for c in value) or value != value.strip():
        raise argparse.ArgumentTypeError(f"{shown}: a work pool name may hold no control or invisible characters "
                                         "and no surrounding spaces: type it again")
    return value


def pull_step_option(value: str) -> dict[str, Any]:
    """One pull step: a JSON object with one key, the step's import path, mapping to its keyword arguments,
    which the step's function takes (checked here, before anything is registered). The value is never
    echoed: a pull step may carry a credential."""
    try:
        step = json.loads(value)
    except ValueError as exc:
        example = json.dumps({WORKING_DIRECTORY_STEP: {"directory": "/srv/capserve"}})
        where = f"line {exc.lineno} column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else "it"
        raise argparse.ArgumentTypeError(f"the pull step is not JSON (at {where}): write one object, e.g. "
                                         f"'{example}'") from None
    if not (isinstance(step, dict) and len(step) == 1):
        raise argparse.ArgumentTypeError("a pull step is an object with exactly one key, the step's import path "
                                         "(e.g. prefect.deployments.steps.git_clone)")
    ((path, arguments),) = step.items()
    if "." not in path or not isinstance(arguments, dict):
        raise argparse.ArgumentTypeError(f"pull step {ascii(path)}: the key is the step's dotted import path and "
                                         "its value an object of the step's arguments")
    problem = _step_problem(path, arguments)
    if problem:
        raise argparse.ArgumentTypeError(f"pull step {ascii(path)}: {problem}")
    return step


def _step_problem(path: str, arguments: dict[str, Any]) -> str | None:
    """What a worker would fail on when it runs the step: a function that cannot be imported (without
    ``requires``, which Prefect installs on the worker first), or arguments the function does not take. Prefect
    runs a step as ``import_object(path)(**arguments)`` minus its reserved keywords
    (``prefect.deployments.steps.core.run_step``)."""
    from prefect.deployments.steps.core import RESERVED_KEYWORDS
    from prefect.utilities.importtools import import_object

    try:
        function = import_object(path)
    except (ImportError, AttributeError, ValueError) as exc:
        if arguments.get("requires"):
            return None  # Prefect installs the package on the worker, then imports the step
        return (f"cannot be imported ({type(exc).__name__}): correct the path (e.g. "
                f"{WORKING_DIRECTORY_STEP}), or name its package with \"requires\"")
    if not callable(function):
        return "is not a function"
    try:
        signature = inspect.signature(function)
    except ValueError:
        return None  # a builtin without a signature: nothing to check
    given = {k: v for k, v in arguments.items() if k not in RESERVED_KEYWORDS}
    takes = f"(the step's arguments: {', '.join(signature.parameters)})"
    unknown = sorted(set(given) - set(signature.parameters))
    if unknown and not any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values()):
        return f"unexpected keyword argument {ascii(unknown[0])} {takes}"
    try:
        signature.bind(**given)
    except TypeError as exc:
        return f"{exc} {takes}"
    return None


_SECRET_KEY = re.compile(r"token|password|passwd|secret|credential|key|auth", re.IGNORECASE)
_URL_USERINFO = re.compile(r"(?<=://)[^/@\s]+@")


def redacted_steps(steps: Any, key: str = "") -> Any:
    """The pull steps with what may be a credential hidden: the value of any argument whose name says so (a
    Prefect template such as ``{{ prefect.blocks.secret.x }}`` is a reference, kept), and user info in URLs."""
    if isinstance(steps, dict):
        return {k: redacted_steps(v, k) for k, v in steps.items()}
    if isinstance(steps, list):
        return [redacted_steps(v, key) for v in steps]
    if isinstance(steps, str):
        if _SECRET_KEY.search(key) and not steps.strip().startswith("{{"):
            return "***"
        return _URL_USERINFO.sub("***@", steps)
    return steps


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
        print(f"  the runs' pull steps: {json.dumps(redacted_steps(done.pull_steps))}")
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
        refuse_moving_scheduled_runs(client, pool=pool, image=image, pull_steps=pull_steps)
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


def refuse_moving_scheduled_runs(
    client: Any, *, pool: str, image: str | None, pull_steps: list[dict[str, Any]]
) -> None:
    """Refuse (nothing registered) to give another pool, pull step or image to a deployment that has runs waiting:
    the drain and teardown a bought block scheduled, a serve at the block's start. A run keeps the work queue it
    was created in, but its worker takes the deployment's pull steps and job variables as they are when the run
    starts (``prefect.flows.load_flow_from_flow_run``), so such a run would start somewhere it was never tried,
    or nowhere. Runs the deployment's own schedule made are left out: Prefect makes them again on every update."""
    from prefect.client.schemas.filters import (
        DeploymentFilter,
        DeploymentFilterName,
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType

    names = [definition.name for definition in definitions()]
    existing = client.read_deployments(deployment_filter=DeploymentFilter(name=DeploymentFilterName(any_=names)))
    moved = {
        deployment.id: deployment for deployment in existing
        if deployment.work_pool_name != pool or list(deployment.pull_steps or []) != pull_steps
        or (deployment.job_variables or {}).get("image") != image
    }
    if not moved:
        return
    waiting = FlowRunFilter(state=FlowRunFilterState(type=FlowRunFilterStateType(
        any_=[StateType.SCHEDULED, StateType.PENDING])))
    runs = [run for run in client.read_flow_runs(flow_run_filter=waiting) if run.deployment_id in moved
            and not run.auto_scheduled]
    if not runs:
        return
    runs.sort(key=lambda run: run.expected_start_time or run.created)
    named = [f"{run.name} at {(run.expected_start_time or run.created):%Y-%m-%d %H:%M} UTC" for run in runs[:5]]
    more = f" and {len(runs) - 5} more" if len(runs) > 5 else ""
    current = next(iter(moved.values()))
    raise SpecError(
        f"--pool/--pull-step/--image: {len(runs)} scheduled run(s) would move to where they were never scheduled "
        f"({', '.join(named)}{more}); nothing was changed: deploy again with the pool {current.work_pool_name!r} and "
        f"pull steps {json.dumps(redacted_steps(current.pull_steps or []))} they were scheduled with, or once they "
        "have run"
    )


def _apply(client: Any, definition: Definition, *, pool: str, pool_type: str, image: str | None,
           pull_steps: list[dict[str, Any]]) -> str:
    """Create or update one deployment (the server upserts on flow and name); its ``flow/name``."""
    from prefect.client.schemas.actions import DeploymentScheduleCreate
    from prefect.client.schemas.objects import ConcurrencyLimitStrategy, ConcurrencyOptions
    from prefect.client.schemas.schedules import CronSchedule
    from prefect.flows import load_flow_from_entrypoint

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
        parameter_openapi_schema=flow.parameters.model_dump(exclude_unset=True),  # Flow() made it of the function
        schedules=schedules,
        concurrency_limit=limit["limit"] if limit else None,
        concurrency_options=ConcurrencyOptions(
            collision_strategy=ConcurrencyLimitStrategy(limit.get("collision_strategy", "ENQUEUE"))
        ) if limit else None,
        description=(flow.description or "").strip() or None,
    )
    return f"{flow.name}/{definition.name}"
