"""The serving image, mirrored into the block's region before the block and pulled by digest (pure).

Why a copy into a campaign ECR repository, not an ECR pull-through cache rule (docs/serving.md §9):

- a pull-through cache for Docker Hub (where ``vllm/vllm-openai`` lives) needs a Secrets Manager secret
  ``ecr-pullthroughcache/…`` with a Docker Hub account's token; a copy needs none (an anonymous pull, once,
  from the flow host, before the block);
- a pull-through cache fills on the first pull: without a warm-up that first pull is the nodes', on block
  time, and it needs ``ecr:CreateRepository`` and ``ecr:BatchImportUpstreamImage``, which the nodes' managed
  ``AmazonEC2ContainerRegistryReadOnly`` policy does not grant; warming it is a full pull anyway;
- nvcr.io is not an upstream a pull-through cache rule accepts; a copy takes any registry.

A registry copy (``crane copy``) keeps the manifest bytes, so the digest in ECR is the upstream's: the record
keeps it and the pods pull ``<account>.dkr.ecr.<region>.amazonaws.com/<repository>@sha256:…``.

Reference grammar: distribution/reference (``[host[:port]/]path[:tag][@digest]``; the first component is a
host when it has a ``.`` or ``:`` or is ``localhost``; Docker Hub is ``docker.io`` and one-component paths
are under ``library/``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from capserve.core.errors import SpecError

DIGEST = r"^sha256:[0-9a-f]{64}$"
DOCKER_HUB = "docker.io"

_PATH_COMPONENT = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")
_TAG = re.compile(r"^[\w][\w.-]{0,127}$")
# ECR API reference, CreateRepository: repositoryName, 2-256 characters of this pattern.
_ECR_REPOSITORY = re.compile(r"^(?:[a-z0-9]+(?:[._-][a-z0-9]+)*/)*[a-z0-9]+(?:[._-][a-z0-9]+)*$")


class ImageRef(BaseModel):
    """One image reference, split into its parts (the registry always named)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    registry: str = Field(min_length=1, max_length=255, description="Registry host (docker.io for Docker Hub).")
    path: str = Field(min_length=1, max_length=255, description="Repository path in the registry.")
    tag: str | None = Field(None, max_length=128, description="The tag, if any.")
    digest: str | None = Field(None, pattern=DIGEST, description="The digest, if any.")

    @property
    def repository(self) -> str:
        """``registry/path``: what a tag or a digest is appended to."""
        return f"{self.registry}/{self.path}"

    @property
    def tagged(self) -> str:
        """The reference by tag (``latest`` when none is given, as docker and containerd assume)."""
        return f"{self.repository}:{self.tag or 'latest'}"

    def at(self, digest: str) -> str:
        return f"{self.repository}@{digest}"


def parse_image(reference: str) -> ImageRef:
    """``reference`` split into registry, path, tag and digest; SpecError naming what is wrong."""
    rest, _, digest = reference.partition("@")
    if digest and not re.match(DIGEST, digest):
        raise SpecError(f"serving.image {reference!r}: the digest must be 'sha256:' and 64 lowercase hex digits")
    first, slash, remainder = rest.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        registry, path_tag = first, remainder
    else:
        registry, path_tag = DOCKER_HUB, rest
    path, colon, tag = path_tag.rpartition(":") if ":" in path_tag else (path_tag, "", "")
    if colon and not _TAG.match(tag):
        raise SpecError(f"serving.image {reference!r}: tag {tag!r} is not a valid tag")
    if registry == DOCKER_HUB and "/" not in path:
        path = f"library/{path}"
    if not path or not all(_PATH_COMPONENT.match(part) for part in path.split("/")):
        raise SpecError(
            f"serving.image {reference!r}: the repository path must be lowercase letters, digits and . _ - "
            "separated by '/' (e.g. vllm/vllm-openai:kimi-k3)"
        )
    return ImageRef(registry=registry, path=path, tag=tag or None, digest=digest or None)


def mirror_repository(campaign_id: str, source: ImageRef) -> str:
    """The campaign's ECR repository for ``source``: ``capserve/<campaign>/<path>`` (a name is unique per
    account and region, so two campaigns never share one and teardown deletes only its own)."""
    name = f"capserve/{campaign_id.lower()}/{source.path}"
    if not (2 <= len(name) <= 256 and _ECR_REPOSITORY.match(name)):
        raise SpecError(f"serving.image {source.tagged!r}: {name!r} is not a valid ECR repository name")
    return name


def mirror_tag(source: ImageRef, digest: str) -> str:
    """The copy's tag: the source's tag and 12 hex digits of the digest. The repository's tags are immutable, so
    when the upstream tag moves to new bytes, the new copy needs a tag of its own (``kimi-k3-89e081398cba``)."""
    return f"{(source.tag or 'latest')[:100]}-{digest.removeprefix('sha256:')[:12]}"


def ecr_registry(account: str, region: str) -> str:
    """The private registry's host (ECR user guide, "Private registry concepts")."""
    return f"{account}.dkr.ecr.{region}.amazonaws.com"


class ImageMirrorResult(BaseModel):
    """What the image stage made: the report's ``image`` section and the record's outputs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str = Field(min_length=1, max_length=400, description="serving.image as the spec gives it.")
    design: Literal["ecr-copy"] = Field("ecr-copy", description="How the image reaches the region (module docstring).")
    digest: str = Field(pattern=DIGEST, description="The manifest digest, upstream and in ECR alike.")
    region: str = Field(min_length=1, max_length=32, description="The block's region (the repository's).")
    repository: str = Field(min_length=2, max_length=256, description="The campaign's ECR repository.")
    image: str = Field(min_length=1, max_length=400, description="What the pods pull: the ECR reference by digest.")
    size_bytes: int | None = Field(None, ge=0, description="ECR's imageSizeInBytes (compressed layers), if given.")
    copied: bool = Field(description="False when ECR already held the digest (a re-run copies nothing).")
    created: tuple[str, ...] = Field(default=(), max_length=8, description="Resources this run created.")

    def report_section(self) -> dict[str, object]:
        return self.model_dump(mode="json")

    def markdown(self) -> str:
        size = f", {self.size_bytes / 1e9:.1f} GB" if self.size_bytes else ""
        done = "copied before the block" if self.copied else "already in ECR: nothing copied"
        made = f" Created: {', '.join(self.created)}." if self.created else ""
        return (
            f"`{self.source}` → `{self.image}` ({self.region}{size}; {done}).{made}\n\n"
            f"Digest `{self.digest}`: the pods pull this digest from the block's region.\n"
        )


_GO_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(h|ms|µs|us|ns|m|s)")
_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_PULLED = re.compile(
    r'^Successfully pulled image "(?P<image>[^"]+)" in (?P<took>\S+) \((?P<waiting>\S+) including waiting\)'
)


def go_duration_s(text: str) -> float | None:
    """Seconds of a Go ``time.Duration`` string (``313ms``, ``1.594s``, ``2m3.5s``, ``1h0m0s``)."""
    parts = _GO_DURATION_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(number) * _UNIT_S[unit] for number, unit in parts)


def pulled_seconds(message: str) -> tuple[str, float, float] | None:
    """(image, pull seconds, seconds including waiting) of a kubelet ``Pulled`` event's message.

    The kubelet's wording (pkg/kubelet/images/image_manager.go): ``Successfully pulled image "<image>" in
    <duration> (<duration> including waiting). Image size: <n> bytes.``; "already present on machine" is
    not a pull and gives None.
    """
    found = _PULLED.match(message)
    if found is None:
        return None
    took, waiting = go_duration_s(found["took"]), go_duration_s(found["waiting"])
    if took is None or waiting is None:
        return None
    return found["image"], took, waiting


class ImagePull(BaseModel):
    """How long the serving pods' image pull took, from the kubelet's ``Pulled`` events (slowest node)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    image: str = Field(min_length=1, max_length=400, description="The image pulled.")
    pod: str = Field(min_length=1, max_length=253, description="The pod whose pull took longest.")
    seconds: float = Field(ge=0, description="The pull itself.")
    including_waiting_s: float = Field(ge=0, description="Including the wait behind other pulls on the node.")
    pulls: int = Field(ge=1, description="Pods that pulled it (the others found it already present).")


def slowest_pull(events: list[dict[str, Any]], pods: dict[str, str], image: str) -> ImagePull | None:
    """The longest pull of ``image`` by one of ``pods`` (uid → name), from Kubernetes Event objects; None when
    none of them pulled it. Matched by uid: a pod of the same name from an earlier rollout is another pod."""
    pulls: list[tuple[float, float, str]] = []
    for event in events:
        involved = event.get("involvedObject") or event.get("involved_object") or {}
        if event.get("reason") != "Pulled" or involved.get("uid") not in pods:
            continue
        parsed = pulled_seconds(str(event.get("message") or ""))
        if parsed is not None and parsed[0] == image:
            pulls.append((parsed[1], parsed[2], pods[str(involved["uid"])]))
    if not pulls:
        return None
    took, waiting, pod = max(pulls)
    return ImagePull(image=image, pod=pod, seconds=took, including_waiting_s=waiting, pulls=len(pulls))


def pull_status(events: list[dict[str, Any]], pods: set[str]) -> dict[str, tuple[str, datetime | None]]:
    """Image → ("pulling" or "pulled", when its latest event says so), from the kubelet's ``Pulling``/``Pulled``
    events of the pods whose uids are ``pods``: pulled once every pod that began pulling it has pulled it (or found
    it present). The time is the event's ``lastTimestamp``, on the API server's clock: the block's."""
    pulling: dict[str, set[str]] = {}
    pulled: dict[str, set[str]] = {}
    latest: dict[str, datetime] = {}
    for event in events:
        involved = event.get("involvedObject") or event.get("involved_object") or {}
        uid = str(involved.get("uid"))
        image = _quoted_image(str(event.get("message") or ""))
        if uid not in pods or image is None:
            continue
        if event.get("reason") == "Pulling":
            pulling.setdefault(image, set()).add(uid)
        elif event.get("reason") == "Pulled":
            pulled.setdefault(image, set()).add(uid)
        at = _event_time(event)
        if at is not None and (image not in latest or at > latest[image]):
            latest[image] = at
    return {
        image: ("pulled" if pulling.get(image, set()) <= pulled.get(image, set()) else "pulling", latest.get(image))
        for image in sorted(set(pulling) | set(pulled))
    }


def _event_time(event: Mapping[str, Any]) -> datetime | None:
    """An Event's latest time (``lastTimestamp``, else ``eventTime``), or None when it has none or it is unreadable."""
    raw = event.get("lastTimestamp") or event.get("last_timestamp") or event.get("eventTime")
    if isinstance(raw, datetime):
        return raw
    try:
        return datetime.fromisoformat(str(raw).replace("Z", "+00:00")) if raw else None
    except ValueError:
        return None


def _quoted_image(message: str) -> str | None:
    """The image a kubelet pull event names: ``Pulling image "X"``, ``Successfully pulled image "X" in …``,
    ``Container image "X" already present on machine``."""
    match = re.search(r'image "([^"]+)"', message)
    return match.group(1) if match else None
