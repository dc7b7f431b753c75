"""Why a rollout is not ready, decided from the pods and events the wait has seen (pure).

The wait (``capserve.tasks.rollout.wait``) watches the workload's pods and hands what it saw to
``diagnose``; the answer names the pod, the container and the cause in the words a person would
use with ``kubectl describe pod``, and says whether waiting longer can help (``fatal``). What
Kubernetes reports in each case is in docs/serving.md §7.1:

- **unschedulable**: ``PodScheduled=False`` with the scheduler's ``FailedScheduling`` message. When
  the message says ``Insufficient nvidia.com/gpu`` or ``Insufficient vpc.amazonaws.com/efa`` on a
  cluster whose nodes are Ready, the devices are not allocatable (no device plugin, or a broken
  one): that is named separately. Fatal once it has lasted ``unschedulable_grace_s`` (a node may
  still be joining right after bring-up).
- **image-pull**: ``ErrImagePull`` becomes ``ImagePullBackOff`` when the kubelet retries: fatal at
  the back-off (or at once for ``InvalidImageName``), since a wrong tag or a missing pull right
  does not fix itself.
- **oom-killed**: a container terminated with ``OOMKilled``: fatal at once (it would only repeat).
- **crash-loop**: a container that ended and was restarted ``crash_restarts`` times: fatal, with the
  last lines of its previous run's log (the wait fetches them through ``pods/log``). The count decides,
  not the state the pod shows at the moment: between two back-offs the kubelet runs the container
  again (``running``, or ``terminated`` once it has failed anew), and a wait that only looked for
  ``CrashLoopBackOff`` could miss a short back-off on every look and wait out its whole budget. Under a
  LeaderWorkerSet (``RecreateGroupOnPodRestart``, its default and ours) a restart deletes the group and a new
  pod of the same name starts from ``restartCount`` 0: the runs that failed in earlier pods of that name
  (``earlier_failures``, which the wait keeps) count as restarts, or a container that fails on every start
  would be waited on for the whole budget.
- **startup-probe**: the kubelet killed the container because its startup probe ran out
  (``Killing``: "failed startup probe"): the startup budget is spent, fatal.
- **config**: ``CreateContainerConfigError`` (e.g. the API-key Secret is missing): fatal after the grace.
- **transport** (multi-node layouts): the leader's log (``NCCL_DEBUG=INFO``) does not show NCCL on the
  aws-ofi-nccl plugin with libfabric's ``efa`` provider (``transport_diagnosis``): fatal, since a server on TCP
  sockets across nodes is far slower than the plan assumed. Judged as soon as NCCL names its network at
  communicator init (``transport_settled``), minutes into a start that then loads and compiles for an hour or
  more; once more when the server is ready, should the log never have said it.

The wait's own deadline (the startup budget plus the allowance for pulling and scheduling) ends
anything else as **timeout**, with the last state of each pod.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from capserve.core.redaction import redact_vllm_arguments
from capserve.core.rollout.settings import RolloutWaitSettings

DEVICE_RESOURCES = ("nvidia.com/gpu", "vpc.amazonaws.com/efa")


class Trouble(enum.StrEnum):
    UNSCHEDULABLE = "unschedulable"
    DEVICES_NOT_ALLOCATABLE = "devices-not-allocatable"
    IMAGE_PULL = "image-pull"
    OOM_KILLED = "oom-killed"
    CRASH_LOOP = "crash-loop"
    STARTUP_PROBE = "startup-probe"
    CONFIG = "config"
    CHECK = "endpoint-check"
    TRANSPORT = "transport"
    TIMEOUT = "timeout"


_FIX = {
    Trouble.UNSCHEDULABLE: "check the GPU nodes' labels, taints and free resources (kubectl describe node)",
    Trouble.DEVICES_NOT_ALLOCATABLE: (
        "the nodes advertise no free GPUs/EFA devices: check the NVIDIA and EFA device plugin pods on them"
    ),
    Trouble.IMAGE_PULL: "check serving.image (name, tag, registry access from the nodes)",
    Trouble.OOM_KILLED: "the container ran out of memory: lower serving.max_num_seqs or max_model_len, or pick a "
    "bigger instance type",
    Trouble.CRASH_LOOP: "read the log lines above; serving.extra_args and the staged weights are the usual causes",
    Trouble.STARTUP_PROBE: "the server did not listen within its startup budget: raise serving.startup_budget_minutes "
    "(a cold first boot of a large MoE takes over an hour) or check the log for a hang",
    Trouble.CONFIG: "a Secret or ConfigMap the pod reads is missing",
    Trouble.CHECK: "the pod is ready but its API does not serve the model with the campaign's key: read its log",
    Trouble.TRANSPORT: "NCCL must reach the other nodes over EFA: use an image with the aws-ofi-nccl plugin and "
    "libfabric (docs/serving.md §5.2), and check that the pods get vpc.amazonaws.com/efa devices and FI_PROVIDER=efa",
    Trouble.TIMEOUT: "the pods did not become ready in time; see their state above",
}

# NCCL's and aws-ofi-nccl's own log lines with NCCL_DEBUG=INFO ("<host>:<pid>:<tid> [<dev>] NCCL INFO <message>",
# NCCL src/debug.cc). NCCL names the network it uses at communicator init, src/init.cc:
# INFO(NCCL_INIT, "Using network %s", ...): "Socket" or "IB" built in, the plugin's name otherwise ("Libfabric" for
# aws-ofi-nccl >= 1.12, "AWS Libfabric" before, or with NCCL_NET="AWS Libfabric"; "OFI" with NCCL_NET=OFI:
# aws-ofi-nccl src/nccl_ofi_interface_nvidia.cpp). The plugin names libfabric's provider, src/nccl_ofi_net.cpp
# (NCCL_OFI_INFO prefixes "NET/OFI "): "Selected Provider is %s (found %d nics)". NCCL's socket transport says
# "NET/Socket : Using ..." (src/transport/net_socket.cc).
_NCCL_NETWORK = re.compile(r"NCCL INFO Using network (.+?)\s*$", re.MULTILINE)
_OFI_PROVIDER = re.compile(r"NCCL INFO NET/OFI Selected [Pp]rovider is ([A-Za-z0-9_;-]+)")
_OFI_NETWORKS = ("Libfabric", "AWS Libfabric", "OFI")


def transport_settled(log: str) -> bool:
    """NCCL has named the network it uses (its communicator is set up): the transport can be judged now."""
    return _NCCL_NETWORK.search(log) is not None


def transport_diagnosis(log: str, *, pod: str, container: str = "vllm") -> Diagnosis | None:
    """None when the leader's log shows NCCL over aws-ofi-nccl with the ``efa`` provider, else why not (fatal)."""
    networks = {match.strip() for match in _NCCL_NETWORK.findall(log)}
    providers = set(_OFI_PROVIDER.findall(log))
    if providers == {"efa"} and networks and networks <= set(_OFI_NETWORKS):
        return None
    if not networks and not providers:
        message = (
            "the leader's log has no NCCL 'Using network' line although NCCL_DEBUG=INFO is set: NCCL's transport "
            "across nodes is unknown"
        )
    elif networks - set(_OFI_NETWORKS):
        fallback = ", ".join(sorted(networks - set(_OFI_NETWORKS)))
        message = (
            f"NCCL uses network {fallback}, not EFA: the aws-ofi-nccl plugin is missing or found no EFA device, so "
            "traffic between the nodes goes over TCP"
        )
    else:
        message = (
            f"NCCL's aws-ofi-nccl plugin selected libfabric provider {', '.join(sorted(providers)) or '(none named)'}, "
            "not efa"
        )
    return Diagnosis(trouble=Trouble.TRANSPORT, pod=pod, container=container, message=message, fatal=True)


class Diagnosis(BaseModel):
    """One reason a rollout is not ready."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    trouble: Trouble = Field(description="What kind of problem.")
    pod: str = Field(min_length=1, max_length=253, description="The pod it concerns.")
    container: str | None = Field(None, max_length=253, description="The container, when one is at fault.")
    message: str = Field(min_length=1, max_length=4000, description="What Kubernetes said.")
    fatal: bool = Field(description="Waiting longer cannot help.")
    log_tail: tuple[str, ...] = Field(default=(), max_length=500, description="Last log lines (crash loop).")

    @field_validator("log_tail")
    @classmethod
    def _no_argument_values(cls, lines: tuple[str, ...]) -> tuple[str, ...]:
        # vLLM's "unrecognized arguments: …" line repeats every value it was given, a key's included: the
        # diagnosis reaches exceptions, reports and the flow run's state, so only the flags are kept.
        return tuple(redact_vllm_arguments(line) for line in lines)

    @property
    def needs_log(self) -> bool:
        return self.trouble is Trouble.CRASH_LOOP and not self.log_tail

    def describe(self) -> str:
        where = f"pod {self.pod}" + (f" container {self.container}" if self.container else "")
        text = f"{self.trouble.value}: {where}: {self.message}"
        if self.log_tail:
            text += "; last log lines: " + " | ".join(self.log_tail)
        return f"{text}. Fix: {_FIX[self.trouble]}"


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _name(obj: Mapping[str, Any]) -> str:
    return str(_mapping(obj.get("metadata")).get("name") or "<pod>")


def _condition(pod: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    for condition in _mapping(pod.get("status")).get("conditions") or []:
        if _mapping(condition).get("type") == kind:
            return _mapping(condition)
    return {}


def pod_ready(pod: Mapping[str, Any]) -> bool:
    return _condition(pod, "Ready").get("status") == "True"


def all_ready(pods: Sequence[Mapping[str, Any]], expected: int) -> bool:
    """Every pod of the workload exists and is Ready (a LeaderWorkerSet group is ready when all its pods are)."""
    return len(pods) >= expected and all(pod_ready(pod) for pod in pods)


def _startup_kill(pod: str, events: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    for event in events:
        involved = _mapping(event.get("involvedObject"))
        message = str(event.get("message") or "")
        if involved.get("name") == pod and event.get("reason") == "Killing" and "startup probe" in message:
            return event
    return None


def _last_probe_failure(pod: str, events: Sequence[Mapping[str, Any]]) -> str:
    found = [
        str(e.get("message"))
        for e in events
        if _mapping(e.get("involvedObject")).get("name") == pod and e.get("reason") == "Unhealthy"
    ]
    return found[-1] if found else ""


def failed_containers(pod: Mapping[str, Any]) -> list[str]:
    """The containers of ``pod`` (init containers included) that have ended in failure at least once: a non-zero
    exit now or in their last run, or the kubelet backing off their restart."""
    status = _mapping(pod.get("status"))
    failed = []
    for container in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        container = _mapping(container)
        state = _mapping(container.get("state"))
        ends = [_mapping(state.get("terminated")), _mapping(_mapping(container.get("lastState")).get("terminated"))]
        backing_off = _mapping(state.get("waiting")).get("reason") == "CrashLoopBackOff"
        if backing_off or any(end and end.get("exitCode") not in (0, None) for end in ends):
            failed.append(str(container.get("name") or ""))
    return failed


def diagnose_pod(
    pod: Mapping[str, Any],
    events: Sequence[Mapping[str, Any]],
    *,
    pending_for_s: float,
    settings: RolloutWaitSettings,
    earlier_failures: Mapping[str, int] | None = None,
) -> Diagnosis | None:
    """What holds one pod back, or None when nothing is known to be wrong (it may simply be starting).

    ``pending_for_s``: how long the wait has seen this pod unschedulable (or missing its config).
    ``earlier_failures``: per container, the earlier pods of this name (replaced by their LeaderWorkerSet) in which
    it failed.
    """
    name = _name(pod)
    scheduled = _condition(pod, "PodScheduled")
    if scheduled.get("status") == "False":
        message = str(scheduled.get("message") or scheduled.get("reason") or "not scheduled")
        devices = any(f"Insufficient {resource}" in message for resource in DEVICE_RESOURCES)
        trouble = Trouble.DEVICES_NOT_ALLOCATABLE if devices else Trouble.UNSCHEDULABLE
        return Diagnosis(
            trouble=trouble, pod=name, message=message, fatal=pending_for_s >= settings.unschedulable_grace_s
        )
    kill = _startup_kill(name, events)
    if kill is not None:
        probe = _last_probe_failure(name, events)
        message = str(kill.get("message")) + (f" (last: {probe})" if probe else "")
        return Diagnosis(trouble=Trouble.STARTUP_PROBE, pod=name, container="vllm", message=message, fatal=True)
    status = _mapping(pod.get("status"))
    for container in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        earlier = (earlier_failures or {}).get(str(_mapping(container).get("name") or ""), 0)
        found = _container_trouble(name, _mapping(container), pending_for_s, settings, earlier)
        if found is not None:
            return found
    return None


def _container_trouble(
    pod: str, container: Mapping[str, Any], pending_for_s: float, settings: RolloutWaitSettings, earlier: int = 0
) -> Diagnosis | None:
    name = str(container.get("name") or "")
    state = _mapping(container.get("state"))
    waiting = _mapping(state.get("waiting"))
    last = _mapping(_mapping(container.get("lastState")).get("terminated"))
    terminated = _mapping(state.get("terminated"))
    restarts = int(container.get("restartCount") or 0) + earlier  # a pod recreated after a failure is a restart
    reason = str(waiting.get("reason") or "")
    detail = str(waiting.get("message") or reason)

    def found(trouble: Trouble, message: str, fatal: bool) -> Diagnosis:
        return Diagnosis(trouble=trouble, pod=pod, container=name, message=message[:4000] or trouble.value, fatal=fatal)

    for ended in (terminated, last):
        if ended.get("reason") == "OOMKilled":
            return found(Trouble.OOM_KILLED, f"OOMKilled (exit code {ended.get('exitCode')})", True)
    if reason in ("ErrImagePull", "ImagePullBackOff", "InvalidImageName"):
        return found(Trouble.IMAGE_PULL, f"{reason}: {detail}", reason != "ErrImagePull")
    ended_before = (bool(last) or earlier > 0) and restarts > 0
    if reason == "CrashLoopBackOff" or (ended_before and restarts >= settings.crash_restarts):
        now = reason or ("running again" if "running" in state else "failed again")
        exit_code = (last or terminated).get("exitCode")
        message = f"{now} after {restarts} restart(s), last exit code {exit_code}"
        if earlier:
            message += f" ({earlier} of them by its LeaderWorkerSet recreating the pod)"
        return found(Trouble.CRASH_LOOP, message, restarts >= settings.crash_restarts)
    if reason in ("CreateContainerConfigError", "CreateContainerError"):
        return found(Trouble.CONFIG, f"{reason}: {detail}", pending_for_s >= settings.unschedulable_grace_s)
    return None


def diagnose(
    pods: Sequence[Mapping[str, Any]],
    events: Sequence[Mapping[str, Any]],
    *,
    pending_for_s: Mapping[str, float],
    settings: RolloutWaitSettings,
    earlier_failures: Mapping[str, Mapping[str, int]] | None = None,
) -> list[Diagnosis]:
    """Every known problem of the workload's pods, fatal ones first (pods sorted by name within each).
    ``earlier_failures``: per pod name, ``diagnose_pod``'s."""
    found = [
        diagnosis
        for pod in sorted(pods, key=_name)
        if (
            diagnosis := diagnose_pod(
                pod, events, pending_for_s=pending_for_s.get(_name(pod), 0.0), settings=settings,
                earlier_failures=(earlier_failures or {}).get(_name(pod)),
            )
        )
        is not None
    ]
    return sorted(found, key=lambda d: not d.fatal)


def needs_grace(pod: Mapping[str, Any]) -> bool:
    """The pod is in a state that only becomes fatal after the grace (unschedulable, config missing)."""
    if _condition(pod, "PodScheduled").get("status") == "False":
        return True
    status = _mapping(pod.get("status"))
    for container in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        reason = _mapping(_mapping(_mapping(container).get("state")).get("waiting")).get("reason")
        if reason in ("CreateContainerConfigError", "CreateContainerError"):
            return True
    return False


def timeout_diagnosis(pods: Sequence[Mapping[str, Any]], expected: int, waited_s: float) -> Diagnosis:
    """What the wait says when its deadline passes with nothing more specific known."""
    states = []
    for pod in sorted(pods, key=_name):
        phase = _mapping(pod.get("status")).get("phase") or "Unknown"
        states.append(f"{_name(pod)} {phase}{'' if pod_ready(pod) else ' (not Ready)'}")
    seen = ", ".join(states) or "no pods were created"
    return Diagnosis(
        trouble=Trouble.TIMEOUT,
        pod=_name(pods[0]) if pods else "<none>",
        message=f"{len(pods)}/{expected} pod(s) after {waited_s:.0f} s: {seen}",
        fatal=True,
    )
