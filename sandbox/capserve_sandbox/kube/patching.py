"""Patch semantics: JSON merge patch, a strategic merge for the common lists, and apply ownership.

- JSON merge patch: RFC 7386 (``null`` deletes, objects merge, everything else replaces).
- Strategic merge: lists of objects merge by their patch merge key (the ``x-kubernetes-patch-merge-key``
  of the built-in types, e.g. containers by ``name``, volumeMounts by ``mountPath``); other lists
  replace. The ``$patch``/``$retainKeys`` directives are not supported.
- Server-side apply ownership is tracked per leaf field path; list items with a merge key are path
  elements of their own, written ``k:{"name":"x"}`` as in ``managedFields[].fieldsV1``
  (Kubernetes docs, "Server-Side Apply", "Field management").
"""

from __future__ import annotations

import copy
import json
from typing import Any

# Patch merge keys of the built-in types that the add-ons and workloads use (from the
# x-kubernetes-patch-merge-key markers of the core/v1 and apps/v1 OpenAPI schema).
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "ports": "containerPort",
    "imagePullSecrets": "name",
    "conditions": "type",
    "tolerations": "key",
    "ownerReferences": "uid",
}

Path = tuple[str, ...]


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    merged = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


def strategic_merge(target: Any, patch: Any, field: str | None = None) -> Any:
    if isinstance(patch, dict):
        merged = copy.deepcopy(target) if isinstance(target, dict) else {}
        for key, value in patch.items():
            if key.startswith("$"):
                continue
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = strategic_merge(merged.get(key), value, key)
        return merged
    merge_key = MERGE_KEYS.get(field or "")
    if isinstance(patch, list) and merge_key and isinstance(target, list) and _keyed(patch, merge_key):
        merged_list = copy.deepcopy(target)
        for item in patch:
            for index, current in enumerate(merged_list):
                if isinstance(current, dict) and current.get(merge_key) == item[merge_key]:
                    merged_list[index] = strategic_merge(current, item)
                    break
            else:
                merged_list.append(copy.deepcopy(item))
        return merged_list
    return copy.deepcopy(patch)


def _keyed(items: list[Any], merge_key: str) -> bool:
    return all(isinstance(item, dict) and merge_key in item for item in items)


def _item_element(merge_key: str, value: Any) -> str:
    return "k:" + json.dumps({merge_key: value}, separators=(",", ":"))


def leaf_paths(obj: Any, prefix: Path = ()) -> dict[Path, Any]:
    """Every leaf of ``obj`` by path; keyed list items become ``k:{...}`` elements."""
    leaves: dict[Path, Any] = {}
    if isinstance(obj, dict):
        if not obj and prefix:
            leaves[prefix] = {}
        for key, value in obj.items():
            leaves.update(leaf_paths(value, (*prefix, f"f:{key}")))
        return leaves
    field = prefix[-1][2:] if prefix and prefix[-1].startswith("f:") else ""
    merge_key = MERGE_KEYS.get(field)
    if isinstance(obj, list) and merge_key and obj and _keyed(obj, merge_key):
        for item in obj:
            leaves.update(leaf_paths(item, (*prefix, _item_element(merge_key, item[merge_key]))))
        return leaves
    leaves[prefix] = obj
    return leaves


def get_path(obj: Any, path: Path) -> Any:
    current = obj
    for element in path:
        if element.startswith("k:") and isinstance(current, list):
            ((key, value),) = json.loads(element[2:]).items()
            current = next((item for item in current if isinstance(item, dict) and item.get(key) == value), None)
        elif element.startswith("f:") and isinstance(current, dict):
            current = current.get(element[2:])
        else:
            return None
        if current is None:
            return None
    return current


def delete_path(obj: Any, path: Path) -> None:
    parent = get_path(obj, path[:-1]) if len(path) > 1 else obj
    last = path[-1]
    if isinstance(parent, dict) and last.startswith("f:"):
        parent.pop(last[2:], None)
    elif isinstance(parent, list) and last.startswith("k:"):
        ((key, value),) = json.loads(last[2:]).items()
        parent[:] = [item for item in parent if not (isinstance(item, dict) and item.get(key) == value)]


def fields_v1(paths: set[Path]) -> dict[str, Any]:
    """Owned paths as the nested ``fieldsV1`` document of a managedFields entry."""
    tree: dict[str, Any] = {}
    for path in sorted(paths):
        node = tree
        for element in path:
            node = node.setdefault(element, {})
    return tree
