"""One reconcile pass of the fake control plane and kubelet, run on the API server's event loop.

A pass runs every component once, in the order a change flows through a real cluster: the API
server's CRD controller, the simulated LWS manager (its cert rotator, ``lws_manager.py``) and its
LWS controller, kube-controller-manager's workload controllers, the scheduler (``scheduler.py``), the
kubelet (``kubelet/``), then the endpoints controller (a Service's ready and not-ready pod addresses,
which the API server's webhook calls go through: ``admission.py``). Every stored change asks for another
pass (coalesced, ``controller_delay_s`` later); components whose work is due later (a Job's
back-off, a Deployment's progress deadline) ask for a pass at that time. Writes that change nothing
emit no event, so the passes stop once the cluster is settled.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from capserve_sandbox.kube.admission import Admission
from capserve_sandbox.kube.events import Recorder
from capserve_sandbox.kube.kubelet import Kubelet
from capserve_sandbox.kube.lws import LeaderWorkerSets
from capserve_sandbox.kube.lws_manager import LwsManager
from capserve_sandbox.kube.pods import is_ready, is_terminal, merged_conditions
from capserve_sandbox.kube.scheduler import SCHEDULER, NodeUsage, place, usage
from capserve_sandbox.kube.store import Store
from capserve_sandbox.kube.timing import Timing
from capserve_sandbox.kube.workloads import Workloads

Obj = dict[str, Any]


class Cluster:
    def __init__(self, store: Store, recorder: Recorder, timing: Timing, kubelet: Kubelet) -> None:
        self.store = store
        self.recorder = recorder
        self.kubelet = kubelet
        self.workloads = Workloads(store, recorder, timing)
        self.admission = Admission(store)
        store.admission = self.admission
        self.lws_manager = LwsManager(store, self.admission)
        self.lws = LeaderWorkerSets(store, recorder, self.workloads, self.lws_manager)

    def reset(self) -> None:
        self.workloads.reset()

    def sync(self) -> float | None:
        """One pass; returns the monotonic instant the next timed pass is due (or None)."""
        self._crds()
        self.lws_manager.sync()
        self.lws.sync()
        self.workloads.sync()
        self._schedule()
        self.kubelet.sync()
        self._endpoints()
        return self.workloads.wake_at

    # ------------------------------------------------------------------ kube-controller-manager: endpoints

    def _endpoints(self) -> None:
        """One Endpoints per Service with a selector, named like it (core/v1 Endpoints): the matching pods'
        IPs, Ready ones in ``addresses`` and the rest in ``notReadyAddresses`` (all in ``addresses`` for
        ``publishNotReadyAddresses``), with the Service's target ports."""
        resource = self.store.resource("", "v1", "endpoints")
        with self.store.lock:
            objects = list(self.store.objects.items())
            pods = [o for k, o in objects if k[:2] == ("", "pods") and not is_terminal(o)]
            for key, service in objects:
                if key[:2] != ("", "services"):
                    continue
                selector = (service.get("spec") or {}).get("selector")
                if not selector:
                    continue
                namespace, name = key[2], key[3]
                ready: list[Obj] = []
                not_ready: list[Obj] = []
                publish = bool(service["spec"].get("publishNotReadyAddresses"))
                for pod in pods:
                    labels = pod["metadata"].get("labels") or {}
                    ip = (pod.get("status") or {}).get("podIP")
                    if pod["metadata"].get("namespace") != namespace or not ip:
                        continue
                    if any(labels.get(k) != v for k, v in selector.items()):
                        continue
                    address = {"ip": ip, "targetRef": {"kind": "Pod", "namespace": namespace,
                                                       "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}}
                    if node := (pod.get("spec") or {}).get("nodeName"):
                        address["nodeName"] = node
                    (ready if publish or is_ready(pod) else not_ready).append(address)
                ports = [
                    {k: v for k, v in {"name": p.get("name"), "port": p.get("targetPort", p.get("port")),
                                       "protocol": p.get("protocol", "TCP")}.items() if v is not None}
                    for p in service["spec"].get("ports") or []
                ]
                subset: dict[str, Any] = {}
                if ready:
                    subset["addresses"] = sorted(ready, key=lambda a: a["ip"])
                if not_ready:
                    subset["notReadyAddresses"] = sorted(not_ready, key=lambda a: a["ip"])
                if subset and ports:
                    subset["ports"] = ports
                body: dict[str, Any] = {
                    "apiVersion": "v1", "kind": "Endpoints",
                    "metadata": {"name": name, "namespace": namespace,
                                 "labels": dict(service["metadata"].get("labels") or {})},
                    "subsets": [subset] if subset else [],
                }
                current = self.store.objects.get(("", "endpoints", namespace, name))
                if current is not None and current.get("subsets", []) == body["subsets"]:
                    continue
                self.store.put_object(resource, body, "endpoint-controller", trusted=True)

    # ------------------------------------------------------------------ apiextensions

    def _crds(self) -> None:
        """The API server's own CRD controllers accept the names and establish a CRD in milliseconds."""
        resource = self.store.resource("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        with self.store.lock:
            for key, crd in list(self.store.objects.items()):
                if key[:2] != ("apiextensions.k8s.io", "customresourcedefinitions"):
                    continue
                spec = crd["spec"]
                old = crd.get("status") or {}
                status = {
                    "acceptedNames": spec["names"],
                    "storedVersions": [v["name"] for v in spec.get("versions") or [] if v.get("storage")],
                    "conditions": merged_conditions(
                        old.get("conditions"),
                        [
                            ("NamesAccepted", "True", "NoConflicts", "no conflicts found"),
                            ("Established", "True", "InitialNamesAccepted", "the initial names have been accepted"),
                        ],
                    ),
                }
                if status != old:
                    self.store.write_status(resource, None, key[3], status, "kube-apiserver")

    # ------------------------------------------------------------------ kube-scheduler

    def _schedule(self) -> None:
        with self.store.lock:
            objects = list(self.store.objects.items())
            nodes: list[Mapping[str, Any]] = [o for k, o in objects if k[:2] == ("", "nodes")]
            pods = [o for k, o in objects if k[:2] == ("", "pods")]
            claims = {(k[2], k[3]) for k, _ in objects if k[:2] == ("", "persistentvolumeclaims")}
            bound: dict[str, list[Obj]] = defaultdict(list)
            for pod in pods:
                node = (pod.get("spec") or {}).get("nodeName")
                if node and not is_terminal(pod):
                    bound[node].append(pod)
            used: dict[str, NodeUsage] = {name: usage(members) for name, members in bound.items()}
            pending = [
                p
                for p in pods
                if not (p.get("spec") or {}).get("nodeName")
                and not is_terminal(p)
                and (p.get("spec") or {}).get("schedulerName", SCHEDULER) == SCHEDULER
            ]
            pending.sort(
                key=lambda p: (
                    -int(p["spec"].get("priority") or 0),
                    p["metadata"]["creationTimestamp"],
                    p["metadata"]["name"],
                )
            )
            for pod in pending:
                namespace = pod["metadata"]["namespace"]
                missing = [
                    v["persistentVolumeClaim"]["claimName"]
                    for v in pod["spec"].get("volumes") or []
                    if "persistentVolumeClaim" in v
                    and (namespace, v["persistentVolumeClaim"]["claimName"]) not in claims
                ]
                placement = place(pod, nodes, used, missing)
                if placement.node is not None:
                    self._bind(pod, placement.node)
                    bound[placement.node].append(pod)
                    used[placement.node] = usage(bound[placement.node])
                else:
                    self._unschedulable(pod, placement.message)

    def _bind(self, pod: Obj, node: str) -> None:
        bound = copy.deepcopy(pod)
        bound["spec"]["nodeName"] = node
        status = bound.setdefault("status", {})
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
        status["conditions"] = [
            *conditions,
            *merged_conditions(pod.get("status", {}).get("conditions"), [("PodScheduled", "True", None, None)]),
        ]
        self.store.put_object(self.store.resource("", "v1", "pods"), bound, manager="kube-scheduler", trusted=True)
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        self.recorder.record(
            pod, "Scheduled", f"Successfully assigned {namespace}/{name} to {node}", component=SCHEDULER
        )

    def _unschedulable(self, pod: Obj, message: str) -> None:
        status = pod.get("status") or {}
        current = next((c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), None)
        if current is not None and current.get("message") == message:
            return
        others = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
        conditions = [
            *others,
            *merged_conditions(status.get("conditions"), [("PodScheduled", "False", "Unschedulable", message)]),
        ]
        self.store.write_status(
            self.store.resource("", "v1", "pods"),
            pod["metadata"]["namespace"],
            pod["metadata"]["name"],
            {**status, "conditions": conditions},
            SCHEDULER,
        )
        self.recorder.record(pod, "FailedScheduling", message, warning=True, component=SCHEDULER)
