"""Run a deletion plan: each call tolerates only its own NotFound codes; each phase waits (monotonic
deadline, boto3 waiters where they exist, else the one wait helper) until its deletions are done and
reports what is still there."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import BotoCoreError, ClientError, WaiterError
from prefect.cache_policies import NO_CACHE
from pydantic import BaseModel, ConfigDict, Field

from capserve.core.act_lines import teardown_step_line
from capserve.core.deadline import Deadline
from capserve.core.errors import WaitTimeoutError
from capserve.core.teardown.inventory import ClusterFound
from capserve.core.teardown.plan import Step, TeardownPlan, Wait
from capserve.core.teardown.settings import TeardownSettings
from capserve.tasks import aws
from capserve.tasks.cluster.common import wait_on_the_block
from capserve.tasks.kube import convert as kube_convert
from capserve.tasks.progress import tell
from capserve.tasks.resilience import aws_task
from capserve.tasks.run_log import run_logger
from capserve.tasks.teardown import workloads as kube
from capserve.tasks.waiting import wait_until


class Outcome(BaseModel):
    """What running the plan did, in plan order."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    deleted: tuple[str, ...] = Field(default=(), description="Deleted.")
    already_gone: tuple[str, ...] = Field(default=(), description="NotFound on delete.")
    remaining: tuple[str, ...] = Field(default=(), description="Still there when the phase's deadline passed.")


class _Clients:
    """One client per service for this run (boto3 clients are not shared across threads/tasks)."""

    def __init__(self, region: str, workload_cluster: ClusterFound | None) -> None:
        self._region = region
        self._workload_cluster = workload_cluster
        self._made: dict[str, Any] = {}

    def get(self, service: str) -> Any:
        if service not in self._made:
            if service == "kubernetes":
                if self._workload_cluster is None:
                    raise ValueError("a Kubernetes step without a workload cluster")
                self._made[service] = kube.connect(self._workload_cluster, self._region)
            else:
                self._made[service] = aws.client(service, self._region)
        return self._made[service]


# Every call of the plan converges (deletes tolerate NotFound), so a retried run picks up where it stopped.
@aws_task(name="execute-teardown-plan", cache_policy=NO_CACHE)
def execute_plan(
    plan: TeardownPlan, settings: TeardownSettings, workload_cluster: ClusterFound | None = None
) -> Outcome:
    """Run ``plan`` phase by phase; stop after a phase whose waits ran out (the next phase would fail on it)."""
    logger = run_logger(__name__)
    clients = _Clients(plan.region, workload_cluster)
    deleted: list[str] = []
    gone: list[str] = []
    phases = plan.phases()
    for number, (phase, steps) in enumerate(phases, start=1):
        waiting: list[Step] = []
        deleted_here, gone_here = len(deleted), len(gone)
        for step in steps:
            already = _call(step, clients, settings, plan.region)
            if step.report:
                (gone if already else deleted).append(step.resource)
            if step.wait is not None and not already:
                waiting.append(step)
        remaining = _wait_all(waiting, clients, settings)
        logger.info("teardown %s: phase %s done, %d still there", plan.campaign_id, phase.value, len(remaining))
        # Each phase is a line a person sees: a teardown is minutes of deletes and waits, never silent ones.
        tell(teardown_step_line(phase.value, number, len(phases), deleted[deleted_here:], len(gone) - gone_here,
                                len(remaining)))
        if remaining:
            return Outcome(deleted=tuple(deleted), already_gone=tuple(gone), remaining=tuple(remaining))
    return Outcome(deleted=tuple(deleted), already_gone=tuple(gone))



def _call(step: Step, clients: _Clients, settings: TeardownSettings, region: str) -> bool:
    """Send one delete. True: AWS/Kubernetes said it was already gone. Every other error raises, naming it."""
    what = f"teardown: {step.operation} of {step.resource} in {region}"
    if step.service == "kubernetes":
        try:
            return kube.delete(clients.get("kubernetes"), step.params)
        except Exception as exc:
            raise kube_convert(exc, what) from exc

    def attempt() -> str:
        """'deleted', 'gone' (a NotFound code), or the code AWS answers while a dependency is in the way."""
        try:
            getattr(clients.get(step.service), step.operation)(**step.params)
            return "deleted"
        except ClientError as exc:
            code = aws.error_code(exc)
            if code in step.not_found:
                return "gone"
            if code in step.retry_codes:  # e.g. EKS releases its network interfaces minutes after the cluster
                return code
            raise aws.convert(exc, what, fix=_fix(code)) from exc
        except BotoCoreError as exc:
            raise aws.convert(exc, what) from exc

    outcome = wait_until(
        attempt,
        done=lambda answer: answer in ("deleted", "gone"),
        describe=lambda code: f"AWS still answers {code}. {_fix(code) or ''}".rstrip(),
        what=what,
        timeout_s=settings.dependency_retry_timeout_s,
        initial_s=settings.poll_seconds,
    )
    return outcome == "gone"


def _fix(code: str) -> str | None:
    if code in ("DependencyViolation", "DeleteConflict", "ResourceInUseException"):
        return "Something not made by this campaign still uses it: find it in the console, remove it, re-run teardown"
    if code in ("AccessDenied", "AccessDeniedException", "UnauthorizedOperation"):
        return "Grant the teardown role this delete permission and re-run teardown"
    return None


def _wait_all(steps: list[Step], clients: _Clients, settings: TeardownSettings) -> list[str]:
    """Wait for each step's resource to be gone; one monotonic deadline per phase. Returns what is left."""
    if not steps:
        return []
    deadline = Deadline(max(s.wait.timeout_s for s in steps if s.wait))
    remaining = []
    for step in steps:
        assert step.wait is not None  # noqa: S101 - narrows the type for mypy
        problem = _wait_one(step.wait, clients, settings, max(deadline.remaining(), 0.0))
        if problem is not None:
            remaining.append(f"{step.resource}: {problem}")
    return remaining


def _wait_one(wait: Wait, clients: _Clients, settings: TeardownSettings, timeout_s: float) -> str | None:
    """None when gone; otherwise why it is still there."""
    if wait.kind == "waiter":
        try:
            wait_on_the_block(
                clients.get(wait.service).get_waiter(wait.name), max(timeout_s, 1.0), settings.poll_seconds,
                **wait.params,
            )
        except WaiterError as exc:
            return f"still there after {timeout_s:g} s ({exc})"
        return None
    try:
        wait_until(
            lambda: _absent(wait, clients),
            done=bool,
            describe=lambda _: "still there",
            what=f"deletion of {wait.name}",
            timeout_s=timeout_s,
            initial_s=settings.poll_seconds,
        )
    except WaitTimeoutError:
        return f"still there after {timeout_s:g} s"
    return None


def _absent(wait: Wait, clients: _Clients) -> bool:
    if wait.service == "kubernetes":
        try:
            return kube.is_gone(clients.get("kubernetes"), wait.params)
        except Exception as exc:
            raise kube_convert(exc, f"checking {wait.params.get('kind')} {wait.params.get('name')} is gone") from exc
    try:
        getattr(clients.get(wait.service), wait.name)(**wait.params)
    except ClientError as exc:
        if aws.error_code(exc) in wait.gone_codes:
            return True
        raise aws.convert(exc, f"checking {wait.params} is gone") from exc
    return False
