"""The sandbox's kubelet: every pod bound to a node becomes local work, on the fake API server's event loop.

One ``PodWorker`` per pod (``worker.py``) pulls, configures, starts and probes its containers and
writes the pod's status; ``runtimes.py`` decides what a container becomes (vLLM, a tool command, a
placeholder). The kubelet also plays the device plugins' part of node registration: ``nvidia.com/gpu``
and ``vpc.amazonaws.com/efa`` appear in a node's capacity only once the NVIDIA / EFA device-plugin
pod runs on it (recognised by image), as on an AL2023 node; nodes whose AMI ships the plugin
(Bottlerocket NVIDIA, EKS Auto Mode) advertise them from the start. It serves what ``pods/log`` and
``pods/portforward`` need. Every child process is stopped when its pod goes or the fake stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shlex
import sys
import tempfile
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capserve_sandbox.kube.aws_shim import CLIENT, SDK_HOOK, SHIM_COMMANDS, ShimServer
from capserve_sandbox.kube.errors import ApiError
from capserve_sandbox.kube.events import Recorder
from capserve_sandbox.kube.kubelet.faults import FaultKind, Faults
from capserve_sandbox.kube.kubelet.played_staging import ListSizes, StagingPlay, stands_for_bytes
from capserve_sandbox.kube.kubelet.played_start import StandsFor
from capserve_sandbox.kube.kubelet.processes import LocalProcess, stop_all
from capserve_sandbox.kube.kubelet.runtimes import (
    ContainerContext,
    Faulty,
    Placeholder,
    Runtime,
    ServeFn,
    ToolRuntime,
    VllmGroup,
    VllmRuntime,
    is_tool,
    is_vllm,
    sandbox_server,
)
from capserve_sandbox.kube.kubelet.volumes import Layout
from capserve_sandbox.kube.kubelet.worker import PodWorker
from capserve_sandbox.kube.network import Answer, Network, OpenNetwork, connect, node_pool, pull_timeout, registry_host
from capserve_sandbox.kube.network import resolve as resolve_name
from capserve_sandbox.kube.nodes import is_node_ready, node_ip, with_devices
from capserve_sandbox.kube.store import Store
from capserve_sandbox.kube.timing import Timing

log = logging.getLogger(__name__)
GPU, EFA = "nvidia.com/gpu", "vpc.amazonaws.com/efa"
MAX_GRACE_S = 5.0  # wall seconds: a stop never holds the sandbox longer than this

__all__ = ["DevicePlugins", "Kubelet", "NodeDevices"]


@dataclass
class NodeDevices:
    """The devices a node has, and who advertises them."""

    gpus: int
    efa: int
    builtin_plugins: bool = False  # Bottlerocket NVIDIA / Auto Mode: no DaemonSet needed
    broken_gpus: bool = False  # the plugin runs but finds no healthy GPU (driver trouble)
    instance_role_arn: str | None = None  # the IAM role of the instance's credentials (what IMDS would hand out)


class DevicePlugins:
    """Which images are the device plugins (the names their projects publish)."""

    @staticmethod
    def kind(image: str) -> str | None:
        if "aws-efa-k8s-device-plugin" in image:
            return EFA
        if "k8s-device-plugin" in image and "nvidia" in image:
            return GPU
        return None


class Kubelet:
    def __init__(
        self,
        store: Store,
        recorder: Recorder,
        timing: Timing,
        layout: Layout,
        faults: Faults,
        node_devices: dict[str, NodeDevices],
        serve: ServeFn | None = None,
        network: Callable[[], Network] | None = None,
    ) -> None:
        self.store = store
        self._network = network or OpenNetwork
        self.recorder = recorder
        self.timing = timing
        self.layout = layout
        self.faults = faults
        self.node_devices = node_devices
        self.serve: ServeFn = serve or sandbox_server
        self.workers: dict[str, PodWorker] = {}
        self.images: dict[str, set[str]] = {}
        self._pull_locks: dict[str, asyncio.Lock] = {}  # node -> one pull at a time (serializeImagePulls)
        self.vllm_groups: dict[tuple[str, str], VllmGroup] = {}
        self._pod_ips: dict[str, str] = {}
        self._next_ip = 0
        self._registered: dict[str, set[str]] = {}  # node -> device resources ever advertised
        self._stopping: set[asyncio.Task[None]] = set()
        self._shim: ShimServer | None = None
        self.processes: weakref.WeakSet[LocalProcess] = weakref.WeakSet()  # every local process of this kubelet
        # What the served checkpoint stands for, on a simulated block: vLLM starts take the modelled time
        # (played_start.py). None: the stand-in server starts at once, as in every test that plays no block.
        self.stands_for: StandsFor | None = None
        self._staging: StagingPlay | None = None

    def pull_lock(self, node: str) -> asyncio.Lock:
        """The lock a node's image pulls take in turn (made on the kubelet's loop, on first use)."""
        return self._pull_locks.setdefault(node, asyncio.Lock())

    def reset(self) -> None:
        self.kill_all_now()
        self.workers.clear()
        self.images.clear()
        self._pull_locks.clear()
        self.vllm_groups.clear()
        self._registered.clear()

    # ------------------------------------------------------------------ the sync (on the loop, in each pass)

    def instance_type(self, node: str) -> str | None:
        """The node's EC2 instance type (its ``node.kubernetes.io/instance-type`` label), if it says; a HyperPod
        node's label spells it ``ml.<type>`` (docs/hyperpod.md §6)."""
        with self.store.lock:
            found = self.store.objects.get(("", "nodes", None, node)) or {}
        label = ((found.get("metadata") or {}).get("labels") or {}).get("node.kubernetes.io/instance-type")
        return str(label).removeprefix("ml.") if label else None

    def sync(self) -> None:
        with self.store.lock:
            pods = {o["metadata"]["uid"]: o for k, o in list(self.store.objects.items()) if k[:2] == ("", "pods")}
            nodes = {k[3] for k in self.store.objects if k[:2] == ("", "nodes")}
            for uid, worker in list(self.workers.items()):
                if uid not in pods:
                    del self.workers[uid]
                    self._stop_later(worker)
            for uid, pod in pods.items():
                node = (pod.get("spec") or {}).get("nodeName")
                if not node or uid in self.workers or node not in nodes:
                    continue
                if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                    continue
                worker = PodWorker(self, pod, self._pod_ip(pod), node_ip(node))
                self.workers[uid] = worker
                worker.start()
            self._devices(pods.values(), nodes)

    def _pod_ip(self, pod: Mapping[str, Any]) -> str:
        uid = str(pod["metadata"]["uid"])
        if (pod.get("spec") or {}).get("hostNetwork"):
            return node_ip(str(pod["spec"]["nodeName"]))
        if uid not in self._pod_ips:
            self._next_ip += 1
            self._pod_ips[uid] = f"10.65.{self._next_ip // 250}.{self._next_ip % 250 + 2}"
        return self._pod_ips[uid]

    def _stop_later(self, worker: PodWorker) -> None:
        async def stop() -> None:
            await worker.stop()
            self.layout.remove_pod(worker.uid)

        task = asyncio.get_running_loop().create_task(stop())
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)

    def _devices(self, pods: Any, nodes: set[str]) -> None:
        running: dict[str, set[str]] = {}
        for pod in pods:
            node = (pod.get("spec") or {}).get("nodeName")
            if not node or (pod.get("status") or {}).get("phase") != "Running":
                continue
            states = {c.get("name"): c for c in (pod.get("status") or {}).get("containerStatuses") or []}
            for container in pod["spec"].get("containers") or []:
                kind = DevicePlugins.kind(str(container.get("image") or ""))
                if kind and "running" in (states.get(container.get("name")) or {}).get("state", {}):
                    running.setdefault(node, set()).add(kind)
        nodes_resource = self.store.resource("", "v1", "nodes")
        for name in nodes:
            devices = self.node_devices.get(name)
            node = self.store.objects.get(("", "nodes", None, name))
            if devices is None or node is None:
                continue
            plugins = {GPU, EFA} if devices.builtin_plugins else running.get(name, set())
            registered = self._registered.setdefault(name, set())
            wanted: dict[str, int] = {}
            for kind, count in ((GPU, 0 if devices.broken_gpus else devices.gpus), (EFA, devices.efa)):
                if kind in plugins and (count or kind == GPU and devices.gpus):
                    wanted[kind] = count
                    registered.add(kind)
                elif kind in registered:
                    wanted[kind] = 0  # the plugin went away: capacity stays registered, nothing allocatable
            capacity = (node.get("status") or {}).get("capacity") or {}
            if all(capacity.get(k) == str(v) for k, v in wanted.items()):
                continue
            self.store.put_object(nodes_resource, with_devices(node, wanted), manager="kubelet", trusted=True)

    # ------------------------------------------------------------------ what workers call

    def runtime_for(self, ctx: ContainerContext) -> Runtime:
        name = str(ctx.container.get("name"))
        for kind in (FaultKind.CRASH_LOOP, FaultKind.OOM):
            fault = self.faults.take(kind, ctx.pod_name, name, ctx.image)
            if fault is not None:
                return Faulty(ctx, kind, self.timing.wall(fault.seconds))
        if is_vllm(ctx.container):
            return VllmRuntime(ctx, self.serve)
        if is_tool(ctx.container):
            return ToolRuntime(ctx)
        return Placeholder(ctx)

    def publish(self, worker: PodWorker) -> None:
        with self.store.lock:
            current = self.store.objects.get(("", "pods", worker.namespace, worker.name))
            if current is None or current["metadata"]["uid"] != worker.uid:
                return
            status = worker.status(current.get("status") or {})
            if status != current.get("status"):
                self.store.write_status(
                    self.store.resource("", "v1", "pods"), worker.namespace, worker.name, status, "kubelet"
                )

    def node_ready(self, node: str) -> bool:
        found = self.store.objects.get(("", "nodes", None, node))
        return found is not None and is_node_ready(found)

    # ------------------------------------------------------------------ the network (network.py)

    @property
    def network(self) -> Network:
        return self._network()

    def pull_blocked(self, node: str, image: str) -> str | None:
        """containerd's error when the node has no path to the image's registry, else None."""
        host = registry_host(image)
        with self.store.lock:
            pool = node_pool(self.store.objects.get(("", "nodes", None, node)))
        why = self.network.route(pool, host)
        if why is None:
            return None
        log.info("sandbox kubelet on %s cannot pull %s: %s", node, image, why)
        return pull_timeout(image, host)

    def _pod_by_uid(self, uid: str) -> dict[str, Any] | None:
        return next(
            (o for k, o in self.store.objects.items() if k[:2] == ("", "pods") and o["metadata"].get("uid") == uid),
            None,
        )

    def pod_resolve(self, uid: str | None, name: str) -> Answer:
        """``name`` looked up from the pod ``uid`` (cluster DNS through CoreDNS, or the VPC resolver)."""
        with self.store.lock:
            pod = self._pod_by_uid(uid) if uid else None
            if pod is None:
                return Answer("127.0.0.1")  # not from a pod of ours: nothing to model
            return resolve_name(self.network, self.store.objects, pod, name)

    def pod_connect(self, uid: str | None, name: str, port: int) -> str | None:
        """Why a TCP connection from the pod ``uid`` to ``name``:``port`` would time out, or None."""
        with self.store.lock:
            pod = self._pod_by_uid(uid) if uid else None
            if pod is None:
                return None
            return connect(self.network, self.store.objects, pod, name, port)

    def copied_from_s3(
        self, uid: str | None, bucket: str, key: str, size: int, list_sizes: ListSizes, *, party: str | None = None
    ) -> None:
        """An ``aws s3 cp`` of the pod ``uid`` brought ``key`` onto its node: on a simulated block, wait out the
        modelled time of the bytes it stands for (played_staging.py); ``party``: the clock's party of the container
        process that asked (``ProcessHold``), which holds the clock no more meanwhile."""
        if self.stands_for is None or not uid:
            return
        with self.store.lock:
            pod = self._pod_by_uid(uid)
        node = str(((pod or {}).get("spec") or {}).get("nodeName") or "")
        if not node:
            return
        if self._staging is None or self._staging.stands_for is not self.stands_for:
            self._staging = StagingPlay(self.stands_for)
        node_bytes = stands_for_bytes(key, size, self.stands_for, list_sizes, bucket)
        self._staging.copied(node, self.instance_type(node), node_bytes, party=party)

    def grace_s(self, pod: Mapping[str, Any]) -> float:
        grace = float((pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30))
        return min(self.timing.wall(grace), MAX_GRACE_S)

    def shim_dir(self) -> Path:
        """A directory holding the ``aws`` shim, to go first on a tool container's PATH (``aws_shim.py``)."""
        directory = self.layout.root / "bin"
        if self._shim is None:
            directory.mkdir(parents=True, exist_ok=True)
            # Unix socket paths are limited to ~100 bytes: keep it short, whatever the state dir is.
            self._shim = ShimServer(Path(tempfile.mkdtemp(prefix="capserve-aws-")) / "aws.sock", self)
            client = directory / "aws_client.py"
            client.write_text(f"SOCKET = {str(self._shim.socket_path)!r}\n{CLIENT}", encoding="utf-8")
            # -S -E: no site packages, no PYTHON* variables: the client starts in a few milliseconds.
            for command in SHIM_COMMANDS:  # aws, and the network tools answered from the model (net_tools.py)
                tool = directory / command
                tool.write_text(
                    f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -S -E {shlex.quote(str(client))} {command} "$@"\n',
                    encoding="utf-8",
                )
                tool.chmod(0o755)
            # The python3 of a Python tool image (the staging copy): this Python, with boto3, whose S3 calls ask
            # the shim first (aws_shim.SDK_HOOK, loaded as sitecustomize).
            hook = directory / "python-hook"
            hook.mkdir(exist_ok=True)
            (hook / "sitecustomize.py").write_text(
                f"SOCKET = {str(self._shim.socket_path)!r}\n{SDK_HOOK}", encoding="utf-8"
            )
            python = directory / "python3"
            python.write_text(
                f"#!/bin/sh\nPYTHONPATH={shlex.quote(str(hook))} exec {shlex.quote(sys.executable)} \"$@\"\n",
                encoding="utf-8",
            )
            python.chmod(0o755)
        return directory

    # ------------------------------------------------------------------ distributed vLLM

    def resolve(self, namespace: str, address: str) -> tuple[str, str] | None:
        """The pod an address names, as cluster DNS would resolve it: ``<hostname>.<subdomain>[.<ns>[.svc...]]``
        through a headless Service named ``<subdomain>``, or a pod IP. None when it does not resolve."""
        # Under the store's lock: other threads (moto's, the aws shim's) write the store while this runs on
        # the loop, and a dict that changes size under an iteration raises.
        with self.store.lock:
            return self._resolve(namespace, address)

    def _resolve(self, namespace: str, address: str) -> tuple[str, str] | None:
        pods = [o for k, o in self.store.objects.items() if k[:2] == ("", "pods")]
        for pod in pods:
            if (pod.get("status") or {}).get("podIP") == address:
                return pod["metadata"]["namespace"], pod["metadata"]["name"]
        parts = address.split(".")
        if len(parts) < 2:
            return None
        hostname, subdomain = parts[0], parts[1]
        target_ns = parts[2] if len(parts) > 2 and parts[2] != "svc" else namespace
        service = self.store.objects.get(("", "services", target_ns, subdomain))
        if service is None or (service.get("spec") or {}).get("clusterIP") != "None":
            return None
        for pod in pods:
            spec = pod.get("spec") or {}
            if (
                pod["metadata"]["namespace"] == target_ns
                and spec.get("hostname") == hostname
                and spec.get("subdomain") == subdomain
            ):
                return target_ns, pod["metadata"]["name"]
        return None

    def vllm_group_open(self, namespace: str, leader: str, args: Any, expected: int) -> VllmGroup:
        group = VllmGroup(leader=args, expected=expected)
        self.vllm_groups[(namespace, leader)] = group
        return group

    def vllm_group(self, key: tuple[str, str]) -> VllmGroup | None:
        return self.vllm_groups.get(key)

    def vllm_group_close(self, namespace: str, leader: str, group: VllmGroup) -> None:
        """Forget ``group``, and only it: a recreated leader pod has the same name and may have opened its own."""
        if self.vllm_groups.get((namespace, leader)) is group:
            del self.vllm_groups[(namespace, leader)]

    def vllm_leave(self, pod_uid: str) -> None:
        for group in self.vllm_groups.values():
            for rank, uid in list(group.joined.items()):
                if uid == pod_uid:
                    del group.joined[rank]
                    group.changed.set()

    # ------------------------------------------------------------------ pods/log and pods/portforward

    def _worker(self, namespace: str, name: str) -> tuple[dict[str, Any], PodWorker | None]:
        pod = self.store.objects.get(("", "pods", namespace, name))
        if pod is None:
            raise ApiError(404, "NotFound", f'pods "{name}" not found')
        worker = self.workers.get(pod["metadata"]["uid"])
        return pod, worker

    def logs(
        self, namespace: str, name: str, container: str | None, *, previous: bool, tail: int | None, timestamps: bool
    ) -> str:
        pod, worker = self._worker(namespace, name)
        names = [c["name"] for c in pod["spec"].get("containers") or []]
        all_names = [*names, *[c["name"] for c in pod["spec"].get("initContainers") or []]]
        if container is None:
            if len(names) != 1:
                raise ApiError(
                    400,
                    "BadRequest",
                    f"a container name must be specified for pod {name}, choose one of: [{' '.join(names)}]",
                )
            container = names[0]
        if container not in all_names:
            raise ApiError(400, "BadRequest", f"container {container} is not valid for pod {name}")
        runner = worker.runner(container) if worker else None
        if previous:
            if runner is None or runner.logs.previous is None:
                raise ApiError(
                    400, "BadRequest", f'previous terminated container "{container}" in pod "{name}" not found'
                )
            return runner.logs.previous.text(tail, timestamps)
        if runner is None or runner.logs.current is None:
            waiting = "ContainerCreating"
            if runner is not None:
                waiting = str(runner.status.state.get("waiting", {}).get("reason", waiting))
            raise ApiError(400, "BadRequest", f'container "{container}" in pod "{name}" is waiting to start: {waiting}')
        return runner.logs.current.text(tail, timestamps)

    def local_port(self, namespace: str, name: str, port: int) -> int:
        """The local port serving ``port`` of the pod (raises ApiError when nothing can)."""
        pod, worker = self._worker(namespace, name)
        if (pod.get("status") or {}).get("phase") != "Running" or worker is None:
            raise ApiError(400, "BadRequest", "unable to upgrade connection: pod does not exist or is not running")
        for runner in worker.apps + worker.inits:
            runtime = runner.runtime
            if runtime is not None and port in runtime.ports:
                return runtime.ports[port]
        raise LookupError(
            f"error forwarding port {port} to pod {pod['metadata']['uid']}, uid : failed to connect to "
            f"localhost:{port} inside namespace: dial tcp4 127.0.0.1:{port}: connect: connection refused"
        )

    # ------------------------------------------------------------------ shutdown

    async def shutdown(self) -> None:
        workers = list(self.workers.values())
        self.workers.clear()
        await asyncio.gather(*(w.stop() for w in workers), return_exceptions=True)
        for task in list(self._stopping):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await stop_all(self.processes, MAX_GRACE_S)
        if self._shim is not None:
            self._shim.close()
            self._shim = None

    def kill_all_now(self) -> None:
        for worker in self.workers.values():
            worker.kill_now()
