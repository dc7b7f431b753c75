"""Publish verified files to S3: converge the bucket, skip objects already there with the same sha256.

Uploads are single PUTs with ``ChecksumSHA256`` (files are at most 5 GiB): S3 verifies the bytes on
arrival and stores a full-object SHA256 that HeadObject returns with ``ChecksumMode=ENABLED``; a
multipart upload would store a checksum of part checksums instead (S3 user guide, "Checking object
integrity"; docs/weights.md §5). That stored value is what makes "already there" checkable.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence
from pathlib import Path

from botocore.exceptions import ClientError

from capserve.core.errors import PermanentError
from capserve.core.locations import WEIGHTS, BucketLocation
from capserve.core.progress import Progress
from capserve.core.weights.manifest import StagedFile, WeightsManifest, manifest_key
from capserve.tasks.aws import client, convert, error_code, is_retryable
from capserve.tasks.buckets import ensure_bucket
from capserve.tasks.parallel import map_bounded
from capserve.tasks.progress import ProgressReporter
from capserve.tasks.resilience import s3_task

# HeadObject/HeadBucket have no body, so a missing object surfaces as the bare HTTP status code.
_NOT_FOUND = frozenset({"404", "NoSuchKey", "NotFound", "NoSuchBucket"})


def b64_sha256(hex_digest: str) -> str:
    return base64.b64encode(bytes.fromhex(hex_digest)).decode()


@s3_task(name="weights-ensure-bucket")
def ensure_weights_bucket(location: BucketLocation, campaign_id: str) -> bool:
    """The weights bucket, created in its region and tagged when missing (the one bucket path); True when created."""
    return ensure_bucket(location, purpose=WEIGHTS, campaign_id=campaign_id)


@s3_task(name="weights-publish-file")
def publish_file(bucket: str, key: str, path: Path, sha256: str, region: str) -> int:
    """Upload ``path`` to ``s3://bucket/key`` unless an object with the same size and SHA256 is there; bytes sent."""
    s3 = client("s3", region)
    size = path.stat().st_size
    if size > 5 * 1024**3:
        raise PermanentError(f"{path} is {size} bytes: above the 5 GiB single-PUT limit; re-shard into smaller files")
    checksum = b64_sha256(sha256)
    try:
        head = s3.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
        if head.get("ContentLength") == size and head.get("ChecksumSHA256") == checksum:
            return 0
    except ClientError as exc:
        if error_code(exc) not in _NOT_FOUND:
            raise convert(exc, f"checking s3://{bucket}/{key}") from exc
    try:
        with open(path, "rb") as body:
            # ChecksumAlgorithm with the precomputed value: S3 checks the bytes and stores the full-object SHA256.
            s3.put_object(Bucket=bucket, Key=key, Body=body, ChecksumAlgorithm="SHA256",
                          ChecksumSHA256=checksum, Metadata={"sha256": sha256})
    except ClientError as exc:
        if error_code(exc) in ("BadDigest", "InvalidRequest") and not is_retryable(exc):
            raise PermanentError(f"s3://{bucket}/{key}: S3 rejected the SHA256 of {path}: changed on disk?") from exc
        raise convert(exc, f"uploading s3://{bucket}/{key}") from exc
    return size


@s3_task(name="weights-publish-document")
def publish_document(bucket: str, key: str, body: bytes, region: str) -> None:
    """Put a small JSON document (the manifest), with its SHA256 checked by S3."""
    digest = base64.b64encode(hashlib.sha256(body).digest()).decode()
    try:
        client("s3", region).put_object(Bucket=bucket, Key=key, Body=body, ChecksumAlgorithm="SHA256",
                                        ChecksumSHA256=digest, ContentType="application/json")
    except ClientError as exc:
        raise convert(exc, f"uploading s3://{bucket}/{key}") from exc


@s3_task(name="weights-read-manifest")
def read_manifest(manifest_uri: str, region: str) -> WeightsManifest:
    """The manifest the weights stage published (``s3://bucket/key``)."""
    bucket, _, key = manifest_uri.removeprefix("s3://").partition("/")
    try:
        body = client("s3", region).get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError as exc:
        raise convert(exc, f"reading {manifest_uri}", fix="run the weights stage for this layout first") from exc
    return WeightsManifest.model_validate_json(body)


def publish_checkpoint(
    location: BucketLocation,
    campaign_id: str,
    base: str,
    manifest: WeightsManifest,
    files: Sequence[tuple[StagedFile, Path]],
    parallelism: int,
) -> int:
    """Every staged file under ``s3://bucket/<base>/`` (at most ``parallelism`` uploads at once), then the
    manifest; returns the bytes sent (0 when everything was already there)."""
    ensure_weights_bucket(location, campaign_id)
    calls = [
        {"bucket": location.bucket, "key": f"{base}/{s.key}", "path": local, "sha256": s.sha256,
         "region": location.region}
        for s, local in files
    ]
    reporter, published = ProgressReporter(), [0]

    def one_more(_: int) -> None:  # the bytes a call sent: 0 for a file already there, which counts all the same
        published[0] += 1
        reporter.report(Progress("files published to S3", done=published[0], total=len(calls)))

    uploaded = map_bounded(publish_file, calls, parallelism, on_done=one_more)
    body = manifest.model_dump_json(indent=1).encode()
    publish_document(location.bucket, f"{base}/{manifest_key(manifest.layout_id)}", body, location.region)
    return sum(uploaded)


@s3_task(name="weights-verify-published")
def verify_published(manifest_uri: str, region: str) -> list[str]:
    """What is wrong with a published checkpoint: every file its manifest lists must be in S3 with the same size
    and stored SHA256 (HEAD requests only, no bytes read). Empty: it verifies."""
    bucket, _, manifest_path = manifest_uri.removeprefix("s3://").partition("/")
    s3 = client("s3", region)
    try:
        body = s3.get_object(Bucket=bucket, Key=manifest_path)["Body"].read()
    except ClientError as exc:
        if error_code(exc) in _NOT_FOUND:
            return [f"{manifest_uri} is gone"]
        raise convert(exc, f"reading {manifest_uri}") from exc
    manifest = WeightsManifest.model_validate_json(body)
    base = manifest_path.rsplit("/", 1)[0]
    problems = []
    for staged in manifest.files:
        key = f"{base}/{staged.key}"
        try:
            head = s3.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
        except ClientError as exc:
            if error_code(exc) in _NOT_FOUND:
                problems.append(f"s3://{bucket}/{key} is gone")
                continue
            raise convert(exc, f"checking s3://{bucket}/{key}") from exc
        if head.get("ContentLength") != staged.size or head.get("ChecksumSHA256") != b64_sha256(staged.sha256):
            problems.append(f"s3://{bucket}/{key} differs from the manifest (size or SHA256)")
    return problems
