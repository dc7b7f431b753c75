"""The serving image into the campaign's ECR repository in the block's region, before the block.

Why a copy and not a pull-through cache rule: ``capserve.core.rollout.image`` (docs/serving.md §9).

    resolve the digest ─► ECR repository (by name, tagged) ─► ECR holds the digest? ─► no: copy it

The copy is a registry tool's (``crane``, go-containerregistry): ``crane digest`` resolves the tag to the
platform's manifest digest, ``crane copy`` copies that manifest and its layers registry to registry "while
retaining the digest value" (crane's docs), so ECR's digest is the upstream's. Only the
``linux/amd64`` image is copied: every GPU instance type of the catalog is x86_64, and a whole multi-arch
index would double the copy. ``CAPSERVE_REGISTRY_TOOL`` names another binary with crane's ``digest``, ``copy``
and ``export`` commands (the sandbox puts its stand-in there). ``crane export`` writes the image's flattened
filesystem as a tar: preflight reads its member names for the EFA stack a multi-node layout needs
(``image_efa_stack``; capserve.core.rollout.efa_image).

ECR credentials reach the tool through a private, temporary ``DOCKER_CONFIG`` holding the 12-hour token of
``GetAuthorizationToken`` (ECR user guide, "Private registry authentication"); the token is registered as a
secret (never logged) and the directory is deleted when the copy ends. A re-run whose digest ECR already
holds creates nothing and copies nothing.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from prefect.cache_policies import NO_CACHE

from capserve.core.cluster.naming import campaign_tags, tag_list
from capserve.core.environ import REGISTRY_TOOL_ENV
from capserve.core.errors import PermanentError
from capserve.core.rollout.efa_image import EFA_STACK, efa_stack_found
from capserve.core.rollout.image import (
    DIGEST,
    ImageMirrorResult,
    ImageRef,
    ecr_registry,
    mirror_repository,
    mirror_tag,
    parse_image,
)
from capserve.core.rollout.settings import RolloutSettings
from capserve.core.tags import CAMPAIGN_TAG
from capserve.tasks import aws
from capserve.tasks.resilience import aws_task, local_task
from capserve.tasks.run_log import run_logger
from capserve.tasks.secrets import redactor, register_secret

PLATFORM = "linux/amd64"
COMPONENT = "serving-image"


def registry_tool() -> list[str]:
    """The registry tool's command (``crane`` unless ``CAPSERVE_REGISTRY_TOOL`` says otherwise)."""
    return shlex.split(os.environ.get(REGISTRY_TOOL_ENV) or "crane")


@local_task(name="resolve-image-digest", cache_policy=NO_CACHE)
def resolve_image_digest(image: str, settings: RolloutSettings | None = None) -> str:
    """The digest ``image`` names now (its ``linux/amd64`` manifest): preflight asks before anything is bought, so
    a tag the registry does not have is refused while refusing costs nothing."""
    source = parse_image(image)
    return source.digest or _resolve(source, (settings or RolloutSettings()).image_tool_timeout_s)


def _resolve(source: ImageRef, timeout_s: float) -> str:
    digest = _tool(["digest", "--platform", PLATFORM, source.tagged], what="resolve", timeout_s=timeout_s)
    if not re.match(DIGEST, digest):
        raise PermanentError(
            f"image resolve ({source.tagged}): the registry tool answered {digest[:100]!r}, not a sha256 digest"
        )
    return digest


@aws_task(name="mirror-image", cache_policy=NO_CACHE)
def mirror_image(
    campaign_id: str, image: str, region: str, settings: RolloutSettings | None = None
) -> ImageMirrorResult:
    """``image`` in ``campaign_id``'s ECR repository in ``region``, by digest (copied only when missing)."""
    timeout_s = (settings or RolloutSettings()).image_tool_timeout_s
    source = parse_image(image)
    repository = mirror_repository(campaign_id, source)
    ecr = aws.client("ecr", region)
    try:
        account, created = _ensure_repository(ecr, repository, campaign_id)
        digest = source.digest or _resolve(source, timeout_s)
        registry = ecr_registry(account, region)
        size = _held(ecr, repository, digest)
        copied = size is None
        if copied:
            destination = f"{registry}/{repository}:{mirror_tag(source, digest)}"
            run_logger(__name__).info("image: copying %s to %s (design: ecr-copy)", source.at(digest), destination)
            # A digest the spec pins is copied as it is (it may be a multi-platform index); a resolved one is
            # the linux/amd64 manifest, which --platform picks again.
            platform = [] if source.digest else ["--platform", PLATFORM]
            with _ecr_login(ecr, registry) as env:
                _tool(["copy", *platform, source.at(digest), destination], what="copy", timeout_s=timeout_s, env=env)
            size = _held(ecr, repository, digest)
            if size is None:
                raise PermanentError(
                    f"{registry}/{repository}: the copy of {source.at(digest)} ended, but ECR does not hold that digest"
                )
    except (ClientError, BotoCoreError) as exc:
        raise aws.convert(exc, f"ECR repository {repository} in {region}") from exc
    result = ImageMirrorResult(
        source=image, digest=digest, region=region, repository=repository, image=f"{registry}/{repository}@{digest}",
        size_bytes=size or None, copied=copied, created=tuple(created),
    )  # fmt: skip
    run_logger(__name__).info("image: pods pull %s (%s)", result.image, "copied" if copied else "already in ECR")
    return result



def _ensure_repository(ecr: Any, repository: str, campaign_id: str) -> tuple[str, list[str]]:
    """(account, what was created): the repository found by name and checked to be the campaign's, or made."""
    try:
        [found] = ecr.describe_repositories(repositoryNames=[repository])["repositories"]
    except ClientError as exc:
        if aws.error_code(exc) != "RepositoryNotFoundException":
            raise
        # Immutable tags: a tag in this repository always names the same bytes (mirror_tag puts the digest in it).
        made = ecr.create_repository(
            repositoryName=repository,
            imageTagMutability="IMMUTABLE",
            tags=tag_list(campaign_tags(campaign_id, COMPONENT, repository)),
        )
        return str(made["repository"]["registryId"]), [f"ecr-repository/{repository}"]
    listed = ecr.list_tags_for_resource(resourceArn=found["repositoryArn"])["tags"]
    tags = {t["Key"]: t["Value"] for t in listed}
    if tags.get(CAMPAIGN_TAG) != campaign_id:
        raise PermanentError(
            f"ECR repository {repository} exists but is not tagged {CAMPAIGN_TAG}={campaign_id}: "
            "delete or rename it, or give the campaign another name"
        )
    return str(found["registryId"]), []


def _held(ecr: Any, repository: str, digest: str) -> int | None:
    """The image's size when ECR holds ``digest`` in ``repository`` (0 when ECR gives none), else None."""
    try:
        [detail] = ecr.describe_images(repositoryName=repository, imageIds=[{"imageDigest": digest}])["imageDetails"]
    except ClientError as exc:
        if aws.error_code(exc) == "ImageNotFoundException":
            return None
        raise
    return int(detail.get("imageSizeInBytes") or 0)


@contextmanager
def _ecr_login(ecr: Any, registry: str) -> Iterator[dict[str, str]]:
    """The tool's environment, with a private DOCKER_CONFIG holding an ECR token for ``registry`` only."""
    [data] = ecr.get_authorization_token()["authorizationData"]
    token = str(data["authorizationToken"])  # base64 of "AWS:<password>", the form docker's config keeps
    register_secret(token, base64.b64decode(token).decode().partition(":")[2])
    with tempfile.TemporaryDirectory(prefix="capserve-registry-") as folder:
        config = Path(folder) / "config.json"
        config.touch(mode=0o600)
        config.write_text(json.dumps({"auths": {registry: {"auth": token}}}))
        yield {**os.environ, "DOCKER_CONFIG": folder}


@local_task(name="list-image-efa-stack", cache_policy=NO_CACHE)
def image_efa_stack(image: str, settings: RolloutSettings | None = None) -> frozenset[str]:
    """Which parts of the EFA stack ``image``'s own files hold: the names in ``crane export``'s tar of its
    ``linux/amd64`` filesystem. Reading stops once every part is found; an image that lacks one is read to its end
    (the whole image crosses this host once, before anything is bought)."""
    source = parse_image(image)
    args = ["export", "--platform", PLATFORM, source.at(source.digest) if source.digest else source.tagged, "-"]
    found: frozenset[str] = frozenset()
    try:
        process = subprocess.Popen([*registry_tool(), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # noqa: S603 - the registry tool and arguments built here, no shell
    except FileNotFoundError as exc:
        raise PermanentError(
            f"image files: {registry_tool()[0]!r} is not installed: install crane "
            f"(github.com/google/go-containerregistry) or name another tool in {REGISTRY_TOOL_ENV}"
        ) from exc
    with process:
        assert process.stdout is not None and process.stderr is not None  # noqa: S101 - narrows the type for mypy
        try:
            with tarfile.open(fileobj=process.stdout, mode="r|*") as tar:
                for member in tar:
                    found |= efa_stack_found([member.name])
                    if found == set(EFA_STACK):
                        process.kill()  # the rest of the image is not needed
                        return found
        except tarfile.TarError:
            pass  # judged by the tool's exit below
        error = process.stderr.read().decode(errors="replace")
        if process.wait(timeout=(settings or RolloutSettings()).image_tool_timeout_s) != 0:
            said = redactor().redact(error.strip())[-1500:]
            raise PermanentError(f"image files ({args[-2]}) could not be listed: {said}. Check serving.image")
    return found


def _tool(args: list[str], *, what: str, timeout_s: float, env: dict[str, str] | None = None) -> str:
    """Run the registry tool; its stdout, or a PermanentError with its (redacted) error output."""
    command = [*registry_tool(), *args]
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout_s, check=False)  # noqa: S603 - the registry tool and arguments built here, no shell
    except FileNotFoundError as exc:
        raise PermanentError(
            f"image {what}: {command[0]!r} is not installed: install crane (github.com/google/go-containerregistry) "
            f"or name another tool in {REGISTRY_TOOL_ENV}, or set serving.image_mirror: none"
        ) from exc
    if done.returncode != 0:
        said = redactor().redact(done.stderr.strip() or done.stdout.strip())[-1500:]
        raise PermanentError(f"image {what} ({' '.join(args[-2:])}) failed: {said}. Check serving.image")
    return done.stdout.strip()
