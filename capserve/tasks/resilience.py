"""The one retry policy, by kind of call: every Prefect task in ``capserve.tasks`` is made here.

Which errors are worth a retry is decided once, where SDK errors become ours (``RetryableError`` vs
``PermanentError``, see ``capserve.core.errors``). Prefect retries a task only when
``retry_only_retryable`` says so, i.e. only for ``RetryableError``: a bad request, a missing permission,
a timeout that already waited as long as its caller allowed (``WaitTimeoutError``) or a bug is never
repeated. Delays grow geometrically and are jittered (Prefect's ``retry_jitter_factor``) so runs that
failed together do not come back together.

Each kind of call has its own policy (``Settings.retries``, ``CAPSERVE_RETRIES__AWS__RETRIES=5``), because each
far end fails differently:

- ``aws``: control-plane calls (EC2, EKS, IAM, SageMaker, STS). botocore's "standard" mode already
  retries throttling and 5xx a few times inside one call (``capserve.tasks.aws``); these retries cover
  what outlasts that, e.g. an API that is briefly unavailable. Converges and deletes are idempotent.
- ``s3``: data-plane reads and writes of objects; uploads are idempotent (same key, same bytes).
- ``hub``: Hugging Face Hub metadata and downloads (429 and 5xx are common on big releases).
- ``kubernetes``: API server calls; server-side apply and deletes are idempotent.
- ``endpoint``: the OpenAI-compatible endpoint under evaluation. Its failures are measured, not
  retried: the evaluation records them as failed checks; only a transient error before any
  measurement (``RetryableError``) repeats the profile.
- ``orchestrator``: calls to the Prefect API (artifacts, scheduling a run). Prefect's own client
  already retries 429/5xx (``PREFECT_CLIENT_MAX_RETRIES``); we add none.
- ``local``: files on this host and pure computation: nothing transient to wait out.
- ``single-shot``: a call that must never be sent twice (a purchase: ``PurchaseCapacityBlock`` has no
  idempotency token and a Capacity Block cannot be cancelled). No retries, and the reason is required.

The kind is kept beside the task (``kind_of``), not as a Prefect tag: Prefect asks the server for a tag
concurrency slot before every tagged task run (its "no such limit" answer is cached for 5 s only), a write
transaction that SQLite, the local server's database, often answers with a retryable 503 and Prefect's
client then waits 2 s. Measured: 30 tagged task calls took 12–31 s more than untagged ones on Prefect's
test server; in the fault matrix, nearly half of a campaign re-run's time went there (docs/prefect.md §10).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from prefect import Task, task
from prefect.client.schemas.objects import State, TaskRun

from capserve.core.errors import RetryableError
from capserve.core.settings import RetryPolicy, RetrySettings
from capserve.tasks.settings import process_settings

P = ParamSpec("P")
R = TypeVar("R")


class CallKind(enum.StrEnum):
    """What a task talks to."""

    AWS = "aws"
    S3 = "s3"
    HUB = "hub"
    KUBERNETES = "kubernetes"
    ENDPOINT = "endpoint"
    ORCHESTRATOR = "orchestrator"
    LOCAL = "local"
    SINGLE_SHOT = "single-shot"


NO_RETRIES = RetryPolicy(retries=0)


def policy_of(kind: CallKind, retries: RetrySettings) -> RetryPolicy:
    """The retry policy of a kind of call (Prefect, local and single-shot calls are never retried)."""
    by_kind = {
        CallKind.AWS: retries.aws,
        CallKind.S3: retries.s3,
        CallKind.HUB: retries.hub,
        CallKind.KUBERNETES: retries.kubernetes,
        CallKind.ENDPOINT: retries.endpoint,
    }
    return by_kind.get(kind, NO_RETRIES)


def is_retryable_state(state: State[Any]) -> bool:
    """True when the failed ``state`` carries a ``RetryableError``."""
    try:
        outcome = state.result(raise_on_failure=False)
    except BaseException as exc:  # noqa: BLE001 - a result that cannot be read is no reason to retry
        outcome = exc
    return isinstance(outcome, RetryableError)


def retry_only_retryable(task: Task[..., Any], task_run: TaskRun, state: State[Any]) -> bool:
    """Prefect's ``retry_condition_fn`` for every capserve task: retry ``RetryableError`` and nothing else."""
    return is_retryable_state(state)


def retry_options(policy: RetryPolicy) -> dict[str, Any]:
    """The Prefect task options that carry ``policy``."""
    if policy.retries == 0:
        return {"retries": 0}
    return {
        "retries": policy.retries,
        "retry_delay_seconds": policy.delays(),
        "retry_jitter_factor": policy.jitter or None,
        "retry_condition_fn": retry_only_retryable,
    }


def resilient_task(
    kind: CallKind, name: str, *, policy: RetryPolicy | None = None, **options: Any
) -> Callable[[Callable[P, R]], Task[P, R]]:
    """A Prefect task for a kind of call, carrying that kind's retry policy (its kind: ``kind_of``)."""
    chosen = policy_of(kind, process_settings().retries) if policy is None else policy
    if kind is CallKind.SINGLE_SHOT and chosen.retries:
        raise ValueError(f"task {name}: a single-shot call must never be retried")

    def decorate(fn: Callable[P, R]) -> Task[P, R]:
        made: Task[P, R] = task(name=name, **retry_options(chosen), **options)(fn)
        _KINDS[fn] = kind
        return made

    return decorate


# By the task's function: Prefect's ``with_options`` copies of a task keep it.
_KINDS: dict[Callable[..., Any], CallKind] = {}


def kind_of(made: Task[..., Any]) -> CallKind | None:
    """The kind of call ``made`` was made for here (None: not made by this module)."""
    return _KINDS.get(made.fn)


def aws_task(name: str, **options: Any) -> Callable[[Callable[P, R]], Task[P, R]]:
    """An AWS control-plane call (EC2, EKS, IAM, SageMaker, STS)."""
    return resilient_task(CallKind.AWS, name, **options)


def s3_task(name: str, **options: Any) -> Callable[[Callable[P, R]], Task[P, R]]:
    """Reads and writes of S3 objects (and the bucket they live in)."""
    return resilient_task(CallKind.S3, name, **options)


def hub_task(name: str, **options: Any) -> Callable[[Callable[P, R]], Task[P, R]]:
    """Hugging Face Hub metadata and downloads."""
    return resilient_task(CallKind.HUB, name, **options)


def kube_task(name: str, **options: Any) -> Callable[[Callable[P, R]], Task[P, R]]:
    """Kubernetes API server calls."""
    return resilient_task(CallKind.KUBERNETES, name, **options)


def endpoint_task(name: str, **options: Any) -> Callable[[Callable[P, R]], Task[P, R]]:
    """Calls to the OpenAI-compatible endpoint under evaluation."""
    return resilient_task(CallKind.ENDPOINT, name, **options)


def orchestrator_task(name: str, **options: Any) -> Callable[[Callable[P, R]], Task[P, R]]:
    """Calls to the Prefect API (artifacts, scheduled runs); Prefect's client retries on its own."""
    return resilient_task(CallKind.ORCHESTRATOR, name, **options)


def local_task(name: str, **options: Any) -> Callable[[Callable[P, R]], Task[P, R]]:
    """Work on this host's files or pure computation: nothing transient to retry."""
    return resilient_task(CallKind.LOCAL, name, **options)


def single_shot_task(name: str, *, why: str, **options: Any) -> Callable[[Callable[P, R]], Task[P, R]]:
    """A call that must never be repeated by a retry; ``why`` is required so the reason stays next to it."""
    if not why.strip():
        raise ValueError(f"task {name}: say why it is single-shot")
    return resilient_task(CallKind.SINGLE_SHOT, name, **options)


def with_policy(made: Task[P, R], policy: RetryPolicy) -> Task[P, R]:
    """The same task with another retry policy (still retrying only ``RetryableError``)."""
    if kind_of(made) is CallKind.SINGLE_SHOT and policy.retries:
        raise ValueError(f"task {made.name}: a single-shot call must never be retried")
    return made.with_options(**retry_options(policy))
