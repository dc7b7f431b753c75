"""Every object the campaign applies, also written to ``out/<run>/manifests/`` as YAML, in apply order.

A person can read or diff exactly what went to the cluster: ``001-Namespace-capserve-k3-demo.yaml``,
``002-…``. Secrets are written with their values replaced by ``<redacted>`` (``redact_for_disk``):
the key itself only ever travels to the API server. The campaign flow opens the log for its run
(``recording``); ``capserve.tasks.kube`` adds each object after the API server accepted it.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from capserve.core.rollout.secret import redact_for_disk

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
# libyaml's emitter when PyYAML has it: the add-ons' CRDs are megabytes of YAML, and the pure-Python emitter spent
# 1.46 s of CPU writing a campaign's 21 add-ons (0.23 s with libyaml). The same documents; long strings fold
# at other points.
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class ManifestLog:
    """Numbered YAML files in one folder, one per applied object."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._lock = threading.Lock()
        self._count = len(list(directory.glob("*.yaml"))) if directory.is_dir() else 0

    def add(self, manifest: Mapping[str, Any]) -> Path:
        safe = redact_for_disk(manifest)
        metadata = safe.get("metadata") or {}
        parts = [str(safe.get("kind") or "Object"), str(metadata.get("namespace") or ""), str(metadata.get("name"))]
        stem = "-".join(_UNSAFE.sub("_", part) for part in parts if part)
        with self._lock:
            self._count += 1
            self.directory.mkdir(parents=True, exist_ok=True)
            path = self.directory / f"{self._count:03d}-{stem}.yaml"
            path.write_text(yaml.dump(safe, Dumper=_DUMPER, sort_keys=False, default_flow_style=False))
        return path


_active: list[ManifestLog] = []
_active_lock = threading.Lock()


@contextmanager
def recording(directory: Path) -> Iterator[ManifestLog]:
    """Write every object applied while this is open to ``directory`` (the campaign's ``manifests/``)."""
    log = ManifestLog(directory)
    with _active_lock:
        _active.append(log)
    try:
        yield log
    finally:
        with _active_lock:
            _active.remove(log)


def record_applied(manifest: Mapping[str, Any]) -> None:
    """Called after each successful apply; a no-op when no campaign is recording."""
    with _active_lock:
        logs = list(_active)
    for log in logs:
        log.add(manifest)
