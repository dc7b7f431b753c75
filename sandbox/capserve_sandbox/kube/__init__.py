"""A fake Kubernetes for the sandbox: an API server, a control plane that schedules, and a kubelet that runs pods.

    with fake_kube(time_scale=60) as kube:
        api = capserve.tasks.kube.api_client(kube.url, kube.ca_data, lambda: SecretStr(kube.token))
        kube.provision_nodes("gpu", 2, instance_type="p6-b300.48xlarge", taints=[GPU_TAINT])
        kube.inject(Fault(FaultKind.CRASH_LOOP, pod="vllm-*"))

It serves plain HTTP on 127.0.0.1 (``ca_data`` is None) and requires a bearer token on every request
(EKS-shaped tokens or ``kube.token``; anything else gets 401). Behind it (docs/sandbox-kubelet.md):
controllers that create Pods (``workloads.py``, ``lws.py``), a scheduler that binds them only where
labels, taints and allocatable resources admit them (``scheduler.py``), and a kubelet that runs each
bound pod locally, probes it and reports its status (``kubelet/``). Nodes come from EC2 instance
types (``instances.py``); GPUs and EFA devices appear only once their device plugin runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from capserve_sandbox.failures import FAILURES
from capserve_sandbox.kube.cluster import Cluster
from capserve_sandbox.kube.eks_bootstrap import eks_default_addons
from capserve_sandbox.kube.events import Recorder
from capserve_sandbox.kube.instances import DEFAULT_ROOT_GIB, node_shape
from capserve_sandbox.kube.kubelet import Kubelet, NodeDevices
from capserve_sandbox.kube.kubelet.faults import Fault, FaultKind, Faults
from capserve_sandbox.kube.kubelet.runtimes import real_vllm
from capserve_sandbox.kube.kubelet.volumes import Layout
from capserve_sandbox.kube.network import CNI_NOT_READY, Network, OpenNetwork
from capserve_sandbox.kube.nodes import NodeFailure, node_name, node_object, set_ready
from capserve_sandbox.kube.outcomes import Outcome, outcome_faults
from capserve_sandbox.kube.server import ApiServer, RecordedRequest, ServerThread
from capserve_sandbox.kube.store import Event, Store
from capserve_sandbox.kube.timing import Timing
from capserve_sandbox.kube.workloads import group_plural

__all__ = ["Fault", "FaultKind", "FakeKube", "NodeFailure", "Outcome", "RecordedRequest", "fake_kube"]

log = logging.getLogger(__name__)
DevicePluginMode = Literal["daemonset", "builtin"]


class FakeKube:
    """The running fake: where it listens, how to authenticate, and the knobs tests turn.

    ``time_scale`` divides every Kubernetes duration (probes, back-offs, deadlines; ``timing.py``).
    ``serving`` picks what a vLLM pod runs: the sandbox OpenAI server, or the real vLLM from
    ``vllm_venv`` (default ``.venv-vllm``). ``state_dir`` holds the nodes' directories (default: a
    temporary directory removed on stop).
    """

    def __init__(
        self,
        *,
        k8s_version: str = "1.34",
        controller_delay_s: float = 0.05,
        bookmark_interval_s: float = 60.0,
        validate: bool = True,
        time_scale: float = 1.0,
        state_dir: Path | None = None,
        serving: Literal["sandbox", "vllm"] = "sandbox",
        vllm_venv: Path | None = None,
        faults: Faults | None = None,
        host: ServerThread | None = None,
    ) -> None:
        # What another cluster's Kubernetes is made with (``sibling``).
        self._options: dict[str, Any] = {
            "k8s_version": k8s_version, "controller_delay_s": controller_delay_s,
            "bookmark_interval_s": bookmark_interval_s, "validate": validate, "time_scale": time_scale,
            "serving": serving, "vllm_venv": vllm_venv,
        }
        self.store = Store(k8s_version=k8s_version, validate=validate)
        self.recorder = Recorder(self.store)
        self.timing = Timing(time_scale)
        self.faults = faults if faults is not None else Faults()
        self.node_devices: dict[str, NodeDevices] = {}
        # What nodes and pods reach (network.py); attach_fake_kube puts moto's VPC here.
        self.network: Network = OpenNetwork()
        self._own_state_dir = state_dir is None
        self.state_dir = Path(state_dir) if state_dir else Path(tempfile.mkdtemp(prefix="capserve-kube-"))
        serve = None
        if serving == "vllm":
            from capserve_sandbox.vllm_cpu import VllmCpuSettings

            serve = real_vllm(vllm_venv or VllmCpuSettings().venv)
        self.kubelet = Kubelet(
            self.store, self.recorder, self.timing, Layout(self.state_dir), self.faults, self.node_devices, serve,
            network=lambda: self.network,
        )
        self.cluster = Cluster(self.store, self.recorder, self.timing, self.kubelet)
        self.controller_delay_s = controller_delay_s
        self.token = "capserve-sandbox-" + secrets.token_urlsafe(24)
        self.ca_data: str | None = None  # plain HTTP on loopback: there is no CA
        self._api = ApiServer(self.store, self.token, k8s_version, bookmark_interval_s, kubelet=self.kubelet)
        self._api.shutdown_hooks.append(self.kubelet.shutdown)
        self._hosted = host is not None  # served on another cluster's thread and loop (``sibling``)
        self._thread = host if host is not None else ServerThread(self._api)
        self._siblings: list[FakeKube] = []
        self.deleted = False  # its EKS cluster was deleted: the API no longer answers, nothing reconciles
        self._stopped = False
        self._nodes_made = 0
        self._pools: dict[str, list[str]] = {}
        self._pass_handle: asyncio.Handle | None = None
        self._timed_handle: asyncio.TimerHandle | None = None
        self.url = ""
        self.store.listeners.append(self._on_change)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> FakeKube:
        self.url = self._thread.add(self._api) if self._hosted else self._thread.start()
        return self

    def stop(self) -> None:
        """Stop every pod's processes, then the server (and the other clusters' it serves); remove the state
        directory if it was ours. Stopping twice is stopping once."""
        if self._stopped:
            return
        self._stopped = True
        for other in self._siblings:
            other.stop()
        if self._hosted:
            with contextlib.suppress(RuntimeError):  # the host's loop has gone already
                self._thread.remove(self._api)
        else:
            self._thread.stop()
        self.kubelet.kill_all_now()  # in case the loop could not stop them
        if self._own_state_dir:
            shutil.rmtree(self.state_dir, ignore_errors=True)

    # ------------------------------------------------------------------ one Kubernetes per EKS cluster

    def sibling(self) -> FakeKube:
        """Another cluster's Kubernetes, as each EKS cluster has its own (``clusters.py``): its own store, nodes,
        controllers, kubelet and port, with this one's options and faults, served on this one's thread and
        stopped with it."""
        other = FakeKube(**self._options, faults=self.faults, host=self._thread)
        other.kubelet.stands_for = self.kubelet.stands_for
        self._siblings.append(other)
        return other.start()

    def delete(self) -> None:
        """Its EKS cluster is deleted: the API stops answering (its port closes, as the cluster's endpoint goes with
        it), every pod's processes stop, and no controller runs again. What was stored stays for inspection."""
        if self.deleted or self._stopped:
            return
        self.deleted = True
        self._thread.remove(self._api)  # runs the kubelet's shutdown: the pods' processes stop
        self.kubelet.kill_all_now()

    def renew(self) -> FakeKube:
        """A deleted cluster's Kubernetes made new for another cluster: empty (faults kept), on a new port, its
        request record begun anew (what it saw belongs to the cluster it served)."""
        if not self.deleted:
            return self
        self._on_loop(self._forget_now)
        self._on_loop(self._api.requests.clear)
        self.deleted = False
        self.url = self._thread.add(self._api)
        return self

    def reset(self) -> None:
        """Back to an empty cluster (built-in kinds and namespaces only), no faults, no nodes."""
        self._on_loop(self._reset_now)

    def _reset_now(self) -> None:
        with self.store.lock:
            self._forget_now()
            self.faults.clear()
            self._api.requests.clear()

    def _forget_now(self) -> None:
        with self.store.lock:
            self.kubelet.reset()
            self.store.reset()
            self.cluster.reset()
            self.recorder.reset()
            self.node_devices.clear()
            self._pools.clear()

    @property
    def requests(self) -> list[RecordedRequest]:
        return list(self._api.requests)

    # ------------------------------------------------------------------ nodes

    def provision_nodes(
        self,
        pool: str,
        count: int,
        *,
        instance_type: str = "p6-b300.48xlarge",
        gpus_per_node: int | None = None,
        efa_per_node: int | None = None,
        labels: Mapping[str, str] | None = None,
        taints: Sequence[Mapping[str, str]] | None = None,
        failure: NodeFailure | str | None = None,
        health_labels: bool = False,
        zone: str = "us-east-2a",
        ready_after_s: float = 0.0,
        local_storage: str | None = None,
        root_volume_gib: int = DEFAULT_ROOT_GIB,
        device_plugins: DevicePluginMode = "daemonset",
        host_directories: Sequence[str] = (),
        instance_role_arn: str | None = None,
        hugepages_2mi: int = 0,
        cni_failure: str | None = None,
    ) -> list[str]:
        """Make ``count`` nodes of ``pool`` register, as a node group's instances would.

        Capacity and allocatable come from ``instance_type`` (``instances.py``); ``gpus_per_node`` /
        ``efa_per_node`` override the devices the node has. ``local_storage`` is nodeadm's
        ``localStorage.strategy`` ("RAID0" puts ephemeral storage on the NVMe array); ``hugepages_2mi`` the
        2 MiB pages the boot configuration allocates (``capserve_sandbox.aws_ext.nodeadm``). With
        ``device_plugins="daemonset"`` (AL2023) GPUs and EFA devices are advertised only once the
        device-plugin pods run there; "builtin" (Bottlerocket NVIDIA, Auto Mode) advertises them at once.
        ``failure``: "never-ready", "no-gpus" (the plugin finds no healthy GPU), "health-check-failed"
        (HyperPod). With ``ready_after_s`` > 0 the nodes register NotReady and turn Ready later.
        ``host_directories`` exist on the node from boot (HyperPod: /opt/dlami/nvme, /opt/sagemaker).
        ``instance_role_arn``: the node's tool containers act as that IAM role for S3 (``aws_shim``); None
        leaves them with the sandbox's own credentials. Under IAM enforcement they get that role's credentials.
        ``cni_failure`` (why the VPC CNI cannot initialise, from ``self.network``): the nodes register
        NotReady with the kubelet's CNI message and stay so.
        """
        failure = NodeFailure(failure) if failure is not None else None
        shape = node_shape(
            instance_type,
            local_storage=local_storage,
            root_volume_gib=root_volume_gib,
            gpus=gpus_per_node,
            efa=efa_per_node,
            hugepages_2mi=hugepages_2mi,
        )
        made = []
        # One call's nodes join together: the scheduler (which reads under the store's lock) never sees the first
        # of them alone, so pods pending before the call spread over all of them, whatever the machine's load.
        with self.store.lock:
            for _ in range(count):
                name = node_name(self._nodes_made)
                self._nodes_made += 1
                self.node_devices[name] = NodeDevices(
                    gpus=shape.gpus,
                    efa=shape.efa,
                    builtin_plugins=device_plugins == "builtin",
                    broken_gpus=failure is NodeFailure.NO_GPUS,
                    instance_role_arn=instance_role_arn,
                )
                # Plugins shipped in the AMI register their devices with the kubelet before the node is Ready.
                gpus = shape.gpus if failure is not NodeFailure.NO_GPUS else 0
                builtin = {"nvidia.com/gpu": gpus} if shape.gpus else {}
                if shape.efa:
                    builtin["vpc.amazonaws.com/efa"] = shape.efa
                node = node_object(
                    name,
                    pool,
                    shape=shape,
                    devices=builtin if device_plugins == "builtin" else None,
                    labels=dict(labels or {}),
                    taints=[dict(t) for t in taints or ()],
                    failure=failure,
                    health_labels=health_labels,
                    ready=ready_after_s <= 0 and cni_failure is None,
                    zone=zone,
                    **({"not_ready_message": CNI_NOT_READY} if cni_failure else {}),
                )
                self.kubelet.layout.prepare_node(name, local_storage, shape.nvme_disks, host_directories)
                self._put_node(node)
                if cni_failure:
                    log.warning("sandbox node %s stays NotReady: the VPC CNI cannot start (%s)", name, cni_failure)
                elif ready_after_s > 0 and failure is not NodeFailure.NEVER_READY:
                    self._later(ready_after_s, lambda n=name: self.set_node_ready(n, True))
                made.append(name)
        self._pools.setdefault(pool, []).extend(made)
        return made

    def set_node_ready(self, name: str, ready: bool = True) -> None:
        """Flip a node's Ready condition, as its kubelet would on (re)connecting or failing."""
        with self.store.lock:
            node = self.store.get(self.store.resource("", "v1", "nodes"), None, name)
            self._put_node(set_ready(node, ready))

    def remove_nodes(self, pool: str) -> list[str]:
        """The pool's instances are gone (node group deleted, reservation over): their Nodes go too."""
        nodes = self.store.resource("", "v1", "nodes")
        removed = []
        for name in self._pools.pop(pool, []):
            if ("", "nodes", None, name) in self.store.objects:
                self.store.delete(nodes, None, name)
                removed.append(name)
            self.node_devices.pop(name, None)
        return removed

    def terminate_instances(self, instance_type: str) -> list[str]:
        """EC2 terminated every instance of ``instance_type`` (a Capacity Block's end − 30 min): their Nodes go."""
        nodes = self.store.resource("", "v1", "nodes")
        gone = [
            node["metadata"]["name"] for node in self.objects("nodes")
            if node["metadata"].get("labels", {}).get("node.kubernetes.io/instance-type") == instance_type
        ]
        for name in gone:
            self.store.delete(nodes, None, name)
            self.node_devices.pop(name, None)
        for pool, names in list(self._pools.items()):
            self._pools[pool] = [n for n in names if n not in gone]
        return gone

    def _put_node(self, node: dict[str, Any]) -> None:
        self.store.put_object(self.store.resource("", "v1", "nodes"), node, manager="kubelet", trusted=True)

    # ------------------------------------------------------------------ what EKS does by itself

    def bootstrap_eks(self) -> None:
        """Create what a new EKS cluster runs before anyone applies anything (CoreDNS, kube-proxy, aws-node)."""
        with self.store.lock:
            for manifest in eks_default_addons():
                group, plural = group_plural(manifest)
                namespace = manifest["metadata"].get("namespace")
                if (group, plural, namespace, manifest["metadata"]["name"]) in self.store.objects:
                    continue
                self.store.create(self.store.resource_for(group, plural), namespace, manifest, "eks", trusted=True)

    # ------------------------------------------------------------------ faults and outcomes

    def inject(self, fault: Fault) -> Fault:
        """Make matching containers fail as asked from their next start (``kubelet/faults.py``)."""
        return self.faults.add(fault)

    def clear_faults(self) -> None:
        self.faults.clear()

    def set_outcome(self, outcome: Outcome | str, *, kind: str | None = None, name: str | None = None) -> None:
        """Older knob, kept for its callers: "fail" makes the workload's pods crash-loop (Jobs: exit 1),
        "never" makes their image pull fail forever, "ready" removes both. Statuses follow from the pods."""
        if (kind is None) != (name is None):
            raise ValueError("give both kind and name, or neither")
        for fault in outcome_faults(Outcome(outcome), name):
            self.faults.add(fault)
        if Outcome(outcome) is Outcome.READY:
            pattern = f"{name}-*" if name else "*"
            self.faults.active[:] = [f for f in self.faults.active if f.pod != pattern]

    # ------------------------------------------------------------------ inspection

    def compact(self) -> None:
        """Drop the event history, so a watch resuming from an old resourceVersion gets 410 Gone."""
        self.store.compact()

    def objects(self, plural: str, group: str = "") -> list[dict[str, Any]]:
        """Every stored object of a kind (test inspection; not an API call)."""
        with self.store.lock:
            return [obj for key, obj in self.store.objects.items() if key[:2] == (group, plural)]

    def wait_for(self, predicate: Any, timeout_s: float = 30.0, what: str = "condition") -> Any:
        """Poll ``predicate(self)`` until it returns something truthy (tests; never used by capserve)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.store.lock:
                found = predicate(self)
            if found:
                return found
            time.sleep(0.02)
        raise TimeoutError(f"fake Kubernetes: {what} not reached within {timeout_s:g} s")

    # ------------------------------------------------------------------ plumbing

    def _on_loop(self, action: Any) -> None:
        loop = self._api.loop
        if loop is None or not loop.is_running():
            action()
            return
        done = asyncio.run_coroutine_threadsafe(self._call(action), loop)
        done.result(timeout=30)

    @staticmethod
    async def _call(action: Any) -> None:
        action()

    def _later(self, delay_s: float, action: Any) -> None:
        loop = self._api.loop
        if loop is None:
            raise RuntimeError("the fake API server is not running")
        loop.call_soon_threadsafe(loop.call_later, delay_s, self._guarded, action)

    def _on_change(self, event: Event) -> None:
        loop = self._api.loop
        if loop is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop is shutting down
            loop.call_soon_threadsafe(self._api.wake)
            if event.plural != "events":
                loop.call_soon_threadsafe(self._request_pass)

    def _request_pass(self) -> None:
        if self._pass_handle is None and self._api.loop is not None and not self.deleted:
            self._pass_handle = self._api.loop.call_later(self.controller_delay_s, self._run_pass)

    def _run_pass(self) -> None:
        self._pass_handle = None
        if self.deleted:
            return
        wake_at = self._guarded(self.cluster.sync)
        if wake_at is not None and self._api.loop is not None:
            if self._timed_handle is not None:
                self._timed_handle.cancel()
            delay = max(wake_at - time.monotonic(), 0.0)
            self._timed_handle = self._api.loop.call_later(delay, self._request_pass)

    @staticmethod
    def _guarded(action: Any) -> Any:
        # A controller bug must not kill the server's event loop: reported (capserve_sandbox.failures), and the
        # next pass runs as usual.
        return FAILURES.guarded("fake Kubernetes controllers", action)()


@contextmanager
def fake_kube(**options: Any) -> Iterator[FakeKube]:
    """Start a fake API server on 127.0.0.1 (free port); stop it (and every pod's processes) on exit."""
    kube = FakeKube(**options).start()
    try:
        yield kube
    finally:
        kube.stop()
