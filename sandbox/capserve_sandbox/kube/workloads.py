"""Stand-ins for kube-controller-manager's workload controllers: they make Pods, and read status back from them.

Each controller does what the real one does, in small (kubernetes/kubernetes ``pkg/controller/*``):

- **Deployment** → a ReplicaSet ``<deployment>-<pod-template-hash>`` per template; RollingUpdate
  (maxSurge / maxUnavailable) or Recreate between them; status and the ``Available`` /
  ``Progressing`` conditions from the ReplicaSets, ``ProgressDeadlineExceeded`` when nothing moved
  for ``progressDeadlineSeconds``.
- **ReplicaSet** → pods ``<replicaset>-<5 chars>``; counts from its pods.
- **DaemonSet** → one pod per node the template admits (nodeSelector, required node affinity,
  NoSchedule/NoExecute taints against the template's tolerations plus the ones the controller adds),
  pinned by node affinity on ``metadata.name``; failed pods replaced; a changed template rolls one
  node at a time.
- **StatefulSet** → ordinal pods ``<statefulset>-<i>`` (``spec.ordinals.start``), OrderedReady or
  Parallel, with ``hostname``/``subdomain`` set; failed pods recreated; RollingUpdate from the
  highest ordinal.
- **Job** → pods ``<job>-<5 chars>`` up to ``parallelism``; a failed pod is replaced after the
  back-off (10 s doubling, at most 6 min); more failures than ``backoffLimit`` (with
  ``restartPolicy: OnFailure``, container restarts count) fails the Job (``BackoffLimitExceeded``),
  so does ``activeDeadlineSeconds`` (``DeadlineExceeded``); ``ttlSecondsAfterFinished`` deletes it.
- **Pod GC**: pods bound to a node that no longer exists are deleted.

Durations are cluster time (``timing.py``). Statuses validate against the official schema (tests).
"""

from __future__ import annotations

import copy
import math
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from capserve_sandbox.kube.errors import ApiError
from capserve_sandbox.kube.events import Recorder
from capserve_sandbox.kube.nodes import is_node_ready
from capserve_sandbox.kube.pods import (
    condition,
    controller_reference,
    is_ready,
    is_terminal,
    merged_conditions,
    node_selector_matches,
    owner_uid,
    random_suffix,
    template_hash,
    untolerated_taint,
)
from capserve_sandbox.kube.store import Store, timestamp
from capserve_sandbox.kube.timing import Timing

MANAGER = "kube-controller-manager"
Obj = dict[str, Any]

# Tolerations the DaemonSet controller adds to every daemon pod (pkg/controller/daemon/util).
DAEMON_TOLERATIONS = (
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
)
HOST_NETWORK_TOLERATION = {
    "key": "node.kubernetes.io/network-unavailable",
    "operator": "Exists",
    "effect": "NoSchedule",
}
JOB_BACKOFF_S, JOB_BACKOFF_MAX_S = 10.0, 360.0


def _name(obj: Mapping[str, Any]) -> str:
    return str(obj["metadata"]["name"])


def _ns(obj: Mapping[str, Any]) -> str | None:
    namespace = obj["metadata"].get("namespace")
    return str(namespace) if namespace else None


def _uid(obj: Mapping[str, Any]) -> str:
    return str(obj["metadata"]["uid"])


def _percent_or_int(value: Any, total: int, round_up: bool) -> int:
    if isinstance(value, str) and value.endswith("%"):
        share = total * int(value[:-1]) / 100
        return math.ceil(share) if round_up else math.floor(share)
    return int(value or 0)


def pod_node(pod: Mapping[str, Any]) -> str | None:
    """The node a pod is bound to, or (a daemon pod not yet bound) the node its affinity pins it to."""
    spec = pod.get("spec") or {}
    if spec.get("nodeName"):
        return str(spec["nodeName"])
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    for term in required.get("nodeSelectorTerms") or []:
        for field in term.get("matchFields") or []:
            if field.get("key") == "metadata.name" and field.get("operator") == "In" and field.get("values"):
                return str(field["values"][0])
    return None


def container_restarts(pod: Mapping[str, Any]) -> int:
    status = pod.get("status") or {}
    return sum(
        int(c.get("restartCount") or 0)
        for c in [*(status.get("containerStatuses") or []), *(status.get("initContainerStatuses") or [])]
    )


class Workloads:
    def __init__(self, store: Store, recorder: Recorder, timing: Timing) -> None:
        self.store = store
        self.recorder = recorder
        self.timing = timing
        self._marks: dict[str, float] = {}  # monotonic instants: progress, job start/finish/failure
        self._seen_failures: dict[str, int] = {}
        self.wake_at: float | None = None  # the earliest monotonic instant a pass is due again

    def reset(self) -> None:
        self._marks.clear()
        self._seen_failures.clear()
        self.wake_at = None

    # ------------------------------------------------------------------ plumbing

    def _objects(self, group: str, plural: str) -> list[Obj]:
        return [obj for key, obj in list(self.store.objects.items()) if key[:2] == (group, plural)]

    def _by_owner(self, group: str, plural: str) -> dict[str, list[Obj]]:
        owned: dict[str, list[Obj]] = defaultdict(list)
        for obj in self._objects(group, plural):
            uid = owner_uid(obj)
            if uid:
                owned[uid].append(obj)
        return owned

    def _due(self, seconds_from_now: float) -> None:
        at = time.monotonic() + max(seconds_from_now, 0.0)
        self.wake_at = at if self.wake_at is None else min(self.wake_at, at)

    def _mark(self, key: str) -> float:
        return self._marks.setdefault(key, time.monotonic())

    def _write_status(self, obj: Obj, status: Obj) -> None:
        if obj.get("status") != status:
            resource = self.store.resource_for(*_group_plural(obj))
            self.store.write_status(resource, _ns(obj), _name(obj), status, MANAGER)

    def _set_spec(self, obj: Obj, **changes: Any) -> None:
        if all(obj["spec"].get(k) == v for k, v in changes.items()):
            return
        updated = copy.deepcopy(obj)
        updated["spec"].update(changes)
        self.store.put_object(self.store.resource_for(*_group_plural(obj)), updated, manager=MANAGER, trusted=True)

    def delete(self, obj: Mapping[str, Any], propagation: str = "Background") -> None:
        key = (*_group_plural(obj), _ns(obj), _name(obj))
        current = self.store.objects.get(key)
        if current is not None and current["metadata"]["uid"] == obj["metadata"]["uid"]:
            self.store.delete(self.store.resource_for(key[0], key[1]), key[2], key[3], propagation)

    def create_pod(
        self,
        owner: Obj,
        template: Mapping[str, Any],
        name: str,
        *,
        labels: Mapping[str, str],
        generate_name: str | None = None,
        spec_changes: Mapping[str, Any] | None = None,
    ) -> Obj:
        meta = template.get("metadata") or {}
        metadata: Obj = {
            "name": name,
            "namespace": _ns(owner),
            "labels": {**(meta.get("labels") or {}), **labels},
            "ownerReferences": [controller_reference(owner)],
        }
        if meta.get("annotations"):
            metadata["annotations"] = dict(meta["annotations"])
        if generate_name:
            metadata["generateName"] = generate_name
        pod: Obj = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": copy.deepcopy(template["spec"])}
        pod["spec"].update(copy.deepcopy(dict(spec_changes or {})))
        # A controller's pod goes through admission like any client's (the LWS pod webhook acts here).
        created = self.store.create(
            self.store.resource("", "v1", "pods"), _ns(owner), pod, MANAGER, trusted=True, admit=True
        )
        return created

    # ------------------------------------------------------------------ the pass

    def sync(self) -> None:
        self.wake_at = None
        with self.store.lock:
            for deployment in self._objects("apps", "deployments"):
                self._deployment(deployment)
            pods = self._by_owner("", "pods")
            for replicaset in self._objects("apps", "replicasets"):
                self._replicaset(replicaset, pods.get(_uid(replicaset), []))
            nodes = self._objects("", "nodes")
            for daemonset in self._objects("apps", "daemonsets"):
                self._daemonset(daemonset, pods.get(_uid(daemonset), []), nodes)
            for statefulset in self._objects("apps", "statefulsets"):
                self._statefulset(statefulset, pods.get(_uid(statefulset), []))
            for job in self._objects("batch", "jobs"):
                self._job(job, pods.get(_uid(job), []))
            self._pod_gc({_name(n) for n in nodes})

    def _pod_gc(self, node_names: set[str]) -> None:
        for pod in self._objects("", "pods"):
            node = (pod.get("spec") or {}).get("nodeName")
            if node and node not in node_names:
                self.delete(pod)

    # ------------------------------------------------------------------ Deployment / ReplicaSet

    def _deployment(self, deployment: Obj) -> None:
        spec = deployment["spec"]
        desired = int(spec.get("replicas", 1))
        template = spec["template"]
        pod_hash = template_hash(template)
        name = _name(deployment)
        owned = [rs for rs in self._objects("apps", "replicasets") if owner_uid(rs) == _uid(deployment)]
        new = next((rs for rs in owned if rs["metadata"]["labels"].get("pod-template-hash") == pod_hash), None)
        old = [rs for rs in owned if rs is not new]
        strategy = spec.get("strategy") or {}
        rolling = (strategy.get("type") or "RollingUpdate") == "RollingUpdate"
        rolling_config = strategy.get("rollingUpdate") or {}
        surge = _percent_or_int(rolling_config.get("maxSurge", "25%"), desired, round_up=True) if rolling else 0
        unavailable = _percent_or_int(rolling_config.get("maxUnavailable", "25%"), desired, round_up=False)
        if rolling and surge == 0 and unavailable == 0:
            unavailable = 1
        created_new = False
        if new is None:
            old_total = sum(int(rs["spec"].get("replicas", 0)) for rs in old)
            if rolling:
                start = min(desired, max(0, desired + surge - old_total))
            else:
                old_pods = sum(int((rs.get("status") or {}).get("replicas", 0)) for rs in old)
                start = desired if old_total == 0 and old_pods == 0 else 0
            new = self._new_replicaset(deployment, template, pod_hash, start, old)
            created_new = True
        if rolling:
            self._roll(deployment, new, old, desired, surge, unavailable)
        else:
            for rs in old:
                self._scale(deployment, rs, 0)
            if all(int((rs.get("status") or {}).get("replicas", 0)) == 0 for rs in old):
                self._scale(deployment, new, desired)
        self._deployment_status(deployment, new, old, desired, unavailable, created_new, name)

    def _new_replicaset(self, deployment: Obj, template: Obj, pod_hash: str, replicas: int, old: list[Obj]) -> Obj:
        revision = 1 + max(
            (int((rs["metadata"].get("annotations") or {}).get("deployment.kubernetes.io/revision", 0)) for rs in old),
            default=0,
        )
        labels = {**(template.get("metadata") or {}).get("labels", {}), "pod-template-hash": pod_hash}
        rs_template = copy.deepcopy(template)
        rs_template.setdefault("metadata", {})["labels"] = labels
        selector = copy.deepcopy(deployment["spec"]["selector"])
        selector.setdefault("matchLabels", {})["pod-template-hash"] = pod_hash
        name = f"{_name(deployment)}-{pod_hash}"
        body = {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": name,
                "namespace": _ns(deployment),
                "labels": labels,
                "annotations": {
                    "deployment.kubernetes.io/revision": str(revision),
                    "deployment.kubernetes.io/desired-replicas": str(deployment["spec"].get("replicas", 1)),
                },
                "ownerReferences": [controller_reference(deployment)],
            },
            "spec": {"replicas": replicas, "selector": selector, "template": rs_template},
        }
        created = self.store.create(
            self.store.resource("apps", "v1", "replicasets"), _ns(deployment), body, MANAGER, trusted=True
        )
        self.recorder.record(
            deployment,
            "ScalingReplicaSet",
            f"Scaled up replica set {name} from 0 to {replicas}",
            component="deployment-controller",
        )
        return created

    def _scale(self, deployment: Obj, rs: Obj, replicas: int) -> None:
        before = int(rs["spec"].get("replicas", 0))
        if before == replicas:
            return
        self._set_spec(rs, replicas=replicas)
        verb = "up" if replicas > before else "down"
        self.recorder.record(
            deployment,
            "ScalingReplicaSet",
            f"Scaled {verb} replica set {_name(rs)} from {before} to {replicas}",
            component="deployment-controller",
        )

    def _roll(self, deployment: Obj, new: Obj, old: list[Obj], desired: int, surge: int, unavailable: int) -> None:
        def spec_replicas(rs: Obj) -> int:
            return int(rs["spec"].get("replicas", 0))

        def available(rs: Obj) -> int:
            return int((rs.get("status") or {}).get("availableReplicas", 0))

        total = spec_replicas(new) + sum(spec_replicas(rs) for rs in old)
        if spec_replicas(new) < desired:
            room = max(0, desired + surge - total)
            self._scale(deployment, new, min(desired, spec_replicas(new) + room))
        elif spec_replicas(new) > desired:
            self._scale(deployment, new, desired)
        min_available = desired - unavailable
        all_pods = sum(int((rs.get("status") or {}).get("replicas", 0)) for rs in [new, *old])
        new_unavailable = spec_replicas(new) - available(new)
        budget = all_pods - min_available - new_unavailable
        for rs in old:  # first the old pods that are not available anyway
            unhealthy = spec_replicas(rs) - available(rs)
            cut = max(0, min(unhealthy, budget))
            if cut:
                self._scale(deployment, rs, spec_replicas(rs) - cut)
                budget -= cut
        can_remove = available(new) + sum(available(rs) for rs in old) - min_available
        for rs in old:
            cut = max(0, min(spec_replicas(rs), can_remove))
            if cut:
                self._scale(deployment, rs, spec_replicas(rs) - cut)
                can_remove -= cut

    def _deployment_status(
        self, deployment: Obj, new: Obj, old: list[Obj], desired: int, unavailable: int, created_new: bool, name: str
    ) -> None:
        sets = [new, *old]

        def total(field: str) -> int:
            return sum(int((rs.get("status") or {}).get(field, 0)) for rs in sets)

        spec_total = sum(int(rs["spec"].get("replicas", 0)) for rs in sets)
        available = total("availableReplicas")
        counters: Obj = {
            "observedGeneration": deployment["metadata"]["generation"],
            "replicas": total("replicas"),
            "updatedReplicas": int((new.get("status") or {}).get("replicas", 0)),
            "readyReplicas": total("readyReplicas"),
            "availableReplicas": available,
        }
        if spec_total - available > 0:
            counters["unavailableReplicas"] = spec_total - available
        old_status = deployment.get("status") or {}
        old_counters = {k: old_status.get(k) for k in counters}
        uid = _uid(deployment)
        if created_new or old_counters != counters or f"progress:{uid}" not in self._marks:
            self._marks[f"progress:{uid}"] = time.monotonic()
        complete = (
            counters["updatedReplicas"] == desired
            and available >= desired
            and counters["replicas"] == desired
            and counters["observedGeneration"] == deployment["metadata"]["generation"]
        )
        deadline = float(deployment["spec"].get("progressDeadlineSeconds", 600))
        stalled_for = time.monotonic() - self._marks[f"progress:{uid}"]
        previous = {c.get("type"): c for c in old_status.get("conditions") or []}
        already_failed = (previous.get("Progressing") or {}).get("reason") == "ProgressDeadlineExceeded"
        rs_name = _name(new)
        if complete:
            progressing = (
                "Progressing",
                "True",
                "NewReplicaSetAvailable",
                f'ReplicaSet "{rs_name}" has successfully progressed.',
            )
        elif already_failed or stalled_for >= self.timing.wall(deadline):
            progressing = (
                "Progressing",
                "False",
                "ProgressDeadlineExceeded",
                f'ReplicaSet "{rs_name}" has timed out progressing.',
            )
        else:
            self._due(self.timing.wall(deadline) - stalled_for + 0.01)
            reason = "NewReplicaSetCreated" if created_new else "ReplicaSetUpdated"
            message = (
                f'Created new replica set "{rs_name}"' if created_new else f'ReplicaSet "{rs_name}" is progressing.'
            )
            progressing = ("Progressing", "True", reason, message)
        if available >= desired - unavailable:
            available_condition = (
                "Available",
                "True",
                "MinimumReplicasAvailable",
                "Deployment has minimum availability.",
            )
        else:
            available_condition = (
                "Available",
                "False",
                "MinimumReplicasUnavailable",
                "Deployment does not have minimum availability.",
            )
        conditions = merged_conditions(old_status.get("conditions"), [available_condition, progressing])
        for entry in conditions:  # Deployment conditions also carry lastUpdateTime
            before = previous.get(entry["type"]) or {}
            same = before.get("status") == entry["status"] and before.get("reason") == entry.get("reason")
            entry["lastUpdateTime"] = (
                before.get("lastUpdateTime") if same and before.get("lastUpdateTime") else timestamp()
            )
        self._write_status(deployment, {**counters, "conditions": conditions})

    def _replicaset(self, rs: Obj, owned: list[Obj]) -> None:
        desired = int(rs["spec"].get("replicas", 1))
        active = [p for p in owned if not is_terminal(p)]
        if len(active) < desired:
            for _ in range(desired - len(active)):
                name = f"{_name(rs)}-{random_suffix()}"
                pod = self.create_pod(rs, rs["spec"]["template"], name, labels={}, generate_name=f"{_name(rs)}-")
                active.append(pod)
                self.recorder.record(rs, "SuccessfulCreate", f"Created pod: {name}", component="replicaset-controller")
        elif len(active) > desired:
            # The controller deletes the least useful pods first: unscheduled, then not ready, then newest.
            ranked = sorted(
                active,
                key=lambda p: (
                    bool((p.get("spec") or {}).get("nodeName")),
                    is_ready(p),
                    -float(p["metadata"].get("resourceVersion", 0)),
                ),
            )
            for pod in ranked[: len(active) - desired]:
                self.delete(pod)
                active.remove(pod)
                self.recorder.record(
                    rs, "SuccessfulDelete", f"Deleted pod: {_name(pod)}", component="replicaset-controller"
                )
        ready = sum(1 for p in active if is_ready(p))
        self._write_status(
            rs,
            {
                "replicas": len(active),
                "fullyLabeledReplicas": len(active),
                "readyReplicas": ready,
                "availableReplicas": ready,
                "observedGeneration": rs["metadata"]["generation"],
            },
        )

    # ------------------------------------------------------------------ DaemonSet

    def daemon_should_run(self, daemonset: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
        spec = daemonset["spec"]["template"]["spec"]
        tolerations = [*(spec.get("tolerations") or []), *DAEMON_TOLERATIONS]
        if spec.get("hostNetwork"):
            tolerations.append(HOST_NETWORK_TOLERATION)
        taints = (node.get("spec") or {}).get("taints") or []
        return (
            node_selector_matches(spec, node)
            and untolerated_taint(taints, tolerations, ("NoSchedule", "NoExecute")) is None
        )

    def _daemon_pod_spec(self, daemonset: Obj, node: str) -> Obj:
        spec: Obj = copy.deepcopy(daemonset["spec"]["template"]["spec"])
        affinity = spec.setdefault("affinity", {})
        affinity["nodeAffinity"] = {
            **(affinity.get("nodeAffinity") or {}),
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
            },
        }
        tolerations = spec.setdefault("tolerations", [])
        extra = [*DAEMON_TOLERATIONS, *([HOST_NETWORK_TOLERATION] if spec.get("hostNetwork") else [])]
        for toleration in extra:
            if toleration not in tolerations:
                tolerations.append(dict(toleration))
        return spec

    def _daemonset(self, daemonset: Obj, owned: list[Obj], nodes: list[Obj]) -> None:
        generation = str(daemonset["metadata"]["generation"])
        by_node: dict[str, list[Obj]] = defaultdict(list)
        for pod in owned:
            pinned = pod_node(pod)
            if pinned:
                by_node[pinned].append(pod)
        desired = current = misscheduled = ready = updated = 0
        name = _name(daemonset)
        rolling_out: list[Obj] = []
        for node in nodes:
            node_name = _name(node)
            pods = by_node.pop(node_name, [])
            for pod in [p for p in pods if (p.get("status") or {}).get("phase") == "Failed"]:
                self.delete(pod)  # the controller replaces failed daemon pods
                pods.remove(pod)
                self.recorder.record(
                    daemonset, "SuccessfulDelete", f"Deleted pod: {_name(pod)}", component="daemonset-controller"
                )
            if not self.daemon_should_run(daemonset, node):
                if pods:
                    misscheduled += 1
                    for pod in pods:
                        self.delete(pod)
                continue
            desired += 1
            if not pods:
                pod_name = f"{name}-{random_suffix()}"
                template = daemonset["spec"]["template"]
                labels = {"pod-template-generation": generation, "controller-revision-hash": template_hash(template)}
                spec = self._daemon_pod_spec(daemonset, node_name)
                self.create_pod(
                    daemonset,
                    {"metadata": template.get("metadata") or {}, "spec": spec},
                    pod_name,
                    labels=labels,
                    generate_name=f"{name}-",
                )
                self.recorder.record(
                    daemonset, "SuccessfulCreate", f"Created pod: {pod_name}", component="daemonset-controller"
                )
                continue
            current += 1
            pod = pods[0]
            if is_ready(pod) and is_node_ready(node):
                ready += 1
            if pod["metadata"]["labels"].get("pod-template-generation") == generation:
                updated += 1
            else:
                rolling_out.append(pod)
        for pods in by_node.values():  # nodes that are gone: pod GC removes bound ones; drop the rest
            for pod in pods:
                self.delete(pod)
        update = (daemonset["spec"].get("updateStrategy") or {}).get("type", "RollingUpdate")
        if rolling_out and update == "RollingUpdate" and desired - ready < 1:
            self.delete(rolling_out[0])  # maxUnavailable 1: one node at a time, when all others are ready
        status: Obj = {
            "observedGeneration": daemonset["metadata"]["generation"],
            "desiredNumberScheduled": desired,
            "currentNumberScheduled": current,
            "numberMisscheduled": misscheduled,
            "numberReady": ready,
            "numberAvailable": ready,
            "updatedNumberScheduled": updated,
        }
        if desired > ready:
            status["numberUnavailable"] = desired - ready
        self._write_status(daemonset, status)

    # ------------------------------------------------------------------ StatefulSet

    def _statefulset(self, statefulset: Obj, owned: list[Obj]) -> None:
        spec = statefulset["spec"]
        name = _name(statefulset)
        start = int((spec.get("ordinals") or {}).get("start", 0))
        replicas = int(spec.get("replicas", 1))
        wanted = [f"{name}-{i}" for i in range(start, start + replicas)]
        revision = f"{name}-{template_hash(spec['template'])}"
        parallel = spec.get("podManagementPolicy") == "Parallel"
        by_name = {_name(p): p for p in owned}
        for pod in list(by_name.values()):
            if (pod.get("status") or {}).get("phase") == "Failed" or _name(pod) not in wanted:
                self.delete(pod)  # failed pods are recreated under the same name; extra ordinals go
                del by_name[_name(pod)]
                self.recorder.record(
                    statefulset,
                    "SuccessfulDelete",
                    f"delete Pod {_name(pod)} in StatefulSet {name} successful",
                    component="statefulset-controller",
                )
        for ordinal, pod_name in enumerate(wanted, start=start):
            existing = by_name.get(pod_name)
            if existing is not None:
                running = (existing.get("status") or {}).get("phase") == "Running"
                if not parallel and not (running and is_ready(existing)):
                    break  # OrderedReady: the next ordinal waits for this one
                continue
            labels = {
                "statefulset.kubernetes.io/pod-name": pod_name,
                "apps.kubernetes.io/pod-index": str(ordinal),
                "controller-revision-hash": revision,
            }
            changes: Obj = {"hostname": pod_name}
            if spec.get("serviceName"):
                changes["subdomain"] = spec["serviceName"]
            try:
                by_name[pod_name] = self.create_pod(
                    statefulset, spec["template"], pod_name, labels=labels, spec_changes=changes
                )
            except ApiError as refused:  # admission said no (a webhook down): the controller retries later
                self.recorder.record(
                    statefulset,
                    "FailedCreate",
                    f"create Pod {pod_name} in StatefulSet {name} failed error: {refused.message}",
                    component="statefulset-controller",
                    warning=True,
                )
                break
            self.recorder.record(
                statefulset,
                "SuccessfulCreate",
                f"create Pod {pod_name} in StatefulSet {name} successful",
                component="statefulset-controller",
            )
            if not parallel:
                break
        pods = [by_name[n] for n in wanted if n in by_name]
        outdated = [p for p in pods if p["metadata"]["labels"].get("controller-revision-hash") != revision]
        strategy = (spec.get("updateStrategy") or {}).get("type", "RollingUpdate")
        if outdated and strategy == "RollingUpdate" and all(is_ready(p) for p in pods if p not in outdated):
            self.delete(outdated[-1])  # highest ordinal first, one at a time
        ready = sum(1 for p in pods if is_ready(p))
        updated = len(pods) - len(outdated)
        status: Obj = {
            "observedGeneration": statefulset["metadata"]["generation"],
            "replicas": len(pods),
            "readyReplicas": ready,
            "availableReplicas": ready,
            "currentReplicas": updated if not outdated else len(outdated),
            "updatedReplicas": updated,
            "currentRevision": revision
            if not outdated
            else outdated[0]["metadata"]["labels"].get("controller-revision-hash"),
            "updateRevision": revision,
            "collisionCount": 0,
        }
        self._write_status(statefulset, status)

    # ------------------------------------------------------------------ Job

    def _job(self, job: Obj, owned: list[Obj]) -> None:
        spec, uid, name = job["spec"], _uid(job), _name(job)
        old = job.get("status") or {}
        finished = next(
            (
                c
                for c in old.get("conditions") or []
                if c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
            ),
            None,
        )
        active = [p for p in owned if not is_terminal(p)]
        if finished is not None:
            for pod in active:
                self.delete(pod)  # a finished Job terminates what still runs
            self._job_ttl(job, uid)
            return
        started = self._mark(f"job-start:{uid}")
        succeeded = sum(1 for p in owned if (p.get("status") or {}).get("phase") == "Succeeded")
        failed = sum(1 for p in owned if (p.get("status") or {}).get("phase") == "Failed")
        if (spec["template"]["spec"].get("restartPolicy") or "Never") == "OnFailure":
            failed += sum(container_restarts(p) for p in active)
        if failed != self._seen_failures.get(uid, 0):
            self._seen_failures[uid] = failed
            self._marks[f"job-fail:{uid}"] = time.monotonic()
        completions = int(spec.get("completions") or 1)
        parallelism = int(spec.get("parallelism") or 1)
        backoff_limit = int(spec.get("backoffLimit", 6))
        deadline = spec.get("activeDeadlineSeconds")
        ready = sum(1 for p in active if is_ready(p))
        start_time = old.get("startTime") or timestamp()
        counters: Obj = {"startTime": start_time, "ready": ready, "terminating": 0, "uncountedTerminatedPods": {}}
        if failed > backoff_limit:
            self._finish(
                job,
                active,
                counters,
                succeeded,
                failed,
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit",
            )
            return
        if deadline is not None and time.monotonic() - started >= self.timing.wall(float(deadline)):
            self._finish(
                job,
                active,
                counters,
                succeeded,
                failed,
                "DeadlineExceeded",
                "Job was active longer than specified deadline",
            )
            return
        if deadline is not None:
            self._due(self.timing.wall(float(deadline)) - (time.monotonic() - started) + 0.01)
        if succeeded >= completions:
            status = {**counters, "completionTime": timestamp(), "succeeded": succeeded, "ready": 0}
            if failed:
                status["failed"] = failed
            status["conditions"] = merged_conditions(
                old.get("conditions"),
                [
                    ("SuccessCriteriaMet", "True", "CompletionsReached", "Reached expected number of succeeded pods"),
                    ("Complete", "True", "CompletionsReached", "Reached expected number of succeeded pods"),
                ],
            )
            self._write_status(job, status)
            self.recorder.record(job, "Completed", "Job completed", component="job-controller")
            self._marks[f"job-end:{uid}"] = time.monotonic()
            self._job_ttl(job, uid)
            return
        wanted = min(parallelism, completions - succeeded)
        if len(active) < wanted:
            wait = 0.0
            if failed:
                backoff = min(JOB_BACKOFF_S * 2 ** (failed - 1), JOB_BACKOFF_MAX_S)
                wait = self.timing.wall(backoff) - (time.monotonic() - self._marks.get(f"job-fail:{uid}", 0.0))
            if wait > 0:
                self._due(wait)
            else:
                labels = {
                    "batch.kubernetes.io/controller-uid": uid,
                    "batch.kubernetes.io/job-name": name,
                    "controller-uid": uid,
                    "job-name": name,
                }
                for _ in range(wanted - len(active)):
                    pod_name = f"{name}-{random_suffix()}"
                    active.append(
                        self.create_pod(job, spec["template"], pod_name, labels=labels, generate_name=f"{name}-")
                    )
                    self.recorder.record(
                        job, "SuccessfulCreate", f"Created pod: {pod_name}", component="job-controller"
                    )
        status = {**counters, "ready": ready}
        if active:
            status["active"] = len(active)
        if succeeded:
            status["succeeded"] = succeeded
        if failed:
            status["failed"] = failed
        if old.get("conditions"):
            status["conditions"] = old["conditions"]
        self._write_status(job, status)

    def _finish(
        self, job: Obj, active: list[Obj], counters: Obj, succeeded: int, failed: int, reason: str, message: str
    ) -> None:
        for pod in active:
            self.delete(pod)
        status = {**counters, "ready": 0, "failed": failed}
        if succeeded:
            status["succeeded"] = succeeded
        status["conditions"] = merged_conditions(
            (job.get("status") or {}).get("conditions"),
            [("FailureTarget", "True", reason, message), ("Failed", "True", reason, message)],
        )
        self._write_status(job, status)
        self.recorder.record(job, reason, message, warning=True, component="job-controller")
        self._marks[f"job-end:{_uid(job)}"] = time.monotonic()

    def _job_ttl(self, job: Obj, uid: str) -> None:
        ttl = job["spec"].get("ttlSecondsAfterFinished")
        if ttl is None:
            return
        ended = self._mark(f"job-end:{uid}")
        left = self.timing.wall(float(ttl)) - (time.monotonic() - ended)
        if left <= 0:
            self.delete(job, propagation="Background")
        else:
            self._due(left + 0.01)


def _group_plural(obj: Mapping[str, Any]) -> tuple[str, str]:
    api_version = str(obj.get("apiVersion", "v1"))
    group = api_version.split("/", 1)[0] if "/" in api_version else ""
    plural = {
        "Deployment": "deployments",
        "ReplicaSet": "replicasets",
        "DaemonSet": "daemonsets",
        "StatefulSet": "statefulsets",
        "Job": "jobs",
        "Pod": "pods",
        "Service": "services",
        "LeaderWorkerSet": "leaderworkersets",
        "Node": "nodes",
        "Event": "events",
        "ConfigMap": "configmaps",
        "Secret": "secrets",
        "ServiceAccount": "serviceaccounts",
    }[str(obj["kind"])]
    return group, plural


def group_plural(obj: Mapping[str, Any]) -> tuple[str, str]:
    return _group_plural(obj)


def ordered(objs: Iterable[Obj]) -> list[Obj]:
    return sorted(objs, key=lambda o: (_ns(o) or "", _name(o)))


def has_condition(obj: Mapping[str, Any], kind: str, status: str = "True") -> bool:
    found = condition(obj, kind)
    return bool(found and found.get("status") == status)
