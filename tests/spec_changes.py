"""A spec with a few fields changed: what the spec, preflight, campaign and bad-input tests start from."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "kimi-k3-sandbox.yaml"


def changed(data: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """A copy of ``data`` with each ``a__b=value`` set as ``data["a"]["b"] = value`` (missing levels made);
    the value ``...`` removes the field instead."""
    data = copy.deepcopy(data)
    for dotted, value in changes.items():
        *parents, leaf = dotted.split("__")
        node = data
        for key in parents:
            node = node.setdefault(key, {})
        if value is ...:
            node.pop(leaf)
        else:
            node[leaf] = value
    return data


def spec_file(tmp_path: Path, **changes: Any) -> Path:
    """The example spec with ``changes`` (as ``changed`` reads them), written to ``tmp_path/spec.yaml``."""
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(changed(yaml.safe_load(EXAMPLE.read_text()), **changes)))
    return path
