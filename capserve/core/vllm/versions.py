"""Which vLLM a campaign runs, read from its image, and the snapshot of that vLLM's rules to check it with.

A snapshot per vLLM version lives in ``data/<version>/`` (``serve_flags.json``, ``serve_rules.json``), each
written by ``scripts/snapshot_vllm_flags.py`` and ``scripts/snapshot_vllm_rules.py`` with that version
installed. The version is the image's tag when the tag names one (``vllm/vllm-openai:v0.32.0``, ``0.32.0``,
``v0.32.0-cu130``: vLLM's release images are tagged ``v<version>``, docs/serving.md §10). An image named by
digest only, a tag such as ``latest`` or ``kimi-k3``, or a version the repository has no snapshot of is
checked against the newest snapshot: ``image_version`` says which it was, and preflight says so.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import NamedTuple

_RELEASE_TAG = re.compile(r"^v?(?P<version>\d+\.\d+\.\d+)(?:$|[-+])")


class ImageVersion(NamedTuple):
    version: str  # the snapshot's vLLM version
    from_tag: bool  # True: the image's tag named this version; False: the newest snapshot stands in


@cache
def versions() -> tuple[str, ...]:
    """The vLLM versions the repository holds snapshots of, oldest first."""
    data = resources.files("capserve.core.vllm").joinpath("data")
    found = [entry.name for entry in data.iterdir() if entry.is_dir() and _RELEASE_TAG.match(entry.name)]
    return tuple(sorted(found, key=lambda v: tuple(int(part) for part in v.split("."))))


def newest_version() -> str:
    return versions()[-1]


def snapshot_file(version: str, name: str) -> str:
    """The text of one snapshot file of ``version`` (a version the repository holds)."""
    if version not in versions():
        raise ValueError(f"no vLLM {version} snapshot (held: {', '.join(versions())})")
    return resources.files("capserve.core.vllm").joinpath(f"data/{version}/{name}").read_text("utf-8")


def image_tag(image: str) -> str | None:
    """The tag of an image reference (None when it has none: a digest only, or the implicit ``latest``)."""
    name = image.partition("@")[0]
    last = name.rsplit("/", 1)[-1]
    return last.partition(":")[2] or None


def image_version(image: str) -> ImageVersion:
    """The snapshot to check ``image``'s ``vllm serve`` with."""
    found = _RELEASE_TAG.match(image_tag(image) or "")
    if found and found["version"] in versions():
        return ImageVersion(found["version"], True)
    return ImageVersion(newest_version(), False)
