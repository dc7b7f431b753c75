"""Stand-ins for kube-controller-manager, the kubelets and the add-on controllers.

There are no pods: a workload's status is written straight from its spec and the outcome the test
chose. ``ready`` writes the status the real controller writes once every pod is up; ``never``
leaves it progressing forever; ``fail`` writes the terminal failure where the kind has one
(Deployment: ProgressDeadlineExceeded; Job: BackoffLimitExceeded; DaemonSets have no failure
state, so ``fail`` behaves like ``never``). Status shapes follow the apps/v1, batch/v1 and
apiextensions/v1 API reference and validate against the official schema.

Nodes are registered as a kubelet would, with GPU and EFA devices as the device plugins would
advertise them, and HyperPod's health labels when asked.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from capserve.sandbox.kube.store import Event, Store, timestamp

CONTROLLER_MANAGER = "kube-controller-manager"


class Outcome(StrEnum):
    READY = "ready"
    NEVER = "never"
    FAIL = "fail"


class NodeFailure(StrEnum):
    NEVER_READY = "never-ready"
    NO_GPUS = "no-gpus"
    HEALTH_CHECK_FAILED = "health-check-failed"


WATCHED = {
    ("apps", "deployments"),
    ("apps", "daemonsets"),
    ("apps", "statefulsets"),
    ("batch", "jobs"),
    ("apiextensions.k8s.io", "customresourcedefinitions"),
    ("leaderworkerset.x-k8s.io", "leaderworkersets"),
}


class Controllers:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.default_outcome = Outcome.READY
        self.outcomes: dict[tuple[str, str], Outcome] = {}  # (kind, name) -> outcome

    def reset(self) -> None:
        self.default_outcome = Outcome.READY
        self.outcomes.clear()

    def outcome(self, kind: str, name: str) -> Outcome:
        return self.outcomes.get((kind, name), self.default_outcome)

    def interested(self, event: Event) -> bool:
        return event.type != "DELETED" and (event.group, event.plural) in WATCHED or event.plural == "nodes"

    def reconcile(self, event: Event) -> None:
        if event.plural == "nodes":  # a node came or went: DaemonSets count nodes
            for key in [k for k in self.store.objects if k[:2] == ("apps", "daemonsets")]:
                self._reconcile_one("apps", "daemonsets", key[2], key[3])
            return
        metadata = event.obj["metadata"]
        self._reconcile_one(event.group, event.plural, metadata.get("namespace"), metadata["name"])

    def _reconcile_one(self, group: str, plural: str, namespace: str | None, name: str) -> None:
        with self.store.lock:
            current = self.store.objects.get((group, plural, namespace, name))
            if current is None:
                return
            obj = copy.deepcopy(current)
            outcome = self.outcome(obj["kind"], name)
            writer = {
                "deployments": self._deployment,
                "daemonsets": self._daemonset,
                "statefulsets": self._statefulset,
                "jobs": self._job,
                "customresourcedefinitions": self._crd,
                "leaderworkersets": self._lws,
            }[plural]
            status = writer(obj, outcome)
            if status is None or status == obj.get("status"):
                return
            resource = self.store.resource_for(group, plural)
            manager = "lws-controller" if plural == "leaderworkersets" else CONTROLLER_MANAGER
            self.store.write_status(resource, namespace, name, status, manager)

    # ------------------------------------------------------------------ status writers

    def _deployment(self, obj: dict[str, Any], outcome: Outcome) -> dict[str, Any]:
        wanted = obj["spec"].get("replicas", 1)
        base: dict[str, Any] = {
            "observedGeneration": obj["metadata"]["generation"],
            "replicas": wanted,
            "updatedReplicas": wanted,
        }
        old = obj.get("status") or {}
        if outcome is Outcome.READY:
            return {
                **base,
                "readyReplicas": wanted,
                "availableReplicas": wanted,
                "conditions": _deployment_conditions(
                    old,
                    [
                        ("Available", "True", "MinimumReplicasAvailable", "Deployment has minimum availability."),
                        (
                            "Progressing",
                            "True",
                            "NewReplicaSetAvailable",
                            f'ReplicaSet "{obj["metadata"]["name"]}" has successfully progressed.',
                        ),
                    ],
                ),
            }
        unavailable = {**base, "unavailableReplicas": wanted}
        if outcome is Outcome.FAIL:
            return {
                **unavailable,
                "conditions": _deployment_conditions(
                    old,
                    [
                        (
                            "Available",
                            "False",
                            "MinimumReplicasUnavailable",
                            "Deployment does not have minimum availability.",
                        ),
                        (
                            "Progressing",
                            "False",
                            "ProgressDeadlineExceeded",
                            f'ReplicaSet "{obj["metadata"]["name"]}" has timed out progressing.',
                        ),
                    ],
                ),
            }
        return {
            **unavailable,
            "conditions": _deployment_conditions(
                old,
                [
                    (
                        "Progressing",
                        "True",
                        "ReplicaSetUpdated",
                        f'ReplicaSet "{obj["metadata"]["name"]}" is progressing.',
                    ),
                ],
            ),
        }

    def _daemonset(self, obj: dict[str, Any], outcome: Outcome) -> dict[str, Any]:
        pod_spec = obj["spec"].get("template", {}).get("spec", {})
        nodes = [
            node
            for key, node in self.store.objects.items()
            if key[:2] == ("", "nodes") and _schedulable(node, pod_spec)
        ]
        desired = len(nodes)
        ready = sum(1 for node in nodes if _node_ready(node)) if outcome is Outcome.READY else 0
        return {
            "observedGeneration": obj["metadata"]["generation"],
            "desiredNumberScheduled": desired,
            "currentNumberScheduled": desired,
            "updatedNumberScheduled": desired,
            "numberMisscheduled": 0,
            "numberReady": ready,
            "numberAvailable": ready,
            **({"numberUnavailable": desired - ready} if desired > ready else {}),
        }

    def _statefulset(self, obj: dict[str, Any], outcome: Outcome) -> dict[str, Any]:
        wanted = obj["spec"].get("replicas", 1)
        ready = wanted if outcome is Outcome.READY else 0
        return {
            "observedGeneration": obj["metadata"]["generation"],
            "replicas": wanted,
            "currentReplicas": wanted,
            "updatedReplicas": wanted,
            "readyReplicas": ready,
            "availableReplicas": ready,
        }

    def _job(self, obj: dict[str, Any], outcome: Outcome) -> dict[str, Any] | None:
        old = obj.get("status") or {}
        if any(
            c.get("type") in ("Complete", "Failed") and c.get("status") == "True" for c in old.get("conditions") or []
        ):
            return None  # finished Jobs stay finished
        start = old.get("startTime") or timestamp()
        if outcome is Outcome.READY:
            completions = obj["spec"].get("completions", 1)
            return {
                "startTime": start,
                "completionTime": timestamp(),
                "active": 0,
                "ready": 0,
                "succeeded": completions,
                "conditions": _conditions(
                    old,
                    [
                        (
                            "SuccessCriteriaMet",
                            "True",
                            "CompletionsReached",
                            "Reached expected number of succeeded pods",
                        ),
                        ("Complete", "True", "CompletionsReached", "Reached expected number of succeeded pods"),
                    ],
                ),
            }
        if outcome is Outcome.FAIL:
            return {
                "startTime": start,
                "active": 0,
                "ready": 0,
                "failed": obj["spec"].get("backoffLimit", 6) + 1,
                "conditions": _conditions(
                    old,
                    [
                        (
                            "FailureTarget",
                            "True",
                            "BackoffLimitExceeded",
                            "Job has reached the specified backoff limit",
                        ),
                        ("Failed", "True", "BackoffLimitExceeded", "Job has reached the specified backoff limit"),
                    ],
                ),
            }
        return {"startTime": start, "active": obj["spec"].get("parallelism", 1), "ready": 0}

    def _crd(self, obj: dict[str, Any], outcome: Outcome) -> dict[str, Any]:
        # The API server's own CRD controllers accept the names and establish the CRD in milliseconds.
        spec = obj["spec"]
        old = obj.get("status") or {}
        return {
            "acceptedNames": spec["names"],
            "storedVersions": [v["name"] for v in spec.get("versions") or [] if v.get("storage")],
            "conditions": _conditions(
                old,
                [
                    ("NamesAccepted", "True", "NoConflicts", "no conflicts found"),
                    ("Established", "True", "InitialNamesAccepted", "the initial names have been accepted"),
                ],
            ),
        }

    def _lws(self, obj: dict[str, Any], outcome: Outcome) -> dict[str, Any]:
        wanted = obj["spec"].get("replicas", 1)
        old = obj.get("status") or {}
        ready = wanted if outcome is Outcome.READY else 0
        condition = (
            ("Available", "True", "AllGroupsReady", "All replicas are ready")
            if ready == wanted
            else (("Available", "False", "GroupsNotReady", "Not all replicas are ready"))
        )
        extra = [("Failed", "True", "GroupsFailed", "Groups failed to start")] if outcome is Outcome.FAIL else []
        return {
            "replicas": wanted,
            "readyReplicas": ready,
            "updatedReplicas": wanted,
            "conditions": _conditions(old, [condition, *extra]),
        }


def _conditions(
    old_status: Mapping[str, Any], wanted: list[tuple[str, str, str, str]], *, update_time: bool = False
) -> list[dict[str, Any]]:
    """Conditions whose lastTransitionTime stays put while their status does not change (API conventions).

    Keeping the times stable also makes a repeated reconcile a no-op write, so it emits no event.
    """
    previous = {c.get("type"): c for c in old_status.get("conditions") or []}
    out = []
    for kind, status, reason, message in wanted:
        before = previous.get(kind) or {}
        same = before.get("status") == status
        when = before.get("lastTransitionTime") if same and before.get("lastTransitionTime") else timestamp()
        condition = {"type": kind, "status": status, "reason": reason, "message": message, "lastTransitionTime": when}
        if update_time:  # Deployment conditions also carry lastUpdateTime
            unchanged = same and before.get("reason") == reason and before.get("lastUpdateTime")
            condition["lastUpdateTime"] = before["lastUpdateTime"] if unchanged else when
        out.append(condition)
    return out


def _deployment_conditions(
    old_status: Mapping[str, Any], wanted: list[tuple[str, str, str, str]]
) -> list[dict[str, Any]]:
    return _conditions(old_status, wanted, update_time=True)


def _node_ready(node: Mapping[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in node.get("status", {}).get("conditions") or []
    )


def _schedulable(node: Mapping[str, Any], pod_spec: Mapping[str, Any]) -> bool:
    """Would a DaemonSet pod land here? nodeSelector and NoSchedule/NoExecute taints (not affinity)."""
    labels = node.get("metadata", {}).get("labels") or {}
    if any(labels.get(k) != v for k, v in (pod_spec.get("nodeSelector") or {}).items()):
        return False
    tolerations = pod_spec.get("tolerations") or []
    for taint in node.get("spec", {}).get("taints") or []:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any(_tolerates(toleration, taint) for toleration in tolerations):
            return False
    return True


def _tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    if toleration.get("operator") == "Exists":
        return not toleration.get("key") or toleration["key"] == taint.get("key")
    return bool(toleration.get("key") == taint.get("key") and toleration.get("value") == taint.get("value"))
