"""Wait for a rollout to be ready: a watch on its pods (not a poll loop) with a monotonic deadline.

The deadline is the startup budget plus an allowance for what happens before the startup probe
starts counting (scheduling, image pull, the compile-cache restore). Every change the API server
pushes is judged by ``capserve.core.rollout.diagnosis``: the wait ends at once on a problem that
waiting cannot fix (image pull back-off, OOMKilled, a crash loop, the startup probe run out, a pod
unschedulable past its grace) and raises ``RolloutFailedError`` naming the pod, the cause, the last
log lines of a crashed container, and the fix.

How long the rollout took to be ready is read on the campaign's clock (``clock().now()``), the block's time
the report and the ledger speak in (on AWS this host's clock), not whatever the host took to watch it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import urllib3
from kubernetes import client as k8s
from prefect.cache_policies import NO_CACHE

from capserve.core.cluster.settings import KubeSettings
from capserve.core.progress import Progress
from capserve.core.rollout.diagnosis import (
    Diagnosis,
    all_ready,
    diagnose,
    failed_containers,
    needs_grace,
    timeout_diagnosis,
    transport_diagnosis,
    transport_settled,
)
from capserve.core.rollout.image import ImagePull, pull_status, slowest_pull
from capserve.core.rollout.names import ROLE_LABEL, ROLLOUT_LABEL
from capserve.core.rollout.prepull import PREPULL_ROLE
from capserve.core.rollout.result import RolloutFailedError
from capserve.core.rollout.settings import RolloutWaitSettings
from capserve.core.rollout.startup_log import startup_milestones, startup_progress
from capserve.tasks.kube import _resource, _watch_until, dynamic_client
from capserve.tasks.progress import REPORT_EVERY_S, ProgressReporter
from capserve.tasks.resilience import NO_RETRIES, kube_task
from capserve.tasks.the_clock import clock


@dataclass
class ReadyWait:
    """How the wait went: seconds from its start to ready (the block's), the API requests it made, the pods at the
    end."""

    ready_after_s: float
    api_calls: int
    pods: list[dict[str, Any]] = field(default_factory=list)


@contextmanager
def counting_requests(api: k8s.ApiClient) -> Iterator[list[int]]:
    """Count the HTTP requests ``api`` sends meanwhile (each list, watch, log or events read is one)."""
    counter = [0]
    original: Callable[..., Any] = api.call_api

    def counted(*args: Any, **kwargs: Any) -> Any:
        counter[0] += 1
        return original(*args, **kwargs)

    api.call_api = counted  # type: ignore[method-assign]
    try:
        yield counter
    finally:
        api.call_api = original  # type: ignore[method-assign]


def _restarted(pods: Sequence[Mapping[str, Any]]) -> bool:
    for pod in pods:
        status = pod.get("status") or {}
        for container in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
            if container.get("restartCount") or (container.get("lastState") or {}).get("terminated"):
                return True
    return False


def _events(api: k8s.ApiClient, namespace: str, settings: KubeSettings) -> list[dict[str, Any]]:
    listing = k8s.CoreV1Api(api).list_namespaced_event(namespace, _request_timeout=settings.request_timeout_s)
    return [api.sanitize_for_serialization(item) for item in listing.items]  # type: ignore[no-untyped-call]


def image_pull_of(
    api: k8s.ApiClient, namespace: str, pods: Sequence[Mapping[str, Any]], image: str, kube: KubeSettings
) -> ImagePull | None:
    """How long the pull of ``image`` took on the workload's nodes, from the kubelet's ``Pulled`` events of its
    ``pods`` and of the pre-pull Jobs' pods (capserve.core.rollout.prepull); None when none of them pulled it."""
    listing = k8s.CoreV1Api(api).list_namespaced_pod(
        namespace, label_selector=f"{ROLE_LABEL}={PREPULL_ROLE}", _request_timeout=kube.request_timeout_s
    )
    prepulls = [api.sanitize_for_serialization(item) for item in listing.items]  # type: ignore[no-untyped-call]
    metadata = [pod.get("metadata") or {} for pod in [*pods, *prepulls]]
    uids = {str(meta.get("uid")): str(meta.get("name")) for meta in metadata if meta.get("uid")}
    return slowest_pull(_events(api, namespace, kube), uids, image)


def log_tail(api: k8s.ApiClient, namespace: str, pod: str, container: str | None, lines: int) -> tuple[str, ...]:
    """The last ``lines`` of the container's previous run (a crash), else of its current one; () if unreadable."""
    core = k8s.CoreV1Api(api)
    for previous in (True, False):
        try:
            text: str = core.read_namespaced_pod_log(
                pod, namespace, container=container, previous=previous, tail_lines=lines
            )
        except k8s.ApiException:
            continue
        if text.strip():
            return tuple(line for line in text.splitlines() if line.strip())[-lines:]
    return ()


@kube_task(name="read-leader-log", cache_policy=NO_CACHE)
def pod_log(api: k8s.ApiClient, namespace: str, pod: str, container: str) -> str:
    """The container's whole current log (NCCL's transport lines come early in a long start); '' if unreadable."""
    try:
        text: str = k8s.CoreV1Api(api).read_namespaced_pod_log(pod, namespace, container=container)
    except k8s.ApiException:
        return ""
    return text


class _Judge:
    """What the wait has seen so far, judged on every change."""

    def __init__(
        self, api: k8s.ApiClient, namespace: str, expected: int, wait: RolloutWaitSettings, kube: KubeSettings
    ) -> None:
        self.api, self.namespace, self.expected, self.wait, self.kube = api, namespace, expected, wait, kube
        self.pods: list[dict[str, Any]] = []
        self.found: list[Diagnosis] = []
        self.since: dict[str, float] = {}
        # (pod name, container) → the uids of the pods of that name in which the container failed: a LeaderWorkerSet
        # replaces a pod whose container restarts, and the new one starts again from restartCount 0.
        self.failed_in: dict[tuple[str, str], set[str]] = {}
        self.ready = False

    def __call__(self, seen: dict[str, dict[str, Any]]) -> bool:
        self.judge(list(seen.values()))
        return self.ready or any(d.fatal for d in self.found)

    def judge(self, pods: list[dict[str, Any]]) -> None:
        self.pods = pods
        self.ready = all_ready(pods, self.expected)
        if self.ready:
            self.found = []
            return
        now = time.monotonic()
        names = set()
        for pod in pods:
            name = str(pod["metadata"]["name"])
            names.add(name)
            if needs_grace(pod):
                self.since.setdefault(name, now)
            else:
                self.since.pop(name, None)
        # A pod gone while it waited for its grace (deleted, replaced under another name) has no grace left
        # to run out: kept, its past grace end would make every later watch return at once, a busy loop.
        self.since = {name: start for name, start in self.since.items() if name in names}
        pending = {name: now - start for name, start in self.since.items()}
        events = _events(self.api, self.namespace, self.kube) if _restarted(pods) else []
        earlier = self._earlier(pods)
        self.found = diagnose(pods, events, pending_for_s=pending, settings=self.wait, earlier_failures=earlier)

    def _earlier(self, pods: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
        """Remember the failed containers of these pods; per pod and container, how many other pods of the same
        name saw that container fail."""
        for pod in pods:
            name, uid = str(pod["metadata"]["name"]), str(pod["metadata"].get("uid"))
            for container in failed_containers(pod):
                self.failed_in.setdefault((name, container), set()).add(uid)
        earlier: dict[str, dict[str, int]] = {}
        for pod in pods:
            name, uid = str(pod["metadata"]["name"]), str(pod["metadata"].get("uid"))
            for (pod_name, container), uids in self.failed_in.items():
                if pod_name == name and uids - {uid}:
                    earlier.setdefault(name, {})[container] = len(uids - {uid})
        return earlier

    def next_grace_end(self) -> float | None:
        return min(self.since.values()) + self.wait.unschedulable_grace_s if self.since else None


@kube_task(name="wait-rollout-ready", policy=NO_RETRIES, cache_policy=NO_CACHE)  # a wait (design.md §6)
def wait_rollout_ready(
    api: k8s.ApiClient,
    namespace: str,
    workload: str,
    expected_pods: int,
    *,
    budget_s: float,
    wait: RolloutWaitSettings,
    kube: KubeSettings,
    expected_s: float | None = None,
    across_nodes: bool = False,
) -> ReadyWait:
    """Watch ``workload``'s pods until all ``expected_pods`` are Ready; raise ``RolloutFailedError`` otherwise.

    Every ``REPORT_EVERY_S`` the watch is re-opened to tell a person how far the start got (``_StartProgress``):
    the image pull, then vLLM's phase against ``expected_s``, the time model's start. ``across_nodes``: one copy
    spans several nodes, so the leader's log is also read then until NCCL names its network, and a network that
    is not EFA ends the wait at once (``_TransportWatch``), not after the load and compile."""
    start = time.monotonic()
    began = clock().now()
    deadline = start + budget_s + wait.pull_and_schedule_allowance_s
    judge = _Judge(api, namespace, expected_pods, wait, kube)
    told = _StartProgress(api, namespace, f"{workload}-0", expected_s, kube)
    transport = _TransportWatch(api, namespace, f"{workload}-0", kube) if across_nodes else None
    dyn = dynamic_client(api)
    pods = _resource(dyn, "v1", "Pod")
    with counting_requests(api) as calls:
        while True:
            grace_end = judge.next_grace_end()
            step = min(deadline, grace_end + 0.05) if grace_end is not None else deadline
            step = min(step, time.monotonic() + REPORT_EVERY_S)
            seen = _watch_until(
                dyn,
                pods,
                done=judge,
                deadline=step,
                settings=kube,
                what=f"watch of {workload}'s pods",
                namespace=namespace,
                label_selector=f"{ROLLOUT_LABEL}={workload}",
            )
            judge.judge(list(seen.values()))  # once more: a grace may have run out without a change
            if judge.ready:
                ready = ReadyWait((clock().now() - began).total_seconds(), calls[0], judge.pods)
                told(judge.pods)  # the start's last phases, read from its log: a played start ends between looks
                return ready
            fatal = [d for d in judge.found if d.fatal]
            if not fatal and transport is not None:
                fatal = transport(judge.pods)
            if fatal:
                raise RolloutFailedError(_with_log(api, namespace, fatal[0], wait))
            if time.monotonic() >= deadline:
                known = judge.found[0].model_copy(update={"fatal": True}) if judge.found else None
                waited = time.monotonic() - start
                raise RolloutFailedError(known or timeout_diagnosis(judge.pods, expected_pods, waited))
            told(judge.pods)


class _StartProgress:
    """Tells how far the rollout's start got: each image "pulling" → "pulled" (the kubelet's events), then the
    leader's vLLM phase from its log, for how long its container has run on the block's clock."""

    def __init__(
        self, api: k8s.ApiClient, namespace: str, leader: str, expected_s: float | None, kube: KubeSettings
    ) -> None:
        self.api, self.namespace, self.leader, self.expected_s, self.kube = api, namespace, leader, expected_s, kube
        self.pulls, self.engine = ProgressReporter(), ProgressReporter()
        self._phases_told: set[str] = set()

    def __call__(self, pods: list[dict[str, Any]]) -> None:
        try:
            self._look(pods)
        except (k8s.ApiException, urllib3.exceptions.HTTPError, ConnectionError):
            pass  # a line that could not be read waits for the next look: telling never fails the wait itself

    def _look(self, pods: list[dict[str, Any]]) -> None:
        uids = {str(pod["metadata"].get("uid")) for pod in pods}
        for image, (state, at) in pull_status(_events(self.api, self.namespace, self.kube), uids).items():
            self.pulls.report(Progress("image pull", detail=f"{image} {state}"), at=at)
        started = _vllm_started_at(next((p for p in pods if p["metadata"]["name"] == self.leader), None))
        if started is None:
            return
        log: str = k8s.CoreV1Api(self.api).read_namespaced_pod_log(
            self.leader, self.namespace, container="vllm", tail_lines=_LOG_LINES,
            _request_timeout=self.kube.request_timeout_s,
        )
        # Every phase the log shows entered, at its own block time (not only the one under way at this look), then
        # how long the phase under way has run.
        for entered in startup_milestones(log, expected_s=self.expected_s):
            if entered.detail not in self._phases_told:
                self._phases_told.add(entered.detail)
                self.engine.report(entered, at=started + timedelta(seconds=entered.elapsed_s or 0.0))
        running_s = (clock().now() - started).total_seconds()
        self.engine.report(startup_progress(log, running_s=running_s, expected_s=self.expected_s))


_LOG_LINES = 2000  # enough of a start's log to hold its last milestone line


class _TransportWatch:
    """Reads the head of the leader's log until NCCL names its network, then judges it once (fatal unless EFA).

    NCCL sets up its communicators when vLLM initialises its distributed state, before the weights load
    (docs/serving.md §5.2): its "Using network" line is in the first part of the log, so only that part is read
    (``PodLogOptions.limitBytes``), not the growing whole."""

    HEAD_BYTES = 4 * 2**20  # vLLM's banner, arguments and config come first: well under this [inf]

    def __init__(self, api: k8s.ApiClient, namespace: str, leader: str, kube: KubeSettings) -> None:
        self.api, self.namespace, self.leader, self.kube = api, namespace, leader, kube
        self.judged = False

    def __call__(self, pods: list[dict[str, Any]]) -> list[Diagnosis]:
        started = _vllm_started_at(next((p for p in pods if p["metadata"]["name"] == self.leader), None))
        if self.judged or started is None:
            return []
        try:
            log: str = k8s.CoreV1Api(self.api).read_namespaced_pod_log(
                self.leader, self.namespace, container="vllm", limit_bytes=self.HEAD_BYTES,
                _request_timeout=self.kube.request_timeout_s,
            )
        except (k8s.ApiException, urllib3.exceptions.HTTPError, ConnectionError):
            return []  # read again at the next look
        if not transport_settled(log):
            return []
        self.judged = True
        found = transport_diagnosis(log, pod=self.leader)
        if found is None:
            return []
        minutes = (clock().now() - started).total_seconds() / 60
        when = f" (seen at NCCL's communicator init, {minutes:.0f} min into the start, before the server was ready)"
        return [found.model_copy(update={"message": found.message + when})]


def _vllm_started_at(pod: Mapping[str, Any] | None) -> datetime | None:
    """When the pod's ``vllm`` container started running (its status' RFC 3339 ``startedAt``), if it runs."""
    for container in ((pod or {}).get("status") or {}).get("containerStatuses") or []:
        started = ((container.get("state") or {}).get("running") or {}).get("startedAt")
        if container.get("name") == "vllm" and started:
            return datetime.fromisoformat(str(started).replace("Z", "+00:00"))
    return None


def _with_log(api: k8s.ApiClient, namespace: str, found: Diagnosis, wait: RolloutWaitSettings) -> Diagnosis:
    if not found.needs_log:
        return found
    return found.model_copy(update={"log_tail": log_tail(api, namespace, found.pod, found.container, wait.log_lines)})
