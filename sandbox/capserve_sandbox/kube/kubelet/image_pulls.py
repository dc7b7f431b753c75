"""One image pull by the sandbox kubelet: what the registry holds, and how long the bytes take.

``pull_image`` is the one function the kubelet calls per pull (``worker.ContainerRunner._pull``); whatever
decides whether a node can reach a registry hooks in there.

- **ECR references of the sandbox's account** (``<account>.dkr.ecr.<region>.amazonaws.com/<repo>[:tag|@digest]``)
  are resolved against the sandbox's moto ECR, in the same process: a repository, tag or digest ECR does not
  hold fails as containerd fails it, ``failed to pull and unpack image "<ref>": failed to resolve reference
  "<ref>": <ref>: not found`` (the kubelet then reports ``ErrImagePull`` and ``ImagePullBackOff``). ECR
  references of other accounts (AWS's own EKS add-on registries, 602401143452) and other registries are not
  the sandbox's to know: they are taken as present, with no size.
- **A registry host no DNS resolves**: a first component with an upper-case letter and no '.' or ':'
  (``Vllm/vllm-openai``) is a registry host to containerd (distribution/reference ``normalize.go``), so the pull
  fails with ``lookup Vllm: no such host``; the spec refuses such a reference before anything is bought.
- **Time**: the image's size (ECR's ``imageSizeInBytes``: its compressed layers) ÷ ``PULL_BYTES_PER_S``, in
  cluster seconds. The figure is an assumption (AWS publishes no ECR pull rate; docs/sandbox-kubelet.md,
  "Images"); containerd fetches three layers at a time (CRI ``max_concurrent_downloads`` default 3), so one
  stream's rate is not the limit. An unknown image takes ``UNKNOWN_PULL_S``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from moto.core.models import DEFAULT_ACCOUNT_ID
from moto.ecr.models import ecr_backends

from capserve.core.spec_checks import registry_host

PULL_BYTES_PER_S = 250e6  # 250 MB/s: a 20 GB vLLM image in 80 s of cluster time
UNKNOWN_PULL_S = 0.12
_ECR = re.compile(
    r"^(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com/(?P<repo>[^:@]+)"
    r"(?::(?P<tag>[\w][\w.-]{0,127}))?(?:@(?P<digest>sha256:[0-9a-f]{64}))?$"
)


class PullError(Exception):
    """The pull failed; the message is containerd's."""


@dataclass(frozen=True)
class Pulled:
    size_bytes: int
    seconds: float  # cluster seconds


def pull_image(image: str, node: str) -> Pulled:
    """Pull ``image`` onto ``node``: its size and how long it takes, or PullError as containerd words it."""
    del node  # every node reaches every registry here (for now)
    host = registry_host(image)
    if host is not None and not any(mark in host for mark in ".:") and host != "localhost":
        # A dotless upper-case first component is a registry host to containerd (the rule the spec refuses it
        # by, capserve.core.spec_checks.registry_host), and no DNS resolves it.
        raise PullError(
            f'failed to pull and unpack image "{image}": failed to resolve reference "{image}": failed to do '
            f"request: Head \"https://{host}/v2/\": dial tcp: lookup {host}: no such host"
        )
    found = _ECR.match(image)
    if found is None or found["account"] != DEFAULT_ACCOUNT_ID:
        return Pulled(size_bytes=0, seconds=UNKNOWN_PULL_S)
    size = _ecr_image_size(found["region"], found["repo"], found["tag"], found["digest"])
    if size is None:
        raise PullError(
            f'failed to pull and unpack image "{image}": failed to resolve reference "{image}": {image}: not found'
        )
    return Pulled(size_bytes=size, seconds=size / PULL_BYTES_PER_S)


def _ecr_image_size(region: str, repository: str, tag: str | None, digest: str | None) -> int | None:
    """The image's size when the sandbox's ECR holds it (by digest, else by tag, ``latest`` by default)."""
    backend: Any = ecr_backends[DEFAULT_ACCOUNT_ID][region]
    held = backend.repositories.get(repository)
    if held is None:
        return None
    for candidate in list(held.images):
        if digest is not None and candidate.get_image_digest() != digest:
            continue
        if digest is None and (tag or "latest") not in candidate.image_tags:
            continue
        return int(candidate.get_image_size_in_bytes() or 0)
    return None


def go_duration(seconds: float) -> str:
    """``seconds`` as Go's ``time.Duration.String()`` writes it (the kubelet's events): 120ms, 1.594s, 1m20s."""
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    whole_minutes, rest = divmod(round(seconds, 3), 60)
    text = f"{rest:.3f}".rstrip("0").rstrip(".") + "s"
    if whole_minutes < 60:
        return f"{int(whole_minutes)}m{text}" if whole_minutes else text
    hours, minutes = divmod(int(whole_minutes), 60)
    return f"{hours}h{minutes}m{text}"
