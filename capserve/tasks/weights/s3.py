"""Publish verified files to S3: converge the bucket, skip objects already there with the same sha256.

Uploads are single PUTs with ``ChecksumSHA256`` (files are at most 5 GiB): S3 verifies the bytes on
arrival and stores a full-object SHA256 that HeadObject returns with ``ChecksumMode=ENABLED``; a
multipart upload would store a checksum of part checksums instead (S3 user guide, "Checking object
integrity"; docs/weights.md §5). That stored value is what makes "already there" checkable.
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

from capserve.core.errors import PermanentError
from capserve.core.weights.manifest import WeightsManifest
from capserve.core.weights.staging_job import CAMPAIGN_LABEL
from capserve.tasks.aws import client, convert, error_code, is_retryable
from capserve.tasks.resilience import s3_task

# HeadObject/HeadBucket have no body, so a missing object surfaces as the bare HTTP status code.
_NOT_FOUND = frozenset({"404", "NoSuchKey", "NotFound", "NoSuchBucket"})


def b64_sha256(hex_digest: str) -> str:
    return base64.b64encode(bytes.fromhex(hex_digest)).decode()


def create_bucket_request(bucket: str, region: str) -> dict[str, Any]:
    """CreateBucket: us-east-1 takes no LocationConstraint (S3 API reference, CreateBucket)."""
    request: dict[str, Any] = {"Bucket": bucket}
    if region != "us-east-1":
        request["CreateBucketConfiguration"] = {"LocationConstraint": region}
    return request


@s3_task(name="weights-ensure-bucket")
def ensure_bucket(bucket: str, region: str, campaign_id: str) -> bool:
    """Create the bucket (tagged with the campaign) if it does not exist; True when this call created it."""
    s3 = client("s3", region)
    try:
        s3.head_bucket(Bucket=bucket)
        return False
    except ClientError as exc:
        if error_code(exc) not in _NOT_FOUND:
            raise convert(exc, f"checking bucket {bucket}",
                          fix="the bucket exists but is not ours to use: choose another weights.s3_bucket") from exc
    try:
        s3.create_bucket(**create_bucket_request(bucket, region))
    except ClientError as exc:
        # Another run of this campaign created it between our HEAD and CREATE: that is convergence, not an error.
        if error_code(exc) != "BucketAlreadyOwnedByYou":
            raise convert(exc, f"creating bucket {bucket} in {region}",
                          fix="bucket names are global: choose another weights.s3_bucket") from exc
    try:
        s3.put_bucket_tagging(Bucket=bucket, Tagging={"TagSet": [{"Key": CAMPAIGN_LABEL, "Value": campaign_id}]})
    except ClientError as exc:
        raise convert(exc, f"tagging bucket {bucket}") from exc
    return True


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
