"""The fake API server's state: objects, resourceVersions, the event log watches read, field ownership.

Synchronous and guarded by one lock, so the HTTP handlers (event-loop thread), the controllers
and test code (any thread) can all change it. Every change appends an event and calls the
listeners (the HTTP layer wakes its watches).

What it models, after the API conventions and the SSA docs: one global resourceVersion counter;
``generation`` bumped on spec changes; the status subresource separated from the main resource
both ways; create/replace/patch (merge, strategic, JSON patch, apply) with per-manager field
ownership and conflicts; delete with propagation; namespaces that must exist; CRDs served as soon
as they are created; validation of built-ins with kubernetes-validate (strict) and of custom
objects against their CRD's schema; Pod defaulting and the admission defaults (``defaults.py``);
dynamic admission (``admission.py``: mutating webhooks, schema validation, validating webhooks) for
client writes and for the pods controllers create; ``dryRun=All`` (the whole chain runs, nothing is
stored, no event, no resourceVersion spent). What it does not: RBAC, finalizers, graceful deletion
(objects go at once).
"""

from __future__ import annotations

import base64
import copy
import functools
import json
import logging
import re
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import jsonpatch
import jsonschema
import yaml

from capserve_sandbox.clock import CLOCK
from capserve_sandbox.kube.admission import Request
from capserve_sandbox.kube.defaults import default_pod
from capserve_sandbox.kube.errors import ApiError, not_found
from capserve_sandbox.kube.patching import (
    Path,
    delete_path,
    fields_v1,
    get_path,
    leaf_paths,
    merge_patch,
    strategic_merge,
)
from capserve_sandbox.kube.resources import Resource, builtin_resources, crd_resources
from capserve_sandbox.kube.selectors import matches, parse_label_selector

try:  # a dev dependency: the demo runs without it (and skips built-in validation)
    import kubernetes_validate
except ImportError:  # pragma: no cover - exercised only outside the dev environment
    kubernetes_validate = None

log = logging.getLogger(__name__)


@functools.cache
def _builtin_validator(kind: str, api_version: str, k8s_version: str) -> Any:
    """The validator ``kubernetes_validate.validate(obj, k8s_version, strict=True)`` checks a built-in with, built once
    per kind: that call reads and decodes the kind's schema and every definition (megabytes of JSON) each time, the
    most CPU the fake API server spent. The same steps as its own (kubernetes-validate 1.x), and its errors."""
    kv = kubernetes_validate.utils
    desired = k8s_version.removeprefix("v")
    if kv.major_minor(desired) > kv.latest_version():
        raise kv.VersionNotSupportedError(version=kv.major_minor(desired))
    version = [known for known in kv.all_versions() if kv.major_minor(known) <= kv.major_minor(desired)][-1]
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    folder = f"kubernetes-json-schema/v{version}-local-strict"
    try:
        schema = kv.schema_contents(f"{folder}/{kind.lower()}-{group_version}.json", desired)
    except FileNotFoundError:
        raise kv.SchemaNotFoundError(version=kv.major_minor(desired), kind=kind, api_version=api_version) from None
    definitions = kv.schema_contents(f"{folder}/_definitions.json", desired)
    registry = kv.Resource.from_contents(definitions) @ (kv.Resource.from_contents(schema) @ kv.Registry())
    return jsonschema.Draft202012Validator(schema, registry=registry)


SEEDED_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
# DNS-1123 subdomain (API conventions, "Names").
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_INITIAL_STATUS: dict[str, dict[str, Any]] = {
    "Pod": {"phase": "Pending"},
    "StatefulSet": {"replicas": 0, "availableReplicas": 0},
    "ReplicaSet": {"replicas": 0},
    "DaemonSet": {"currentNumberScheduled": 0, "desiredNumberScheduled": 0, "numberMisscheduled": 0, "numberReady": 0},
}
ObjectKey = tuple[str, str, str | None, str]  # group, plural, namespace, name
_DELETE_RETURNS_OBJECT = {
    ("", "pods"),
    ("", "services"),
    ("", "serviceaccounts"),
    ("", "persistentvolumeclaims"),
    ("", "persistentvolumes"),
}


def timestamp() -> str:
    """The API server's time (RFC 3339, seconds): the sandbox's clock, so that on a simulated block the objects'
    times (a node's registration, its Ready transition) are the block's, as AWS's and Kubernetes' are on AWS."""
    return CLOCK.now().strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Event:
    resource_version: int
    group: str
    plural: str
    type: str  # ADDED | MODIFIED | DELETED
    obj: dict[str, Any]


class Store:
    def __init__(self, *, k8s_version: str = "1.34", validate: bool = True, history: int = 10_000) -> None:
        self.k8s_version = k8s_version
        self.validate = validate
        self.history = history
        self.lock = threading.RLock()
        self.listeners: list[Callable[[Event], None]] = []
        self.revision = 100  # never goes back, not even on reset: watchers compare versions
        self.admission: Any = None  # capserve_sandbox.kube.admission.Admission, set by FakeKube
        self.dry_running = False
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.resources: dict[tuple[str, str, str], Resource] = builtin_resources()
            self.objects: dict[ObjectKey, dict[str, Any]] = {}
            self.owners: dict[ObjectKey, dict[str, set[Path]]] = {}
            self.events: list[Event] = []
            self.compacted_through = 0  # events at or below this resourceVersion are gone
            for name in SEEDED_NAMESPACES:
                self._store(
                    self.resource("", "v1", "namespaces"),
                    None,
                    {"metadata": {"name": name}},
                    old=None,
                    manager=None,
                    operation="Update",
                )

    # ------------------------------------------------------------------ lookup

    def resource(self, group: str, version: str, plural: str) -> Resource:
        found = self.resources.get((group, version, plural))
        if found is None:
            raise ApiError(
                404, "NotFound", f"the server could not find the requested resource ({group}/{version} {plural})"
            )
        return found

    def resource_for(self, group: str, plural: str) -> Resource:
        for resource in self.resources.values():
            if (resource.group, resource.plural) == (group, plural):
                return resource
        raise ApiError(404, "NotFound", f"no resource {plural}.{group}")

    def get(self, resource: Resource, namespace: str | None, name: str) -> dict[str, Any]:
        with self.lock:
            obj = self.objects.get((resource.group, resource.plural, namespace, name))
            if obj is None:
                raise not_found(resource.plural, name)
            return _copied(obj)

    def list_objects(
        self, resource: Resource, namespace: str | None, label_selector: str | None, field_selector: str | None
    ) -> tuple[list[dict[str, Any]], str]:
        tests = parse_label_selector(label_selector)
        with self.lock:
            items = [
                _copied(obj)
                for (group, plural, obj_namespace, _), obj in sorted(self.objects.items(), key=_by_namespace_and_name)
                if (group, plural) == (resource.group, resource.plural)
                and (namespace is None or obj_namespace == namespace)
                and matches(obj, tests, field_selector)
            ]
            return [self._as_version(item, resource) for item in items], str(self.revision)

    def events_after(self, resource_version: int, start: int = 0) -> tuple[list[Event], int]:
        """Events newer than ``resource_version`` from log position ``start``; raises 410 if compacted away."""
        with self.lock:
            if resource_version < self.compacted_through:
                raise ApiError(
                    410, "Expired", f"too old resource version: {resource_version} ({self.compacted_through})"
                )
            fresh = [event for event in self.events[start:] if event.resource_version > resource_version]
            return fresh, len(self.events)

    def compact(self) -> None:
        """Forget the event history (as etcd compaction does): older watches get 410 Gone."""
        with self.lock:
            self.compacted_through = self.revision
            self.events.clear()

    # ------------------------------------------------------------------ writes

    def create(
        self,
        resource: Resource,
        namespace: str | None,
        body: dict[str, Any],
        manager: str | None,
        *,
        trusted: bool = False,
        admit: bool | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Create an object. ``trusted``: a fake control-plane component writes it (no schema check, and no
        admission unless ``admit``: a controller creating pods goes through the webhooks as in a real cluster)."""
        if dry_run:
            with self._dry_run():
                return self.create(resource, namespace, body, manager, trusted=trusted, admit=admit)
        with self.lock:
            name = (body.get("metadata") or {}).get("name")
            if not name:
                raise ApiError(422, "Invalid", f"{resource.kind}: metadata.name: Required value")
            if (resource.group, resource.plural, namespace, name) in self.objects:
                raise ApiError(409, "AlreadyExists", f'{resource.plural} "{name}" already exists')
            self._require_namespace(resource, namespace)
            owned = {manager: set(self._paths(body))} if manager else {}
            return self._store(
                resource,
                namespace,
                _copied(body),
                old=None,
                manager=manager,
                operation="Update",
                owned=owned,
                trusted=trusted,
                admit=not trusted if admit is None else admit,
            )

    def replace(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        body: dict[str, Any],
        manager: str | None,
        subresource: str | None,
        *,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        if dry_run:
            with self._dry_run():
                return self.replace(resource, namespace, name, body, manager, subresource)
        with self.lock:
            old = self._existing(resource, namespace, name)
            wanted = (body.get("metadata") or {}).get("resourceVersion")
            if wanted and wanted != old["metadata"]["resourceVersion"]:
                raise ApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {resource.plural} "{name}": '
                    "the object has been modified; please apply your changes to the latest version and try again",
                )
            self._take_ownership(resource, namespace, name, old, body, manager)
            return self._store(
                resource,
                namespace,
                _copied(body),
                old=old,
                manager=manager,
                operation="Update",
                subresource=subresource,
                admit=subresource != "status",
            )

    def patch(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        raw: bytes,
        content_type: str,
        manager: str | None,
        force: bool,
        subresource: str | None,
        *,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        if dry_run:
            with self._dry_run():
                return self.patch(resource, namespace, name, raw, content_type, manager, force, subresource)
        with self.lock:
            if content_type == "application/apply-patch+yaml":
                config = _load_apply(raw)
                if not isinstance(config, dict):
                    raise ApiError(400, "BadRequest", "apply patch must be an object")
                return self._apply(resource, namespace, name, config, manager, force, subresource)
            old = self._existing(resource, namespace, name)
            body = json.loads(raw)
            if content_type == "application/json-patch+json":
                try:
                    new = jsonpatch.apply_patch(old, body)
                except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
                    raise ApiError(422, "Invalid", f"json patch: {exc}") from exc
            elif content_type == "application/merge-patch+json":
                new = merge_patch(old, body)
            elif content_type == "application/strategic-merge-patch+json":
                if resource.schema is not None:  # custom resources have no patch strategies
                    raise ApiError(
                        415, "UnsupportedMediaType", "strategic merge patch is not supported for custom resources"
                    )
                new = strategic_merge(old, body)
            else:
                raise ApiError(415, "UnsupportedMediaType", f"the patch type {content_type} is not supported")
            self._take_ownership(resource, namespace, name, old, new, manager)
            return self._store(
                resource, namespace, new, old=old, manager=manager, operation="Update", subresource=subresource,
                admit=subresource != "status",
            )

    def _apply(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        config: dict[str, Any],
        manager: str | None,
        force: bool,
        subresource: str | None,
    ) -> dict[str, Any]:
        if not manager:
            raise ApiError(
                422,
                "Invalid",
                'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch',
            )
        config_name = (config.get("metadata") or {}).get("name")
        if config_name and config_name != name:
            raise ApiError(
                400, "BadRequest", f"the name of the object ({config_name}) does not match the name on the URL ({name})"
            )
        key = (resource.group, resource.plural, namespace, name)
        paths = self._paths(config)
        old = self.objects.get(key)
        if old is None:  # apply creates what is missing
            self._require_namespace(resource, namespace)
            body = _copied(config)
            body.setdefault("metadata", {})["name"] = name
            return self._store(
                resource,
                namespace,
                body,
                old=None,
                manager=manager,
                operation="Apply",
                owned={manager: set(paths)},
                subresource=subresource,
                admit=subresource != "status",
            )
        owned = self.owners.setdefault(key, {})
        conflicts = sorted(
            (other, path)
            for other, other_paths in owned.items()
            if other != manager
            for path in other_paths
            if path in paths and get_path(old, path) != paths[path]
        )
        if conflicts and not force:
            listed = "; ".join(
                f'conflict with "{other}": .{".".join(p[2:] for p in path)}' for other, path in conflicts[:5]
            )
            raise ApiError(409, "Conflict", f"Apply failed with {len(conflicts)} conflict(s): {listed}")
        for other in owned:
            if other != manager:
                owned[other] -= set(paths)
        merged = strategic_merge(old, config) if resource.schema is None else merge_patch(old, config)
        # Fields this manager applied before and no longer does are removed, unless someone else owns them.
        for path in owned.get(manager, set()) - set(paths):
            if not any(path in other_paths for other, other_paths in owned.items() if other != manager):
                delete_path(merged, path)
        owned[manager] = set(paths)
        return self._store(
            resource, namespace, merged, old=old, manager=manager, operation="Apply", subresource=subresource,
            admit=subresource != "status",
        )

    def delete(
        self, resource: Resource, namespace: str | None, name: str, propagation: str = "Background"
    ) -> dict[str, Any]:
        with self.lock:
            old = self._existing(resource, namespace, name)
            key = (resource.group, resource.plural, namespace, name)
            del self.objects[key]
            self.owners.pop(key, None)
            gone = _copied(old)
            gone["metadata"]["resourceVersion"] = self._next_revision()
            self._emit(
                Event(int(gone["metadata"]["resourceVersion"]), resource.group, resource.plural, "DELETED", gone)
            )
            if resource.plural == "customresourcedefinitions":
                self._unregister_crd(old)
            if resource.plural == "namespaces":
                for inside in [k for k in self.objects if k[2] == name]:
                    self.delete(self.resource_for(inside[0], inside[1]), inside[2], inside[3], propagation)
            uid = old["metadata"]["uid"]
            for other_key, other in list(self.objects.items()):
                references = other["metadata"].get("ownerReferences") or []
                if not any(reference.get("uid") == uid for reference in references):
                    continue
                if propagation == "Orphan":  # dependents stay, without the reference to their owner
                    other["metadata"]["ownerReferences"] = [r for r in references if r.get("uid") != uid]
                elif other_key in self.objects:
                    self.delete(self.resource_for(other_key[0], other_key[1]), other_key[2], other_key[3], propagation)
            if (resource.group, resource.plural) in _DELETE_RETURNS_OBJECT:
                # These kinds answer a delete with the object itself (their REST strategies; the official
                # client's delete_namespaced_pod is typed V1Pod). Pods go at once here: no grace period.
                gone["metadata"]["deletionTimestamp"] = timestamp()
                return gone
            return {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "details": {"name": name, "group": resource.group, "kind": resource.plural, "uid": uid},
            }

    def write_status(
        self, resource: Resource, namespace: str | None, name: str, status: dict[str, Any], manager: str
    ) -> dict[str, Any] | None:
        """What a controller does: replace the status subresource. None if the object is gone."""
        with self.lock:
            old = self.objects.get((resource.group, resource.plural, namespace, name))
            if old is None:
                return None
            new = _copied(old)
            new["status"] = status
            return self._store(
                resource,
                namespace,
                new,
                old=old,
                manager=manager,
                operation="Update",
                subresource="status",
                trusted=True,
            )

    def put_object(
        self, resource: Resource, body: dict[str, Any], manager: str, *, trusted: bool = False
    ) -> dict[str, Any]:
        """Create or replace an object as a system component would (a kubelet registering its Node)."""
        with self.lock:
            name = body["metadata"]["name"]
            namespace = body["metadata"].get("namespace") if resource.namespaced else None
            old = self.objects.get((resource.group, resource.plural, namespace, name))
            return self._store(
                resource,
                namespace,
                _copied(body),
                old=old,
                manager=manager,
                operation="Update",
                keep_status=True,
                trusted=trusted,
            )

    # ------------------------------------------------------------------ internals

    @contextmanager
    def _dry_run(self) -> Iterator[None]:
        """Run a write against a scratch copy of the state, then put the real state back: the write is
        admitted, defaulted and validated like any other, and leaves no trace (API concepts, "Dry-run")."""
        with self.lock:
            saved = (self.objects, self.owners, self.events, self.revision, self.resources, self.listeners,
                     self.compacted_through)
            # Writes replace stored objects (never change them in place) but change owners' path sets in place.
            owners = {key: {manager: set(paths) for manager, paths in by.items()} for key, by in self.owners.items()}
            self.objects, self.owners = dict(self.objects), owners
            self.events, self.resources, self.listeners = [], dict(self.resources), []
            self.dry_running = True
            try:
                yield
            finally:
                (self.objects, self.owners, self.events, self.revision, self.resources, self.listeners,
                 self.compacted_through) = saved
                self.dry_running = False

    def _existing(self, resource: Resource, namespace: str | None, name: str) -> dict[str, Any]:
        obj = self.objects.get((resource.group, resource.plural, namespace, name))
        if obj is None:
            raise not_found(resource.plural, name)
        return obj

    def _require_namespace(self, resource: Resource, namespace: str | None) -> None:
        if resource.namespaced and ("", "namespaces", None, namespace) not in self.objects:
            raise ApiError(404, "NotFound", f'namespaces "{namespace}" not found')

    def _paths(self, body: dict[str, Any]) -> dict[Path, Any]:
        ignored = {("f:apiVersion",), ("f:kind",), ("f:metadata", "f:name"), ("f:metadata", "f:namespace")}
        return {path: value for path, value in leaf_paths(body).items() if path not in ignored}

    def _take_ownership(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        old: dict[str, Any],
        new: dict[str, Any],
        manager: str | None,
    ) -> None:
        """An Update-style write takes the fields it changed away from their previous owners."""
        owned = self.owners.setdefault((resource.group, resource.plural, namespace, name), {})
        changed = {path for path, value in self._paths(new).items() if get_path(old, path) != value}
        for other in owned:
            if other != manager:
                owned[other] -= changed
        if manager:
            owned.setdefault(manager, set()).update(changed)

    def _next_revision(self) -> str:
        self.revision += 1
        return str(self.revision)

    def _emit(self, event: Event) -> None:
        self.events.append(event)
        if len(self.events) > self.history:
            dropped = self.events[: len(self.events) - self.history]
            self.compacted_through = dropped[-1].resource_version
            del self.events[: len(dropped)]
        for listener in list(self.listeners):
            listener(event)

    def _as_version(self, obj: dict[str, Any], resource: Resource) -> dict[str, Any]:
        obj["apiVersion"] = resource.api_version  # one stored version: served as whatever was asked
        return obj

    def _store(
        self,
        resource: Resource,
        namespace: str | None,
        obj: dict[str, Any],
        *,
        old: dict[str, Any] | None,
        manager: str | None,
        operation: str,
        owned: dict[str, set[Path]] | None = None,
        subresource: str | None = None,
        keep_status: bool = False,
        trusted: bool = False,
        admit: bool = False,
    ) -> dict[str, Any]:
        metadata = obj.setdefault("metadata", {})
        if resource.namespaced:
            metadata["namespace"] = namespace
        else:
            metadata.pop("namespace", None)
        obj["apiVersion"] = resource.api_version
        obj["kind"] = resource.kind
        if subresource == "status" and old is not None:
            # Writes to /status change only the status (API conventions, "Spec and Status").
            status = obj.get("status")
            obj = _copied(old)
            obj["status"] = status
            metadata = obj["metadata"]
        elif resource.has_status and not keep_status:
            # ... and writes to the main resource never change the status.
            previous = (old or {}).get("status")
            if previous is not None:
                obj["status"] = _copied(previous)
            else:
                obj.pop("status", None)
                if resource.schema is None:
                    # Built-ins come back with a zero status after create (DaemonSetStatus has required counters).
                    obj["status"] = _copied(_INITIAL_STATUS.get(resource.kind, {}))
        self._default(resource, obj)
        request = None
        if admit and self.admission is not None:
            operation_name = "CREATE" if old is None else "UPDATE"
            request = Request(operation_name, resource, namespace, obj, old, dry_run=self.dry_running)
            obj = self.admission.mutate(request)
            metadata = obj["metadata"]
        if old is not None and subresource != "status":
            _check_immutable(resource, old, obj)
        # The fake's own controllers and kubelet are "trusted": checking every status write against the
        # OpenAPI schema would cost ~30 ms each; tests validate what they write instead.
        self._validate(resource, obj, schema=not trusted)
        if request is not None:
            self.admission.validate(Request(request.operation, resource, namespace, obj, old, request.dry_run))
        if old is None:
            metadata.update({"uid": str(uuid.uuid4()), "creationTimestamp": timestamp(), "generation": 1})
        else:
            metadata["uid"] = old["metadata"]["uid"]
            metadata["creationTimestamp"] = old["metadata"]["creationTimestamp"]
            generation = old["metadata"].get("generation", 1)
            body_changed = {k: v for k, v in obj.items() if k not in ("metadata", "status")} != {
                k: v for k, v in old.items() if k not in ("metadata", "status")
            }
            metadata["generation"] = generation + 1 if body_changed else generation
        metadata.pop("deletionTimestamp", None)
        key = (resource.group, resource.plural, namespace, metadata["name"])
        if owned is not None:
            self.owners[key] = owned
        metadata["managedFields"] = self._managed_fields(key, old, manager, operation, obj["apiVersion"], subresource)
        if old is not None and _unchanged(old, obj):
            return _copied(old)  # a no-op write is not a change: same resourceVersion, no event
        metadata["resourceVersion"] = self._next_revision()
        self.objects[key] = obj
        if resource.plural == "customresourcedefinitions":
            self._register_crd(obj)
        self._emit(
            Event(
                int(metadata["resourceVersion"]),
                resource.group,
                resource.plural,
                "ADDED" if old is None else "MODIFIED",
                _copied(obj),
            )
        )
        return _copied(obj)

    def _managed_fields(
        self,
        key: ObjectKey,
        old: dict[str, Any] | None,
        manager: str | None,
        operation: str,
        api_version: str,
        subresource: str | None,
    ) -> list[dict[str, Any]]:
        previous: dict[tuple[str, str], dict[str, Any]] = {
            (entry["manager"], entry["operation"]): entry
            for entry in ((old or {}).get("metadata") or {}).get("managedFields") or []
        }
        if manager:
            entry: dict[str, Any] = {
                "manager": manager,
                "operation": operation,
                "apiVersion": api_version,
                "time": timestamp(),
                "fieldsType": "FieldsV1",
            }
            if subresource:
                entry["subresource"] = subresource
            previous[(manager, operation)] = entry
        owned = self.owners.get(key, {})
        entries = []
        for (name, _operation), current in sorted(previous.items()):
            paths = owned.get(name)
            entries.append({**current, "fieldsV1": fields_v1(paths)} if paths else current)
        return entries

    def _default(self, resource: Resource, obj: dict[str, Any]) -> None:
        """The defaulting a real API server does for the kinds capserve applies (a few, not all)."""
        kind = (resource.group, resource.plural)
        spec = obj.get("spec")
        if kind == ("", "secrets") and "stringData" in obj:
            encoded = {k: base64.b64encode(str(v).encode()).decode() for k, v in obj.pop("stringData").items()}
            obj.setdefault("data", {}).update(encoded)
        elif kind == ("", "services") and isinstance(spec, dict):
            spec.setdefault("type", "ClusterIP")
            spec.setdefault("clusterIP", f"10.96.{self.revision // 250 % 250}.{self.revision % 250 + 2}")
        elif kind == ("apps", "deployments") and isinstance(spec, dict):
            spec.setdefault("replicas", 1)
            spec.setdefault("progressDeadlineSeconds", 600)
            spec.setdefault("revisionHistoryLimit", 10)
            spec.setdefault(
                "strategy", {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}}
            )
        elif kind == ("apps", "daemonsets") and isinstance(spec, dict):
            spec.setdefault("revisionHistoryLimit", 10)
            spec.setdefault(
                "updateStrategy", {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
            )
        elif kind == ("", "pods") and isinstance(spec, dict):
            default_pod(obj)
        elif kind == ("batch", "jobs") and isinstance(spec, dict):
            spec.setdefault("completions", 1)
            spec.setdefault("parallelism", 1)
            spec.setdefault("backoffLimit", 6)
        if resource.schema is not None:
            _schema_defaults(obj, resource.schema)

    def _validate(self, resource: Resource, obj: dict[str, Any], *, schema: bool = True) -> None:
        name = obj["metadata"].get("name") or ""
        if not _NAME.match(name) or len(name) > 253:
            raise ApiError(
                422,
                "Invalid",
                f'{resource.kind} "{name}" is invalid: metadata.name: Invalid value: '
                f"{name!r}: a lowercase RFC 1123 subdomain must consist of lower case alphanumerics, '-' or '.'",
            )
        if not self.validate or not schema:
            return
        validator = resource.validator()
        if validator is not None:
            error = next(iter(validator.iter_errors(obj)), None)
            if error is not None:
                where = ".".join(str(part) for part in error.absolute_path)
                raise ApiError(
                    422, "Invalid", f'{resource.kind}.{resource.group} "{name}" is invalid: {where}: {error.message}'
                )
        elif kubernetes_validate is not None:
            validator = _builtin_validator(obj["kind"], obj["apiVersion"], self.k8s_version)
            error = next(iter(validator.iter_errors(obj)), None)
            if error is not None:
                where = ".".join(str(part) for part in error.path)
                raise ApiError(422, "Invalid", f'{resource.kind} "{name}" is invalid: {where}: {error.message}')
        spec = obj.get("spec") or {}
        if resource.kind in ("Deployment", "DaemonSet", "StatefulSet", "ReplicaSet"):
            selector = (spec.get("selector") or {}).get("matchLabels") or {}
            labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
            if any(labels.get(k) != v for k, v in selector.items()):
                raise ApiError(
                    422,
                    "Invalid",
                    f'{resource.kind}.apps "{name}" is invalid: spec.template.metadata.labels: '
                    "Invalid value: `selector` does not match template `labels`",
                )

    def _register_crd(self, crd: dict[str, Any]) -> None:
        for resource in crd_resources(crd):
            self.resources[(resource.group, resource.version, resource.plural)] = resource

    def _unregister_crd(self, crd: dict[str, Any]) -> None:
        spec = crd["spec"]
        for key in [k for k in self.resources if (k[0], k[2]) == (spec["group"], spec["names"]["plural"])]:
            del self.resources[key]
        for object_key in [k for k in self.objects if (k[0], k[1]) == (spec["group"], spec["names"]["plural"])]:
            del self.objects[object_key]


_SCALARS = (str, int, float, bool, type(None))
_T = TypeVar("_T")


def _copied(obj: _T) -> _T:
    """A deep copy of a JSON-shaped object (what the store holds): dicts and lists rebuilt, scalars shared; anything
    else through ``copy.deepcopy``. A third of ``copy.deepcopy``'s time: it has no memo to keep (a Kubernetes
    object has no cycles), and every read, list, write and watch event of the store copies whole objects (a CRD's
    schema is over half a megabyte of JSON)."""
    kind = type(obj)
    if kind is dict:
        return cast(_T, {key: _copied(value) for key, value in cast(dict[str, Any], obj).items()})
    if kind is list:
        return cast(_T, [_copied(value) for value in cast(list[Any], obj)])
    if kind in _SCALARS:
        return obj
    return copy.deepcopy(obj)


def _by_namespace_and_name(item: tuple[ObjectKey, dict[str, Any]]) -> tuple[str, str]:
    return item[0][2] or "", item[0][3]


def _load_apply(raw: bytes) -> Any:
    """An apply body is YAML; clients usually send JSON (a subset), which parses much faster."""
    try:
        return json.loads(raw)
    except ValueError:
        pass
    try:
        return yaml.load(raw, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - safe loaders only
    except yaml.YAMLError as exc:
        raise ApiError(400, "BadRequest", f"the apply body is not YAML: {exc}") from exc


def _check_immutable(resource: Resource, old: dict[str, Any], new: dict[str, Any]) -> None:
    """A Job's pod template and selector never change after creation (batch/v1 validation: "field is
    immutable"); a changed Job is deleted and created again."""
    if (resource.group, resource.plural) != ("batch", "jobs"):
        return
    for field in ("template", "selector"):
        before, after = (old.get("spec") or {}).get(field), (new.get("spec") or {}).get(field)
        if before != after:
            name = new["metadata"].get("name")
            message = f'Job.batch "{name}" is invalid: spec.{field}: Invalid value: "object": field is immutable'
            raise ApiError(422, "Invalid", message)


def _unchanged(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Equal but for resourceVersion and managedFields timestamps."""

    def essence(obj: dict[str, Any]) -> dict[str, Any]:
        metadata = {k: v for k, v in obj["metadata"].items() if k != "resourceVersion"}
        metadata["managedFields"] = [
            {k: v for k, v in entry.items() if k != "time"} for entry in metadata.get("managedFields") or []
        ]
        return {**obj, "metadata": metadata}

    return essence(old) == essence(new)


def _schema_defaults(obj: Any, schema: dict[str, Any]) -> None:
    """Structural-schema defaulting: a missing property with a ``default`` gets it (apiextensions, "Defaulting")."""
    if isinstance(obj, dict):
        for key, sub in (schema.get("properties") or {}).items():
            if key not in obj and "default" in sub:
                obj[key] = _copied(sub["default"])
            if key in obj:
                _schema_defaults(obj[key], sub)
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        for item in obj:
            _schema_defaults(item, schema["items"])
