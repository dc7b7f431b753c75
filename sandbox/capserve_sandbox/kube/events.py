"""core/v1 Events as the scheduler, the kubelet and the controllers record them.

Like client-go's event recorder, a repeat of the same (object, reason, message, source) does not make
a new Event: it bumps ``count`` and ``lastTimestamp`` of the one recorded before. Names are
``<object>.<16 hex digits>`` in the object's namespace (Node events go to "default").
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Any

from capserve_sandbox.kube.store import Store, timestamp


class Recorder:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._seen: dict[tuple[str, str, str, str], str] = {}  # (uid, reason, message, component) -> event name

    def reset(self) -> None:
        self._seen.clear()

    def record(
        self,
        involved: Mapping[str, Any],
        reason: str,
        message: str,
        *,
        warning: bool = False,
        component: str,
        host: str | None = None,
        field_path: str | None = None,
    ) -> None:
        metadata = involved.get("metadata") or {}
        namespace = metadata.get("namespace") or "default"
        uid = str(metadata.get("uid", ""))
        events = self.store.resource("", "v1", "events")
        key = (uid, reason, message, component)
        now = timestamp()
        with self.store.lock:
            name = self._seen.get(key)
            existing = self.store.objects.get(("", "events", namespace, name)) if name else None
            if existing is not None:
                bumped = {**existing, "count": int(existing.get("count") or 1) + 1, "lastTimestamp": now}
                self.store.put_object(events, bumped, manager=component, trusted=True)
                return
            name = f"{metadata.get('name')}.{secrets.token_hex(8)}"
            self._seen[key] = name
            reference: dict[str, Any] = {
                "apiVersion": involved.get("apiVersion", "v1"),
                "kind": involved.get("kind", ""),
                "name": metadata.get("name"),
                "uid": uid,
            }
            if metadata.get("namespace"):
                reference["namespace"] = metadata["namespace"]
            if field_path:
                reference["fieldPath"] = field_path
            source: dict[str, Any] = {"component": component}
            if host:
                source["host"] = host
            body = {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": name, "namespace": namespace},
                "involvedObject": reference,
                "reason": reason,
                "message": message,
                "type": "Warning" if warning else "Normal",
                "source": source,
                "firstTimestamp": now,
                "lastTimestamp": now,
                "count": 1,
                "reportingComponent": component,
                "reportingInstance": host or component,
            }
            if ("", "namespaces", None, namespace) in self.store.objects:
                self.store.put_object(events, body, manager=component, trusted=True)
