"""A fake Kubernetes API server for the sandbox: loopback only, official-client compatible.

    with fake_kube() as kube:
        api = capserve.tasks.kube.api_client(kube.url, kube.ca_data, lambda: SecretStr(kube.token))
        kube.provision_nodes("gpu", 2, gpus_per_node=8, efa_per_node=16)

It serves plain HTTP on 127.0.0.1 (``ca_data`` is None), requires a bearer token on every request
(EKS-shaped tokens or ``kube.token``; anything else gets 401) and runs stand-in controllers so
that applied add-ons and Jobs report ready (or fail, when a test says so). See store.py for what
is modelled and what is not.
"""

from __future__ import annotations

import functools
import logging
import secrets
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from capserve.sandbox.kube.controllers import Controllers, NodeFailure, Outcome
from capserve.sandbox.kube.nodes import node_name, node_object
from capserve.sandbox.kube.server import ApiServer, RecordedRequest, ServerThread
from capserve.sandbox.kube.store import Event, Store

__all__ = ["FakeKube", "NodeFailure", "Outcome", "RecordedRequest", "fake_kube"]

log = logging.getLogger(__name__)


class FakeKube:
    """The running fake: where it listens, how to authenticate, and the knobs tests turn."""

    def __init__(
        self,
        *,
        k8s_version: str = "1.34",
        controller_delay_s: float = 0.05,
        bookmark_interval_s: float = 60.0,
        validate: bool = True,
    ) -> None:
        self.store = Store(k8s_version=k8s_version, validate=validate)
        self.controllers = Controllers(self.store)
        self.controller_delay_s = controller_delay_s
        self.token = "capserve-sandbox-" + secrets.token_urlsafe(24)
        self.ca_data: str | None = None  # plain HTTP on loopback: there is no CA
        self._api = ApiServer(self.store, self.token, k8s_version, bookmark_interval_s)
        self._thread = ServerThread(self._api)
        self._nodes_made = 0
        self._pools: dict[str, list[str]] = {}
        self.url = ""
        self.store.listeners.append(self._on_change)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> FakeKube:
        self.url = self._thread.start()
        return self

    def stop(self) -> None:
        self._thread.stop()

    def reset(self) -> None:
        """Back to an empty cluster (built-in kinds and namespaces only), controllers to "ready"."""
        with self.store.lock:
            self.store.reset()
            self.controllers.reset()
            self._pools.clear()
            self._api.requests.clear()

    @property
    def requests(self) -> list[RecordedRequest]:
        return list(self._api.requests)

    # ------------------------------------------------------------------ nodes

    def provision_nodes(
        self,
        pool: str,
        count: int,
        *,
        gpus_per_node: int,
        efa_per_node: int = 0,
        labels: Mapping[str, str] | None = None,
        taints: Sequence[Mapping[str, str]] | None = None,
        failure: NodeFailure | str | None = None,
        health_labels: bool = False,
        instance_type: str = "p6-b300.48xlarge",
        zone: str = "us-east-2a",
        ready_after_s: float = 0.0,
    ) -> list[str]:
        """Make ``count`` nodes of ``pool`` register, as a node group's instances would.

        ``failure`` applies to every node of this call: "never-ready" (Ready=False for good),
        "no-gpus" (the device plugin advertises 0 GPUs), "health-check-failed" (HyperPod marks
        the node UnschedulablePendingReplacement). With ``ready_after_s`` > 0 the nodes first
        register NotReady and turn Ready later, so watches see the transition.
        """
        failure = NodeFailure(failure) if failure is not None else None
        make = functools.partial(
            node_object,
            pool=pool,
            gpus=gpus_per_node,
            efa=efa_per_node,
            labels=dict(labels or {}),
            taints=[dict(t) for t in taints or ()],
            failure=failure,
            health_labels=health_labels,
            instance_type=instance_type,
            zone=zone,
        )
        made = []
        for _ in range(count):
            name = node_name(self._nodes_made)
            self._nodes_made += 1
            self._put_node(make(name, ready=ready_after_s <= 0))
            if ready_after_s > 0 and failure is not NodeFailure.NEVER_READY:
                self._later(ready_after_s, lambda n=name: self._put_node(make(n, ready=True)))
            made.append(name)
        self._pools.setdefault(pool, []).extend(made)
        return made

    def set_node_ready(self, name: str, ready: bool = True) -> None:
        """Flip a node's Ready condition, as its kubelet would on (re)connecting or failing."""
        with self.store.lock:
            node = self.store.get(self.store.resource("", "v1", "nodes"), None, name)
            for condition in node["status"]["conditions"]:
                if condition["type"] == "Ready":
                    condition.update(
                        {"status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"}
                        if ready
                        else {"status": "False", "reason": "KubeletNotReady", "message": "kubelet stopped posting"}
                    )
            self._put_node(node)

    def remove_nodes(self, pool: str) -> list[str]:
        """The pool's instances are gone (node group deleted, reservation over): their Nodes go too."""
        nodes = self.store.resource("", "v1", "nodes")
        removed = []
        for name in self._pools.pop(pool, []):
            if ("", "nodes", None, name) in self.store.objects:
                self.store.delete(nodes, None, name)
                removed.append(name)
        return removed

    def _put_node(self, node: dict[str, Any]) -> None:
        self.store.put_object(self.store.resource("", "v1", "nodes"), node, manager="kubelet")

    # ------------------------------------------------------------------ workloads

    def set_outcome(self, outcome: Outcome | str, *, kind: str | None = None, name: str | None = None) -> None:
        """How controllers finish workloads: for everything, or for one ``kind``/``name``."""
        if (kind is None) != (name is None):
            raise ValueError("give both kind and name, or neither")
        value = Outcome(outcome)
        if kind is None or name is None:
            self.controllers.default_outcome = value
        else:
            self.controllers.outcomes[(kind, name)] = value

    def compact(self) -> None:
        """Drop the event history, so a watch resuming from an old resourceVersion gets 410 Gone."""
        self.store.compact()

    def objects(self, plural: str, group: str = "") -> list[dict[str, Any]]:
        """Every stored object of a kind (test inspection; not an API call)."""
        with self.store.lock:
            return [obj for key, obj in self.store.objects.items() if key[:2] == (group, plural)]

    # ------------------------------------------------------------------ plumbing

    def _later(self, delay_s: float, action: Any) -> None:
        loop = self._api.loop
        if loop is None:
            raise RuntimeError("the fake API server is not running")
        loop.call_soon_threadsafe(loop.call_later, delay_s, self._guarded, action)

    def _on_change(self, event: Event) -> None:
        loop = self._api.loop
        if loop is None:
            return
        loop.call_soon_threadsafe(self._api.wake)
        if self.controllers.interested(event):
            loop.call_soon_threadsafe(
                loop.call_later, self.controller_delay_s, self._guarded, lambda: self.controllers.reconcile(event)
            )

    @staticmethod
    def _guarded(action: Any) -> None:
        try:
            action()
        except Exception:  # a controller bug must not kill the server's event loop; it shows in the log
            log.exception("fake Kubernetes controller failed")


@contextmanager
def fake_kube(**options: Any) -> Iterator[FakeKube]:
    """Start a fake API server on 127.0.0.1 (free port); stop it on exit."""
    kube = FakeKube(**options).start()
    try:
        yield kube
    finally:
        kube.stop()
