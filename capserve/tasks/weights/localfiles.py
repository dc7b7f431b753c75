"""Local weight files: hashing, and the "verified" markers a re-run may trust.

A marker is written only after a file's sha256 was checked, and records the file's size and mtime;
a re-run trusts a file only when both still match (so a file rewritten, truncated or half-written
by a killed process is hashed again). Markers live under ``<dir>/.capserve/verified/``.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

MARKER_DIR = ".capserve/verified"


@dataclass(frozen=True)
class Digest:
    size: int
    sha256: str
    git_sha1: str  # git blob id, what the Hub reports for non-LFS files


def hash_file(path: Path, *, chunk: int = 8 << 20) -> Digest:
    """sha256 and git blob sha1 in one pass (hashlib releases the GIL on big buffers, so threads hash in parallel)."""
    size = path.stat().st_size
    sha256 = hashlib.sha256()
    git = hashlib.sha1(f"blob {size}\0".encode(), usedforsecurity=False)  # git's blob id
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            sha256.update(block)
            git.update(block)
    return Digest(size=size, sha256=sha256.hexdigest(), git_sha1=git.hexdigest())


def _marker(root: Path, rel: str) -> Path:
    return root / MARKER_DIR / f"{rel}.json"


def trusted_sha256(root: Path, rel: str) -> str | None:
    """The recorded sha256 of ``root/rel`` if its marker matches the file as it is now, else None."""
    path, marker = root / rel, _marker(root, rel)
    try:
        stat = path.stat()
        record = json.loads(marker.read_text())
    except (OSError, ValueError):
        return None
    if record.get("size") != stat.st_size or record.get("mtime_ns") != stat.st_mtime_ns:
        return None
    sha = record.get("sha256")
    return sha if isinstance(sha, str) else None


def mark_verified(root: Path, rel: str, sha256: str) -> None:
    """Record that ``root/rel`` has ``sha256`` (atomically: a killed process leaves no half marker)."""
    stat = (root / rel).stat()
    marker = _marker(root, rel)
    marker.parent.mkdir(parents=True, exist_ok=True)
    tmp = marker.with_name(marker.name + ".tmp")
    tmp.write_text(json.dumps({"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": sha256}))
    os.replace(tmp, marker)


def forget(root: Path, rel: str) -> None:
    """Delete a file and its marker (a mismatch, or before a forced refetch)."""
    for path in (root / rel, _marker(root, rel)):
        path.unlink(missing_ok=True)


def write_verified(root: Path, rel: str, data: bytes) -> Digest:
    """Write a small file atomically and mark it verified (used for generated index files)."""
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".partial")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    digest = hash_file(path)
    mark_verified(root, rel, digest.sha256)
    return digest
