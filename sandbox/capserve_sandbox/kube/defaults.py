"""The defaulting and admission the API server applies to every new Pod (the fields later code relies on).

Sources: Kubernetes API reference (Pod, Container, Probe defaults); admission plugins
DefaultTolerationSeconds (not-ready/unreachable NoExecute tolerations, 300 s) and Priority (the
two built-in classes' values); "Pod Quality of Service Classes"; "Resource Management" (a missing
request defaults to its limit). Applied to every write; each default only fills what is missing.
"""

from __future__ import annotations

from typing import Any

PRIORITY_CLASSES = {"system-node-critical": 2000001000, "system-cluster-critical": 2000000000}
PROBE_DEFAULTS = {"timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3}
DEFAULT_TOLERATIONS = (
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
)


def _default_container(container: dict[str, Any]) -> None:
    image = str(container.get("image") or "")
    tag = image.rsplit("/", 1)[-1]
    latest = "@" not in image and (":" not in tag or tag.endswith(":latest"))
    container.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    resources = container.setdefault("resources", {})
    limits = resources.get("limits") or {}
    if limits:
        requests = resources.setdefault("requests", {})
        for name, value in limits.items():
            requests.setdefault(name, value)
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        if isinstance(container.get(probe), dict):
            for key, value in PROBE_DEFAULTS.items():
                container[probe].setdefault(key, value)
    for port in container.get("ports") or []:
        port.setdefault("protocol", "TCP")


def qos_class(spec: dict[str, Any]) -> str:
    containers = [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
    resources = [c.get("resources") or {} for c in containers]
    if not any((r.get("requests") or r.get("limits")) for r in resources):
        return "BestEffort"
    guaranteed = all(
        (r.get("limits") or {}).get(name) is not None
        and (r.get("requests") or {}).get(name, (r.get("limits") or {}).get(name)) == (r.get("limits") or {}).get(name)
        for r in resources
        for name in ("cpu", "memory")
    )
    return "Guaranteed" if guaranteed else "Burstable"


def default_pod(pod: dict[str, Any]) -> None:
    spec = pod["spec"]
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    if spec.get("priorityClassName") in PRIORITY_CLASSES:
        spec.setdefault("priority", PRIORITY_CLASSES[spec["priorityClassName"]])
    else:
        spec.setdefault("priority", 0)
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        _default_container(container)
    tolerations = spec.setdefault("tolerations", [])
    for default in DEFAULT_TOLERATIONS:
        if not any(t.get("key") == default["key"] and t.get("effect") in (None, "", "NoExecute") for t in tolerations):
            tolerations.append(dict(default))
    status = pod.get("status")
    if isinstance(status, dict):
        status.setdefault("qosClass", qos_class(spec))
