"""The sandbox's stand-in for ``crane`` and for the upstream registries it copies from (docs/sandbox.md §3).

    python -m capserve_sandbox.registry digest --platform linux/amd64 <ref>
    python -m capserve_sandbox.registry copy --platform linux/amd64 <src>@sha256:… <ecr registry>/<repo>:<tag>
    python -m capserve_sandbox.registry export --platform linux/amd64 <ref> -

The sandbox environment names this in ``CAPSERVE_REGISTRY_TOOL``, so ``capserve.tasks.image_mirror`` runs the
same commands it runs against crane. The upstream is ``UPSTREAM``: the few images the examples and tests name,
each an OCI image manifest whose layer sizes add up to the image's size; its digest is the sha256 of the
manifest's bytes (OCI image spec, "Descriptors": the digest is over the content's bytes). What crane refuses
is refused here with crane's words: an unknown tag or digest (``MANIFEST_UNKNOWN``, exit 1), a copy to a
registry the ``DOCKER_CONFIG`` holds no credentials for (``UNAUTHORIZED``), a copy into a repository ECR
does not have (``NAME_UNKNOWN``). The copy itself is ECR's ``PutImage`` of the manifest in the sandbox's moto
(the layers are not moved: the kubelet models the pull from the sizes). ``export`` writes, as ``crane export``
does, the image's flattened filesystem as a tar on stdout: here the stand-in's file list (``FILES``, empty files),
enough for what capserve and the kubelet read of it (the EFA stack: capserve.core.rollout.efa_image).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import re
import shlex
import sys
import tarfile
from pathlib import Path
from typing import Any

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
GB = 10**9
# Sizes are the sandbox's figures, not measurements: the serving image is "~20 GB" (docs/serving.md §9).
_IMAGES: dict[str, dict[str, int]] = {
    "docker.io/vllm/vllm-openai": {"kimi-k3": 20 * GB, "latest": 19 * GB, "v0.32.0": 18 * GB, "v0.33.0": 19 * GB},
    # A derived image as a campaign builds it for layouts across nodes: vLLM's plus the EFA installer's
    # libfabric and aws-ofi-nccl (docs/serving.md §5.2).
    "docker.io/capserve/vllm-openai-efa": {"kimi-k3": 21 * GB},
}
# What each repository's images hold, as far as anyone reads it. vLLM's Dockerfile (the vllm-openai target)
# installs NCCL through PyTorch's wheels and neither libfabric nor aws-ofi-nccl.
_VLLM_FILES = (
    "usr/local/bin/vllm",
    "usr/local/lib/python3.12/dist-packages/vllm/__init__.py",
    "usr/local/lib/python3.12/dist-packages/nvidia/nccl/lib/libnccl.so.2",
)
FILES: dict[str, tuple[str, ...]] = {
    "docker.io/vllm/vllm-openai": _VLLM_FILES,
    "docker.io/capserve/vllm-openai-efa": (
        *_VLLM_FILES,
        "opt/amazon/efa/lib/libfabric.so.1",
        "opt/amazon/aws-ofi-nccl/lib/libnccl-net-ofi.so",
        "opt/amazon/aws-ofi-nccl/lib/libnccl-net.so",
    ),
}
_LAYERS = 8  # large images are built in a handful of big layers


def _manifest(repository: str, tag: str, size: int) -> bytes:
    def blob(what: str) -> str:
        return "sha256:" + hashlib.sha256(f"{repository}:{tag}:{what}".encode()).hexdigest()

    shares = [size // _LAYERS] * (_LAYERS - 1)
    layers = [*shares, size - sum(shares)]
    document = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": blob("config"), "size": 12_000},
        "layers": [
            {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": blob(f"layer{i}"), "size": n}
            for i, n in enumerate(layers)
        ],
    }
    return json.dumps(document, separators=(",", ":"), sort_keys=True).encode()


def upstream() -> dict[str, dict[str, bytes]]:
    """repository → tag → manifest bytes."""
    return {repo: {tag: _manifest(repo, tag, size) for tag, size in tags.items()} for repo, tags in _IMAGES.items()}


def digest_of(manifest: bytes) -> str:
    return "sha256:" + hashlib.sha256(manifest).hexdigest()


def _normalise(reference: str) -> tuple[str, str | None, str | None]:
    """(repository with registry, tag, digest), with Docker Hub spelled docker.io/<path>."""
    rest, _, digest = reference.partition("@")
    first, slash, remainder = rest.partition("/")
    registry, path = (first, remainder) if slash and ("." in first or ":" in first) else ("docker.io", rest)
    if registry in ("index.docker.io", "registry-1.docker.io"):
        registry = "docker.io"
    tag = None
    if ":" in path:
        path, tag = path.rsplit(":", 1)
    if registry == "docker.io" and "/" not in path:
        path = f"library/{path}"
    return f"{registry}/{path}", tag, digest or None


def _find(reference: str) -> bytes | None:
    repository, tag, digest = _normalise(reference)
    tags = upstream().get(repository, {})
    if digest:
        return next((m for m in tags.values() if digest_of(m) == digest), None)
    return tags.get(tag or "latest")


def image_files(reference: str) -> tuple[str, ...]:
    """The files of the image ``reference`` names: upstream by tag or digest, or its ECR copy (same digest); ()
    for an image the stand-in does not know."""
    repository, tag, digest = _normalise(reference)
    for name, tags in upstream().items():
        if (digest and any(digest_of(m) == digest for m in tags.values())) or (
            not digest and name == repository and (tag or "latest") in tags
        ):
            return FILES.get(name, ())
    return ()


def _export(reference: str) -> int:
    if _find(reference) is None:
        return _unknown(reference)
    with tarfile.open(fileobj=sys.stdout.buffer, mode="w|") as tar:
        for name in image_files(reference):
            tar.addfile(tarfile.TarInfo(name), io.BytesIO(b""))
    return 0


def _unknown(reference: str) -> int:
    repository, tag, digest = _normalise(reference)
    _, path = repository.split("/", 1)
    which = digest or tag or "latest"
    print(
        f"Error: GET https://index.docker.io/v2/{path}/manifests/{which}: MANIFEST_UNKNOWN: manifest unknown; "
        f"unknown tag={which}",
        file=sys.stderr,
    )
    return 1


_ECR = re.compile(
    r"^(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com/(?P<repo>[^:@]+):(?P<tag>.+)$"
)


def _copy(source: str, destination: str) -> int:
    manifest = _find(source)
    if manifest is None:
        return _unknown(source)
    found = _ECR.match(destination)
    if found is None:
        print(f"Error: the sandbox's registry copies only into ECR, not {destination}", file=sys.stderr)
        return 1
    registry = destination.split("/", 1)[0]
    config = Path(os.environ.get("DOCKER_CONFIG") or Path.home() / ".docker") / "config.json"
    auths = json.loads(config.read_text()).get("auths", {}) if config.is_file() else {}
    if registry not in auths:
        print(
            f"Error: PUT https://{registry}/v2/{found['repo']}/manifests/{found['tag']}: UNAUTHORIZED: "
            "authentication required",
            file=sys.stderr,
        )
        return 1
    import boto3  # here, not at the top: ``digest`` needs no AWS
    from botocore.exceptions import ClientError

    ecr: Any = boto3.client("ecr", region_name=found["region"])
    try:
        ecr.put_image(
            repositoryName=found["repo"],
            imageManifest=manifest.decode(),
            imageTag=found["tag"],
            imageManifestMediaType=OCI_MANIFEST,
        )
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        if code == "RepositoryNotFoundException":
            print(
                f"Error: PUT https://{registry}/v2/{found['repo']}/manifests/{found['tag']}: NAME_UNKNOWN: "
                f"The repository with name '{found['repo']}' does not exist",
                file=sys.stderr,
            )
            return 1
        if code != "ImageAlreadyExistsException":
            print(f"Error: {exc}", file=sys.stderr)
            return 1
    return 0


def registry_tool_command() -> str:
    """How ``CAPSERVE_REGISTRY_TOOL`` names this stand-in (the interpreter running the sandbox)."""
    return f"{shlex.quote(sys.executable)} -m capserve_sandbox.registry"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="crane (capserve sandbox)")
    commands = parser.add_subparsers(dest="command", required=True)
    digest = commands.add_parser("digest")
    digest.add_argument("--platform", default="linux/amd64")
    digest.add_argument("image")
    copy = commands.add_parser("copy")
    copy.add_argument("--platform", default="linux/amd64")
    copy.add_argument("source")
    copy.add_argument("destination")
    export = commands.add_parser("export")
    export.add_argument("--platform", default="linux/amd64")
    export.add_argument("image")
    export.add_argument("output", choices=["-"])
    args = parser.parse_args(argv)
    if args.platform != "linux/amd64":
        print(f"Error: no child with platform {args.platform} in the sandbox's images", file=sys.stderr)
        return 1
    if args.command == "copy":
        return _copy(args.source, args.destination)
    if args.command == "export":
        return _export(args.image)
    manifest = _find(args.image)
    if manifest is None:
        return _unknown(args.image)
    print(digest_of(manifest))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
