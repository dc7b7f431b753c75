"""Which resources the fake API server serves: the built-ins capserve uses, plus every CRD created at run time."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import jsonschema


@dataclass
class Resource:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    has_status: bool
    short_names: tuple[str, ...] = ()
    # A CRD's openAPIV3Schema; None for built-ins (those are checked with kubernetes-validate).
    schema: dict[str, Any] | None = None
    _validator: Any = field(default=None, repr=False)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def singular(self) -> str:
        return self.kind.lower()

    def validator(self) -> Any:
        if self.schema is None:
            return None
        if self._validator is None:
            # CRD schemas are OpenAPI v3 structural schemas; Draft 4 is the JSON Schema they derive
            # from, and it ignores the x-kubernetes-* extensions (apiextensions docs, "Validation").
            self._validator = jsonschema.Draft4Validator(self.schema)
        return self._validator


# (group, version, plural, kind, namespaced, has status subresource)
BUILTINS: tuple[tuple[str, str, str, str, bool, bool], ...] = (
    ("", "v1", "namespaces", "Namespace", False, True),
    ("", "v1", "nodes", "Node", False, True),
    ("", "v1", "pods", "Pod", True, True),
    ("", "v1", "services", "Service", True, True),
    ("", "v1", "endpoints", "Endpoints", True, False),
    ("", "v1", "configmaps", "ConfigMap", True, False),
    ("", "v1", "secrets", "Secret", True, False),
    ("", "v1", "serviceaccounts", "ServiceAccount", True, False),
    ("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", True, True),
    ("", "v1", "persistentvolumes", "PersistentVolume", False, True),
    ("", "v1", "events", "Event", True, False),
    ("apps", "v1", "deployments", "Deployment", True, True),
    ("apps", "v1", "daemonsets", "DaemonSet", True, True),
    ("apps", "v1", "statefulsets", "StatefulSet", True, True),
    ("apps", "v1", "replicasets", "ReplicaSet", True, True),
    ("batch", "v1", "jobs", "Job", True, True),
    ("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False, True),
    ("storage.k8s.io", "v1", "csidrivers", "CSIDriver", False, False),
    ("storage.k8s.io", "v1", "storageclasses", "StorageClass", False, False),
    ("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False, False),
    ("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False, False),
    ("rbac.authorization.k8s.io", "v1", "roles", "Role", True, False),
    ("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True, False),
    ("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, True),
    ("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations", "MutatingWebhookConfiguration",
     False, False),
    ("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations", "ValidatingWebhookConfiguration",
     False, False),
)


def builtin_resources() -> dict[tuple[str, str, str], Resource]:
    return {
        (group, version, plural): Resource(group, version, plural, kind, namespaced, has_status)
        for group, version, plural, kind, namespaced, has_status in BUILTINS
    }


def crd_resources(crd: dict[str, Any]) -> list[Resource]:
    """The resources a CustomResourceDefinition serves: one per served version."""
    spec = crd["spec"]
    names = spec["names"]
    return [
        Resource(
            group=spec["group"],
            version=version["name"],
            plural=names["plural"],
            kind=names["kind"],
            namespaced=spec.get("scope") == "Namespaced",
            has_status="status" in (version.get("subresources") or {}),
            short_names=tuple(names.get("shortNames") or ()),
            schema=(version.get("schema") or {}).get("openAPIV3Schema"),
        )
        for version in spec.get("versions") or []
        if version.get("served", True)
    ]
