"""A stand-in for the LeaderWorkerSet controller (kubernetes-sigs/lws).

It reconciles only while the simulated manager is up (``lws_manager.py``: a manager pod Running and
Ready, its cert Secret filled: the real controllers wait on ``certsReady``). Its webhooks are not
here: the pods it has the StatefulSet controller create pass the fake API server's admission, where
the registered ``mpod.kb.io`` webhook (when its Service has a ready endpoint) adds the group labels and
the ``LWS_*`` variables; without it the pods have neither.

What it does, after ``pkg/controllers/{leaderworkerset,pod}_controller.go`` (summarised in
docs/sandbox-kubelet.md, "LeaderWorkerSet"):

- a headless Service ``<lws>`` (``publishNotReadyAddresses``) so ``<lws>-<g>.<lws>.<ns>`` resolves
  before the leader is Ready;
- a leader StatefulSet ``<lws>`` (one leader pod ``<lws>-<g>`` per group, Parallel) from
  ``leaderTemplate`` (or ``workerTemplate``);
- per group with ``size`` > 1, a worker StatefulSet ``<lws>-<g>`` owned by the leader *pod*, pods
  ``<lws>-<g>-<i>`` (ordinals from 1), created once the leader pod exists (``startupPolicy:
  LeaderCreated``) or is Ready (``LeaderReady``);
- the pod templates' labels (``name``, ``template-revision-hash``; ``worker-index: "0"`` on leaders;
  ``group-index``, ``group-key`` on workers) and annotation ``size``, which the pod webhook reads;
- ``RecreateGroupOnPodRestart`` (the default): a container restart in any pod of a group deletes the
  leader pod, which takes the worker StatefulSet and its pods with it; the group is rebuilt;
- status: a group is ready when its leader is Ready and its worker StatefulSet has every replica ready.

Not modelled: ``rolloutStrategy`` surge/partition (a template change replaces groups one by one,
highest first), ``subGroupPolicy``, ``UniquePerReplica`` subdomains, ``exclusive-topology``.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping
from typing import Any

from capserve_sandbox.kube.events import Recorder
from capserve_sandbox.kube.lws_manager import LwsManager
from capserve_sandbox.kube.pods import controller_reference, is_ready, merged_conditions, owner_uid, template_hash
from capserve_sandbox.kube.store import Store
from capserve_sandbox.kube.workloads import Workloads, container_restarts

PREFIX = "leaderworkerset.sigs.k8s.io/"
NAME, GROUP_INDEX, GROUP_KEY, WORKER_INDEX = (PREFIX + k for k in ("name", "group-index", "group-key", "worker-index"))
REVISION, SIZE = PREFIX + "template-revision-hash", PREFIX + "size"
MANAGER = "lws-controller-manager"
Obj = dict[str, Any]


def group_key(namespace: str, lws: str, group: int) -> str:
    """The group's key: the webhook's ``genGroupUniqueKey`` of the leader pod ``<lws>-<group>``."""
    return hashlib.sha1(f"{namespace}/{lws}-{group}".encode(), usedforsecurity=False).hexdigest()  # a label


class LeaderWorkerSets:
    def __init__(self, store: Store, recorder: Recorder, workloads: Workloads, manager: LwsManager) -> None:
        self.store = store
        self.recorder = recorder
        self.workloads = workloads
        self.manager = manager

    # ------------------------------------------------------------------ the controller

    def sync(self) -> None:
        with self.store.lock:
            if not self.manager.ready():  # no manager, no reconcile (cmd/main.go: setupControllers waits)
                return
            for lws in [
                o
                for k, o in list(self.store.objects.items())
                if k[:2] == ("leaderworkerset.x-k8s.io", "leaderworkersets")
            ]:
                self._sync_one(lws)

    def _objects(self, group: str, plural: str, namespace: str | None) -> list[Obj]:
        return [o for k, o in list(self.store.objects.items()) if k[:2] == (group, plural) and k[2] == namespace]

    def _sync_one(self, lws: Obj) -> None:
        spec = lws["spec"]
        name, namespace = lws["metadata"]["name"], lws["metadata"]["namespace"]
        template = spec.get("leaderWorkerTemplate") or {}
        size = int(template.get("size", 1))
        replicas = int(spec.get("replicas", 1))
        revision = template_hash(template)
        self._headless_service(lws)
        leader_sts = self._leader_statefulset(lws, template, size, replicas, revision)
        leaders = {
            p["metadata"]["name"]: p
            for p in self._objects("", "pods", namespace)
            if owner_uid(p) == leader_sts["metadata"]["uid"]
        }
        workers_by_leader = {
            owner_uid(s): s
            for s in self._objects("apps", "statefulsets", namespace)
            if owner_uid(s) in {p["metadata"]["uid"] for p in leaders.values()}
        }
        pods_by_owner: dict[str, list[Obj]] = {}
        for pod in self._objects("", "pods", namespace):
            uid = owner_uid(pod)
            if uid:
                pods_by_owner.setdefault(uid, []).append(pod)
        ready_groups = updated_groups = 0
        startup = spec.get("startupPolicy", "LeaderCreated")
        restart_policy = template.get("restartPolicy", "RecreateGroupOnPodRestart")
        for group in range(replicas):
            leader = leaders.get(f"{name}-{group}")
            if leader is None:
                continue
            workers = workers_by_leader.get(leader["metadata"]["uid"])
            worker_pods = pods_by_owner.get(workers["metadata"]["uid"], []) if workers else []
            if restart_policy in ("RecreateGroupOnPodRestart", "RecreateGroupAfterStart"):
                group_pods = [leader, *worker_pods]
                restarted = [p for p in group_pods if container_restarts(p) > 0]
                # RecreateGroupAfterStart holds off while any pod of the group is still Pending (image pulls).
                waiting = restart_policy == "RecreateGroupAfterStart" and any(
                    (p.get("status") or {}).get("phase") == "Pending" for p in group_pods
                )
                if restarted and not waiting:
                    self.workloads.delete(leader)  # the worker StatefulSet is owned by the leader pod: it goes too
                    self.recorder.record(
                        lws,
                        "RecreateGroupOnPodRestart",
                        f"Pod {restarted[0]['metadata']['name']} restarted; deleted leader pod "
                        f"{leader['metadata']['name']} to recreate group {group}",
                        component=MANAGER,
                    )
                    continue
            if size > 1:
                leader_revision = leader["metadata"]["labels"].get(REVISION)
                if workers is not None and workers["metadata"]["labels"].get(REVISION) != leader_revision:
                    self.workloads.delete(workers)
                    workers = None
                if workers is None and (startup != "LeaderReady" or is_ready(leader)):
                    workers = self._worker_statefulset(lws, leader, template, size, group)
            group_ready = is_ready(leader) and (
                size == 1
                or (workers is not None and int((workers.get("status") or {}).get("readyReplicas", 0)) == size - 1)
            )
            ready_groups += int(group_ready)
            updated_groups += int(leader["metadata"]["labels"].get(REVISION) == revision)
        old = lws.get("status") or {}
        if ready_groups == replicas:
            wanted = [
                ("Available", "True", "AllGroupsReady", "All replicas are ready"),
                ("Progressing", "False", "Ready", "Replicas are ready"),
            ]
        else:
            wanted = [
                ("Available", "False", "GroupsNotReady", "Not all replicas are ready"),
                ("Progressing", "True", "GroupsProgressing", "Replicas are progressing"),
            ]
        if updated_groups < replicas:
            wanted.append(("UpdateInProgress", "True", "GroupsUpdating", "Rolling Upgrade is in progress"))
        status = {
            "replicas": len(leaders),
            "readyReplicas": ready_groups,
            "updatedReplicas": updated_groups,
            "hpaPodSelector": f"{NAME}={name},{WORKER_INDEX}=0",
            "conditions": merged_conditions(old.get("conditions"), wanted),
        }
        if old != status:
            self.store.write_status(
                self.store.resource_for("leaderworkerset.x-k8s.io", "leaderworkersets"),
                namespace,
                name,
                status,
                MANAGER,
            )

    def _headless_service(self, lws: Obj) -> None:
        name, namespace = lws["metadata"]["name"], lws["metadata"]["namespace"]
        if ("", "services", namespace, name) in self.store.objects:
            return
        body = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": namespace, "ownerReferences": [controller_reference(lws)]},
            "spec": {"clusterIP": "None", "publishNotReadyAddresses": True, "selector": {NAME: name}},
        }
        self.store.create(self.store.resource("", "v1", "services"), namespace, body, MANAGER, trusted=True)

    def _pod_template(
        self, lws: Obj, source: Mapping[str, Any], size: int, revision: str, labels: Mapping[str, str]
    ) -> Obj:
        template = copy.deepcopy(dict(source))
        metadata = template.setdefault("metadata", {})
        metadata["labels"] = {
            **(metadata.get("labels") or {}),
            NAME: lws["metadata"]["name"],
            REVISION: revision,
            **labels,
        }
        metadata["annotations"] = {**(metadata.get("annotations") or {}), SIZE: str(size)}
        return template

    def _leader_statefulset(self, lws: Obj, template: Obj, size: int, replicas: int, revision: str) -> Obj:
        name, namespace = lws["metadata"]["name"], lws["metadata"]["namespace"]
        source = template.get("leaderTemplate") or template.get("workerTemplate") or {}
        pod_template = self._pod_template(lws, source, size, revision, {WORKER_INDEX: "0"})
        body = {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {NAME: name},
                "annotations": {SIZE: str(size)},
                "ownerReferences": [controller_reference(lws)],
            },
            "spec": {
                "replicas": replicas,
                "serviceName": name,
                "podManagementPolicy": "Parallel",
                "selector": {"matchLabels": {NAME: name, WORKER_INDEX: "0"}},
                "template": pod_template,
                "updateStrategy": {"type": "RollingUpdate"},
            },
        }
        return self._converge(body)

    def _worker_statefulset(self, lws: Obj, leader: Obj, template: Obj, size: int, group: int) -> Obj:
        name, namespace = lws["metadata"]["name"], lws["metadata"]["namespace"]
        key = group_key(namespace, name, group)
        revision = leader["metadata"]["labels"].get(REVISION, "")
        labels = {GROUP_INDEX: str(group), GROUP_KEY: key}
        pod_template = self._pod_template(lws, template.get("workerTemplate") or {}, size, revision, labels)
        body = {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {
                "name": f"{name}-{group}",
                "namespace": namespace,
                "labels": {NAME: name, GROUP_INDEX: str(group), GROUP_KEY: key, REVISION: revision},
                "annotations": {SIZE: str(size)},
                "ownerReferences": [controller_reference(leader)],
            },
            "spec": {
                "replicas": size - 1,
                "ordinals": {"start": 1},
                "serviceName": name,
                "podManagementPolicy": "Parallel",
                "selector": {"matchLabels": {NAME: name, GROUP_KEY: key}},
                "template": pod_template,
                "updateStrategy": {"type": "RollingUpdate"},
            },
        }
        return self._converge(body)

    def _converge(self, body: Obj) -> Obj:
        statefulsets = self.store.resource("apps", "v1", "statefulsets")
        namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
        current = self.store.objects.get(("apps", "statefulsets", namespace, name))
        if current is None:
            return self.store.create(statefulsets, namespace, body, MANAGER, trusted=True)
        if current["spec"] == {**current["spec"], **body["spec"]}:
            return current
        updated = copy.deepcopy(current)
        updated["spec"].update(body["spec"])
        return self.store.put_object(statefulsets, updated, manager=MANAGER, trusted=True)
