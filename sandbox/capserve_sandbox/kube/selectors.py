"""Label and field selectors, as the API server parses them for list and watch.

Label selector grammar: Kubernetes docs, "Labels and Selectors" (equality-based ``=``, ``==``,
``!=``; set-based ``in``, ``notin``, ``key``, ``!key``). Field selectors support ``=``, ``==``
and ``!=`` on dotted paths (the real server allows only a few fields per kind; we allow any).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from capserve_sandbox.kube.errors import ApiError

LabelTest = Callable[[Mapping[str, str]], bool]

# One term: a set-based term keeps its parenthesised value list, so split on commas outside parentheses.
_TERM = re.compile(r"[^,(]+(?:\([^)]*\))?")
_SET_TERM = re.compile(r"^(\S+)\s+(in|notin)\s+\((.*)\)$")


def parse_label_selector(selector: str | None) -> list[LabelTest]:
    tests: list[LabelTest] = []
    for raw in _TERM.findall(selector or ""):
        term = raw.strip()
        if not term:
            continue
        set_term = _SET_TERM.match(term)
        if set_term:
            key, op, values = set_term.group(1), set_term.group(2), {v.strip() for v in set_term.group(3).split(",")}
            tests.append(_in(key, values) if op == "in" else _not_in(key, values))
        elif "!=" in term:
            key, value = (part.strip() for part in term.split("!=", 1))
            tests.append(_not_equals(key, value))
        elif "=" in term:
            key, value = (part.strip() for part in term.replace("==", "=").split("=", 1))
            tests.append(_equals(key, value))
        elif term.startswith("!"):
            tests.append(_absent(term[1:].strip()))
        elif re.match(r"^[A-Za-z0-9./_-]+$", term):
            tests.append(_present(term))
        else:
            raise ApiError(400, "BadRequest", f"unable to parse requirement: {term!r}")
    return tests


def _equals(key: str, value: str) -> LabelTest:
    return lambda labels: labels.get(key) == value


def _not_equals(key: str, value: str) -> LabelTest:
    return lambda labels: labels.get(key) != value


def _present(key: str) -> LabelTest:
    return lambda labels: key in labels


def _absent(key: str) -> LabelTest:
    return lambda labels: key not in labels


def _in(key: str, values: set[str]) -> LabelTest:
    return lambda labels: labels.get(key) in values


def _not_in(key: str, values: set[str]) -> LabelTest:
    return lambda labels: labels.get(key) not in values


def _field(obj: Mapping[str, Any], path: str) -> Any:
    current: Any = obj
    for part in path.split("."):
        current = current.get(part) if isinstance(current, Mapping) else None
    return current


def matches(obj: Mapping[str, Any], label_tests: list[LabelTest], field_selector: str | None) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    if not all(test(labels) for test in label_tests):
        return False
    for term in filter(None, (field_selector or "").split(",")):
        negate = "!=" in term
        path, value = term.split("!=" if negate else "=", 1)
        actual = _field(obj, path.strip())
        equal = ("" if actual is None else str(actual)) == value.lstrip("=").strip()
        if equal == negate:
            return False
    return True
