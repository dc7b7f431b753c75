"""One fake Kubernetes per sandbox EKS cluster, as on AWS, where every cluster has its own API server.

An EKS cluster's Kubernetes API is its own: ``DescribeCluster`` names its endpoint and CA, and only that
cluster's objects and nodes are behind it; a managed node group's instances join the cluster the group belongs
to (EKS user guide, "Amazon EKS cluster endpoint access control" and "Managed node groups"); deleting the
cluster deletes its control plane, endpoint included (EKS API reference, ``DeleteCluster``). So two campaigns,
each with its own cluster, never see each other's LeaderWorkerSets, LWS manager or GPU nodes.

``ClusterKubes`` maps a cluster's name to its ``FakeKube``: the first cluster gets the sandbox's own server (the
one tests hold as ``SandboxEndpoints.kube_server``), each further cluster a sibling served on the same thread and
event loop on a port of its own (``FakeKube.sibling``); a deleted cluster's Kubernetes stops answering and
reconciling, and the first one is made new for the next cluster once its own is deleted.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from capserve_sandbox.kube import FakeKube


class ClusterKubes:
    def __init__(self, first: FakeKube, prepare: Callable[[str, FakeKube], None]) -> None:
        self.first = first
        self._prepare = prepare  # called with a cluster's name and its new Kubernetes (its network, ...)
        self._by_name: dict[str, FakeKube] = {}
        self._lock = threading.Lock()

    def of(self, cluster: str) -> FakeKube:
        """The cluster's Kubernetes, made on first use."""
        with self._lock:
            kube = self._by_name.get(cluster)
            if kube is None:
                first_free = all(other is not self.first for other in self._by_name.values())
                kube = self.first.renew() if first_free else self.first.sibling()
                self._prepare(cluster, kube)
                self._by_name[cluster] = kube
            return kube

    def get(self, cluster: str) -> FakeKube | None:
        """The cluster's Kubernetes if it has one (None: never described, or deleted)."""
        with self._lock:
            return self._by_name.get(cluster)

    def live(self) -> dict[str, FakeKube]:
        with self._lock:
            return dict(self._by_name)

    def delete(self, cluster: str) -> None:
        """The cluster is deleted: its Kubernetes goes with it (a sibling stops; the first one waits to be renewed)."""
        with self._lock:
            kube = self._by_name.pop(cluster, None)
        if kube is None:
            return
        if kube is self.first:
            kube.delete()
        else:
            kube.stop()
