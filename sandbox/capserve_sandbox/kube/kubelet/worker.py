"""One pod on one node: volumes, init containers, containers, probes, restarts, and the status it reports.

The kubelet's rules, as the Kubernetes docs state them ("Pod Lifecycle", "Init Containers",
"Configure Liveness, Readiness and Startup Probes", "Images"):

- images are pulled first (``Pulling``/``Pulled`` events, or "already present" for IfNotPresent);
  a failed pull is ``ErrImagePull``, then ``ImagePullBackOff`` with a back-off;
- init containers run one by one and must succeed (sidecars, ``restartPolicy: Always``, keep running);
- a container that exits is restarted per the pod's ``restartPolicy``, after a back-off that starts
  at 10 s and doubles to 5 min (``CrashLoopBackOff``), reset after 10 min of running;
- liveness and readiness probes start only once the startup probe succeeded; a failed startup or
  liveness probe kills and restarts the container (``Killing`` event); readiness sets ``Ready``;
- the pod's phase: Pending until its containers run, Running, then Succeeded or Failed when every
  container has ended and none will be restarted.

All durations are cluster time (``timing.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from capserve_sandbox.failures import FAILURES
from capserve_sandbox.kube.kubelet.faults import FaultKind
from capserve_sandbox.kube.kubelet.image_pulls import UNKNOWN_PULL_S, PullError, go_duration, pull_image
from capserve_sandbox.kube.kubelet.logs import ContainerLogs
from capserve_sandbox.kube.kubelet.probes import run_probe
from capserve_sandbox.kube.kubelet.runtimes import (
    START_ERROR,
    START_ERROR_STARTED_AT,
    ContainerContext,
    ContainerExit,
    Exit,
    Runtime,
)
from capserve_sandbox.kube.kubelet.volumes import (
    ConfigError,
    MountError,
    container_mounts,
    prepare_volumes,
    resolve_env,
)
from capserve_sandbox.kube.pods import merged_conditions
from capserve_sandbox.kube.store import timestamp

if TYPE_CHECKING:
    from pathlib import Path

    from capserve_sandbox.kube.kubelet import Kubelet

BACKOFF_START_S, BACKOFF_MAX_S, BACKOFF_RESET_S = 10.0, 300.0, 600.0
# A container the fake lost track of: no process gave this code; 255 is what cri-containerd reported for an
# exit it could not know (its early helpers.go, unknownExitCode).
LOST_EXIT_CODE = 255
COMPONENT = "kubelet"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class ContainerStatus:
    name: str
    image: str
    state: dict[str, Any] = field(default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}})
    last_state: dict[str, Any] = field(default_factory=dict)
    restart_count: int = 0
    ready: bool = False
    started: bool = False
    container_id: str | None = None

    def api(self) -> dict[str, Any]:
        status: dict[str, Any] = {
            "name": self.name,
            "image": self.image,
            "imageID": f"{self.image.split(':')[0]}@sha256:{_digest(self.image)}" if self.container_id else "",
            "ready": self.ready,
            "restartCount": self.restart_count,
            "started": self.started,
            "state": self.state,
            "lastState": self.last_state,
        }
        if self.container_id:
            status["containerID"] = self.container_id
        return status

    @property
    def running(self) -> bool:
        return "running" in self.state

    @property
    def terminated(self) -> dict[str, Any] | None:
        terminated = self.state.get("terminated")
        return terminated if isinstance(terminated, dict) else None


class ContainerRunner:
    def __init__(self, worker: PodWorker, container: dict[str, Any], *, init: bool) -> None:
        self.worker = worker
        self.container = container
        self.init = init
        self.sidecar = init and container.get("restartPolicy") == "Always"
        self.name = str(container["name"])
        self.image = str(container.get("image") or "")
        self.status = ContainerStatus(self.name, self.image)
        self.logs = ContainerLogs()
        self.runtime: Runtime | None = None
        self.starts = 0
        self.became_started = asyncio.Event()

    @property
    def kubelet(self) -> Kubelet:
        return self.worker.kubelet

    def _event(self, reason: str, message: str, *, warning: bool = False) -> None:
        kind = "initContainers" if self.init else "containers"
        self.worker.event(reason, message, warning=warning, field_path=f"spec.{kind}{{{self.name}}}")

    def _set(self, **changes: Any) -> None:
        for key, value in changes.items():
            setattr(self.status, key, value)
        self.worker.publish()

    def _restart_policy(self) -> str:
        if self.sidecar:
            return "Always"
        policy = str(self.worker.pod["spec"].get("restartPolicy") or "Always")
        return "OnFailure" if self.init and policy == "Always" else policy

    async def run(self) -> int:
        """Run the container, restarting it as its policy says; returns the last exit code."""
        failures_in_a_row = 0
        while True:
            await self._pull()
            context = await self._configure()
            began = time.monotonic()
            outcome = await self._run_once(context)
            restart = self._restart_policy() == "Always" or (
                self._restart_policy() == "OnFailure" and outcome.code != 0
            )
            if not restart:
                return outcome.code
            if time.monotonic() - began >= self.kubelet.timing.wall(BACKOFF_RESET_S):
                failures_in_a_row = 0
            delay = min(BACKOFF_START_S * 2**failures_in_a_row, BACKOFF_MAX_S)
            failures_in_a_row += 1
            pod = self.worker.pod_ref
            self._set(
                state={
                    "waiting": {
                        "reason": "CrashLoopBackOff",
                        "message": f"back-off {int(delay)}s restarting failed container={self.name} pod={pod}",
                    }
                },
                ready=False,
                started=False,
            )
            self._event("BackOff", f"Back-off restarting failed container {self.name} in pod {pod}", warning=True)
            await asyncio.sleep(self.kubelet.timing.wall(delay))
            self.status.restart_count += 1

    async def _pull(self) -> None:
        node = self.worker.node
        failures = 0
        while True:
            fault = self.kubelet.faults.take(FaultKind.IMAGE_PULL, self.worker.name, self.name, self.image)
            present = self.image in self.kubelet.images.setdefault(node, set())
            policy = self.container.get("imagePullPolicy") or "IfNotPresent"
            if fault is None and present and policy != "Always":
                self._event("Pulled", f'Container image "{self.image}" already present on machine')
                return
            self._event("Pulling", f'Pulling image "{self.image}"')
            # The node's own path to the registry (routes, public IPv4, endpoints: kube/network.py).
            blocked = self.kubelet.pull_blocked(node, self.image)
            error = blocked or (
                f'failed to pull and unpack image "{self.image}": failed to resolve reference "{self.image}": '
                f"{self.image}: not found"
            )
            if fault is None and blocked is None:
                try:
                    await self._pulled(node)
                    return
                except PullError as failed:
                    error = str(failed)
            failures += 1
            self._event("Failed", f'Failed to pull image "{self.image}": {error}', warning=True)
            self._event("Failed", "Error: ErrImagePull", warning=True)
            self._set(state={"waiting": {"reason": "ErrImagePull", "message": error}})
            await asyncio.sleep(self.kubelet.timing.wall_interval(1.0))
            delay = min(BACKOFF_START_S * 2 ** (failures - 1), BACKOFF_MAX_S)
            message = f'Back-off pulling image "{self.image}"'
            self._set(state={"waiting": {"reason": "ImagePullBackOff", "message": message}})
            self._event("BackOff", message)
            self._event("Failed", "Error: ImagePullBackOff", warning=True)
            await asyncio.sleep(self.kubelet.timing.wall(delay))

    async def _pulled(self, node: str) -> None:
        """One pull (``image_pulls.pull_image``), one at a time per node: the kubelet's ``serializeImagePulls``
        defaults to true (KubeletConfiguration reference), so a pull queued behind another says so in the
        "including waiting" part of its ``Pulled`` event."""
        queued, lock = time.monotonic(), self.kubelet.pull_lock(node)
        behind = lock.locked()  # another pull runs: this one waits its turn (else no wait to report)
        async with lock:
            waited = (time.monotonic() - queued) * self.kubelet.timing.time_scale if behind else 0.0
            pulled = pull_image(self.image, node)  # raises PullError
            if self.image in self.kubelet.images[node]:
                # The pull ahead in the queue brought it: containerd holds every layer, nothing is downloaded.
                pulled = replace(pulled, seconds=min(pulled.seconds, UNKNOWN_PULL_S))
            await asyncio.sleep(self.kubelet.timing.wall(pulled.seconds))
        self.kubelet.images[node].add(self.image)
        took, total = go_duration(pulled.seconds), go_duration(pulled.seconds + waited)
        message = f"in {took} ({total} including waiting). Image size: {pulled.size_bytes} bytes."
        self._event("Pulled", f'Successfully pulled image "{self.image}" {message}')

    async def _configure(self) -> ContainerContext:
        while True:
            try:
                env = resolve_env(
                    self.kubelet.store, self.worker.pod, self.container, self.worker.host_ip, self.worker.pod_ip
                )
                break
            except ConfigError as error:
                self._set(state={"waiting": {"reason": "CreateContainerConfigError", "message": str(error)}})
                self._event("Failed", f"Error: {error}", warning=True)
                await asyncio.sleep(self.kubelet.timing.wall_interval(10.0))
        scratch = self.kubelet.layout.pod_dir(self.worker.uid) / "containers" / self.name
        scratch.mkdir(parents=True, exist_ok=True)
        return ContainerContext(
            kubelet=self.kubelet,
            pod=self.worker.pod,
            container=self.container,
            node=self.worker.node,
            pod_ip=self.worker.pod_ip,
            env=env,
            mounts=container_mounts(self.container, self.worker.volumes),
            log=self.logs.new_instance(),
            scratch=scratch,
            start_number=self.starts,
        )

    async def _run_once(self, context: ContainerContext) -> Exit:
        self.starts += 1
        runtime = self.kubelet.runtime_for(context)
        self.runtime = runtime
        hold = runtime.clock_hold
        if hold is not None:
            hold.hold()  # from its startedAt until its end is in the pod's status (process_hold.py)
        try:
            return await self._run_held(runtime)
        finally:
            if hold is not None:
                hold.release()

    async def _run_held(self, runtime: Runtime) -> Exit:
        container_id = f"containerd://{_digest(f'{self.worker.uid}/{self.name}/{self.starts}')}"
        started_at = timestamp()
        self._event("Created", f"Created container: {self.name}")
        try:
            await runtime.start()
        except ContainerExit as exit_:
            if exit_.reason == START_ERROR:
                # No process: the runtime reports it so, and the kubelet says why (FailedToStartContainer).
                self._event("Failed", f"Error: {exit_.message}", warning=True)
                started_at = START_ERROR_STARTED_AT
            return self._terminated(
                Exit(exit_.code, exit_.reason or ("Completed" if exit_.code == 0 else "Error"), exit_.message),
                started_at,
                container_id,
            )
        self._event("Started", f"Started container {self.name}")
        has_startup = isinstance(self.container.get("startupProbe"), dict)
        self._set(
            state={"running": {"startedAt": started_at}},
            container_id=container_id,
            started=not has_startup,
            ready=False,
        )
        if not has_startup:
            self.became_started.set()
        waiter = asyncio.ensure_future(runtime.wait())
        prober = asyncio.ensure_future(self._probe(runtime, time.monotonic()))
        try:
            done, _ = await asyncio.wait({waiter, prober}, return_when=asyncio.FIRST_COMPLETED)
            try:
                if waiter in done:
                    outcome = waiter.result()
                else:
                    probe = prober.result()
                    self._event("Killing", f"Container {self.name} failed {probe} probe, will be restarted")
                    await runtime.stop(self.kubelet.grace_s(self.worker.pod))
                    outcome = await waiter
                    outcome = Exit(outcome.code if outcome.code else 137, "Error")
            except Exception as exc:  # noqa: BLE001 - a bug of the fake, not the pod's: say so, never stay "running"
                outcome = await self._lost(runtime, exc)
        finally:
            for task in (waiter, prober):
                if not task.done():
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
        return self._terminated(outcome, started_at, container_id)

    async def _lost(self, runtime: Runtime, exc: Exception) -> Exit:
        """The fake lost track of a running container (its wait or its probes failed): stop what is left of it
        and report it ended, so that its status never says "running" with nothing behind it."""
        FAILURES.report("sandbox kubelet", exc, doing=f"container {self.name} of pod {self.worker.pod_ref}")
        message = f"the sandbox kubelet lost the container: {exc!r}"
        self._event("Failed", f"Error: {message}", warning=True)
        with contextlib.suppress(Exception):
            await runtime.stop(self.kubelet.grace_s(self.worker.pod))
        return Exit(LOST_EXIT_CODE, "Error", message)

    def _terminated(self, outcome: Exit, started_at: str, container_id: str) -> Exit:
        terminated: dict[str, Any] = {
            "exitCode": outcome.code,
            "reason": outcome.reason,
            "startedAt": started_at,
            "finishedAt": timestamp(),
            "containerID": container_id,
        }
        if outcome.message:
            terminated["message"] = outcome.message
        self._set(
            state={"terminated": terminated},
            last_state={"terminated": terminated},
            ready=False,
            started=False,
            container_id=container_id,
        )
        self.status.last_state = {"terminated": terminated}
        self.runtime = None
        return outcome

    async def _probe(self, runtime: Runtime, began: float) -> str:
        """Run the probes until one demands a kill; returns which ("startup" or "liveness")."""
        timing = self.kubelet.timing
        startup = self.container.get("startupProbe")
        if isinstance(startup, dict):
            await asyncio.sleep(timing.wall(float(startup.get("initialDelaySeconds") or 0)))
            failures = 0
            while True:
                result = await run_probe(startup, self.container, runtime, self.worker.pod_ip)
                if result.ok:
                    break
                failures += 1
                self._event("Unhealthy", f"Startup probe failed: {result.message}", warning=True)
                if failures >= int(startup.get("failureThreshold") or 3):
                    return "startup"
                await asyncio.sleep(timing.wall_interval(float(startup.get("periodSeconds") or 10)))
            self._set(started=True)
            self.became_started.set()
        readiness = self.container.get("readinessProbe")
        liveness = self.container.get("livenessProbe")
        if not runtime.can_become_ready:
            await asyncio.Event().wait()  # until the container ends
        if not isinstance(readiness, dict):
            self._set(ready=True)
        loops = []
        if isinstance(readiness, dict):
            loops.append(asyncio.ensure_future(self._readiness(readiness, runtime, began)))
        if isinstance(liveness, dict):
            loops.append(asyncio.ensure_future(self._liveness(liveness, runtime, began)))
        if not loops:
            await asyncio.Event().wait()
        try:
            done, _ = await asyncio.wait(loops, return_when=asyncio.FIRST_COMPLETED)
            return next(iter(done)).result()
        finally:
            for loop in loops:
                loop.cancel()

    async def _initial_delay(self, probe: dict[str, Any], began: float) -> None:
        # initialDelaySeconds counts from the container's start, not from the startup probe's success.
        left = self.kubelet.timing.wall(float(probe.get("initialDelaySeconds") or 0)) - (time.monotonic() - began)
        if left > 0:
            await asyncio.sleep(left)

    async def _readiness(self, probe: dict[str, Any], runtime: Runtime, began: float) -> str:
        await self._initial_delay(probe, began)
        successes = failures = 0
        while True:
            result = await run_probe(probe, self.container, runtime, self.worker.pod_ip)
            if result.ok:
                successes, failures = successes + 1, 0
                if not self.status.ready and successes >= int(probe.get("successThreshold") or 1):
                    self._set(ready=True)
            else:
                successes, failures = 0, failures + 1
                self._event("Unhealthy", f"Readiness probe failed: {result.message}", warning=True)
                if self.status.ready and failures >= int(probe.get("failureThreshold") or 3):
                    self._set(ready=False)
            await asyncio.sleep(self.kubelet.timing.wall_interval(float(probe.get("periodSeconds") or 10)))

    async def _liveness(self, probe: dict[str, Any], runtime: Runtime, began: float) -> str:
        await self._initial_delay(probe, began)
        failures = 0
        while True:
            result = await run_probe(probe, self.container, runtime, self.worker.pod_ip)
            if result.ok:
                failures = 0
            else:
                failures += 1
                self._event("Unhealthy", f"Liveness probe failed: {result.message}", warning=True)
                if failures >= int(probe.get("failureThreshold") or 3):
                    return "liveness"
            await asyncio.sleep(self.kubelet.timing.wall_interval(float(probe.get("periodSeconds") or 10)))

    def kill_now(self) -> None:
        if self.runtime is not None:
            self.runtime.kill_now()

    async def stop(self, grace_s: float) -> None:
        if self.runtime is not None:
            self._event("Killing", f"Stopping container {self.name}")
            await self.runtime.stop(grace_s)


class PodWorker:
    def __init__(self, kubelet: Kubelet, pod: dict[str, Any], pod_ip: str, host_ip: str) -> None:
        self.kubelet = kubelet
        self.pod = pod
        self.uid = str(pod["metadata"]["uid"])
        self.name = str(pod["metadata"]["name"])
        self.namespace = str(pod["metadata"]["namespace"])
        self.node = str(pod["spec"]["nodeName"])
        self.pod_ip = pod_ip
        self.host_ip = host_ip
        self.volumes: dict[str, Path] = {}
        self.start_time: str | None = None
        self.sandbox_ready = False
        self.phase = "Pending"
        spec = pod["spec"]
        self.inits = [ContainerRunner(self, c, init=True) for c in spec.get("initContainers") or []]
        self.apps = [ContainerRunner(self, c, init=False) for c in spec.get("containers") or []]
        self.initialized = not self.inits
        self.task: asyncio.Task[None] | None = None
        self._published: dict[str, Any] | None = None

    @property
    def pod_ref(self) -> str:
        return f"{self.name}_{self.namespace}({self.uid})"

    def runner(self, container: str | None) -> ContainerRunner | None:
        runners = [*self.inits, *self.apps]
        if container is None:
            return self.apps[0] if len(self.apps) == 1 else None
        return next((r for r in runners if r.name == container), None)

    def event(self, reason: str, message: str, *, warning: bool = False, field_path: str | None = None) -> None:
        self.kubelet.recorder.record(
            self.pod, reason, message, warning=warning, component=COMPONENT, host=self.node, field_path=field_path
        )

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run())
        self.task.add_done_callback(self._report)

    def _report(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or task.exception() is None:
            return
        error = task.exception()
        assert error is not None  # noqa: S101 - narrows the type for mypy
        # A bug in the fake, not the pod's fault: say so loudly instead of leaving it Pending in silence.
        FAILURES.report("sandbox kubelet", error, doing=f"pod {self.namespace}/{self.name}")
        message = f"the sandbox kubelet failed: {error!r}"
        self.event("FailedSandboxKubelet", message, warning=True)
        # Nothing runs this pod's containers any more: none may stay "running" (or wait for a start that will
        # never come). They end, and so does the pod, which its controller may then replace.
        for runner in [*self.inits, *self.apps]:
            if runner.status.terminated is not None:
                continue
            runner.kill_now()
            started_at = runner.status.state.get("running", {}).get("startedAt", START_ERROR_STARTED_AT)
            runner.status.state = {
                "terminated": {
                    "exitCode": LOST_EXIT_CODE,
                    "reason": "Error",
                    "message": message,
                    "startedAt": started_at,
                    "finishedAt": timestamp(),
                }
            }
            runner.status.ready = runner.status.started = False
        self.phase = "Failed"
        self.publish()

    async def _run(self) -> None:
        while not self.kubelet.node_ready(self.node):
            await asyncio.sleep(0.1)
        self.start_time = timestamp()
        self.publish()
        while True:
            try:
                self.volumes = prepare_volumes(self.kubelet.layout, self.kubelet.store, self.pod, self.node)
                break
            except MountError as error:
                self.event("FailedMount", str(error), warning=True)
                await asyncio.sleep(self.kubelet.timing.wall_interval(2.0))
        self.sandbox_ready = True
        self.publish()
        for runner in self.inits:
            if runner.sidecar:
                asyncio.ensure_future(runner.run())
                await runner.became_started.wait()
                continue
            code = await runner.run()
            if code != 0:  # restartPolicy Never: the pod has failed
                self.phase = "Failed"
                self.publish()
                return
        self.initialized = True
        self.publish()
        codes = await asyncio.gather(*(runner.run() for runner in self.apps))
        self.phase = "Succeeded" if all(code == 0 for code in codes) else "Failed"
        for runner in self.inits:
            if runner.sidecar:
                await runner.stop(self.kubelet.grace_s(self.pod))
        self.publish()

    def compute_phase(self) -> str:
        if self.phase in ("Succeeded", "Failed"):
            return self.phase
        # The kubelet's getPhase: once every container has ended for good, the pod's phase says so in the same
        # status that shows the last one terminated, never a "Running" pod with nothing left to run.
        ended = [r.status.terminated for r in self.apps]
        if self.initialized and ended and all(ended):
            succeeded = all(t["exitCode"] == 0 for t in ended if t)
            policy = str(self.pod["spec"].get("restartPolicy") or "Always")
            if succeeded and policy != "Always":
                return "Succeeded"
            if policy == "Never":
                return "Failed"
        if self.initialized and any(
            r.status.running or r.status.restart_count or r.status.terminated for r in self.apps
        ):
            return "Running"
        return "Pending"

    def status(self, current: dict[str, Any]) -> dict[str, Any]:
        node_ready = self.kubelet.node_ready(self.node)
        app_ready = all(r.status.ready for r in self.apps) and node_ready
        unready = [r.name for r in self.apps if not r.status.ready]
        incomplete = [r.name for r in self.inits if not (r.status.terminated or r.sidecar and r.status.started)]
        phase = self.compute_phase()
        done = phase in ("Succeeded", "Failed")
        wanted = [
            ("PodReadyToStartContainers", "True" if self.sandbox_ready and not done else "False", None, None),
            (
                "Initialized",
                "True" if self.initialized else "False",
                None if self.initialized else "ContainersNotInitialized",
                None if self.initialized else f"containers with incomplete status: [{' '.join(incomplete)}]",
            ),
        ]
        reason = "PodCompleted" if done else "ContainersNotReady"
        message = None if done else f"containers with unready status: [{' '.join(unready)}]"
        for kind in ("Ready", "ContainersReady"):
            wanted.append((kind, "True", None, None) if app_ready and not done else (kind, "False", reason, message))
        old_conditions = current.get("conditions") or []
        conditions = merged_conditions(old_conditions, wanted)
        scheduled = next((c for c in old_conditions if c.get("type") == "PodScheduled"), None)
        if scheduled is not None:
            conditions.append(scheduled)
        status: dict[str, Any] = {
            "phase": phase,
            "conditions": conditions,
            "hostIP": self.host_ip,
            "hostIPs": [{"ip": self.host_ip}],
            "podIP": self.pod_ip,
            "podIPs": [{"ip": self.pod_ip}],
            "qosClass": current.get("qosClass", "BestEffort"),
        }
        if self.start_time:
            status["startTime"] = self.start_time
        statuses = [r.status.api() for r in self.apps]
        if not self.sandbox_ready or not self.initialized:
            waiting = "PodInitializing" if self.sandbox_ready else "ContainerCreating"
            for entry in statuses:
                if "waiting" in entry["state"] and entry["state"]["waiting"].get("reason") == "ContainerCreating":
                    entry["state"] = {"waiting": {"reason": waiting}}
        status["containerStatuses"] = statuses
        if self.inits:
            status["initContainerStatuses"] = [r.status.api() for r in self.inits]
        return status

    def publish(self) -> None:
        self.kubelet.publish(self)

    async def stop(self) -> None:
        grace = self.kubelet.grace_s(self.pod)
        if self.task is not None and not self.task.done():
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task
        await asyncio.gather(*(r.stop(grace) for r in [*self.apps, *self.inits]), return_exceptions=True)

    def kill_now(self) -> None:
        for runner in [*self.apps, *self.inits]:
            runner.kill_now()
        if self.task is not None and not self.task.done():
            self.task.cancel()
