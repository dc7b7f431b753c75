"""The one way capserve makes sure an S3 bucket exists: in the region it was resolved to, tagged with why.

Both the records bucket and the weights bucket come through here (their locations are resolved once,
in ``capserve.core.locations``). A bucket that already exists in another region is refused rather
than used: a bucket has one region, and writing across regions would silently move data (and bills)
somewhere nobody looked for it.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from capserve.core.errors import PermanentError
from capserve.core.locations import PURPOSE_TAG, BucketLocation
from capserve.core.tags import CAMPAIGN_TAG
from capserve.tasks.aws import client, convert, error_code

# HeadBucket has no body, so a missing bucket surfaces as the bare HTTP status code.
_ABSENT = frozenset({"404", "NoSuchBucket", "NotFound"})


def create_bucket_request(bucket: str, region: str) -> dict[str, Any]:
    """CreateBucket: us-east-1 takes no LocationConstraint (S3 API reference, CreateBucket)."""
    request: dict[str, Any] = {"Bucket": bucket}
    if region != "us-east-1":
        request["CreateBucketConfiguration"] = {"LocationConstraint": region}
    return request


def bucket_tags(purpose: str, campaign_id: str) -> list[dict[str, str]]:
    """What the bucket is for, and which campaign created it (buckets are shared: teardown keeps them)."""
    return [{"Key": PURPOSE_TAG, "Value": purpose}, {"Key": CAMPAIGN_TAG, "Value": campaign_id}]


def ensure_bucket(location: BucketLocation, *, purpose: str, campaign_id: str) -> bool:
    """Create the bucket in its region, tagged, unless it exists there; True when this call created it."""
    s3 = client("s3", location.region)
    bucket = location.bucket
    try:
        try:
            head = s3.head_bucket(Bucket=bucket)
        except ClientError as exc:
            if error_code(exc) not in _ABSENT:
                fix = "the bucket exists but is not ours to use: choose another name"
                raise convert(exc, f"checking bucket {bucket}", fix=fix) from exc
        else:
            _same_region(location, head.get("BucketRegion"))
            return False
        try:
            s3.create_bucket(**create_bucket_request(bucket, location.region))
        except ClientError as exc:
            # Another run created it between our HEAD and CREATE: that is convergence, not an error.
            if error_code(exc) != "BucketAlreadyOwnedByYou":
                raise convert(
                    exc, f"creating bucket {bucket} in {location.region}", fix="bucket names are global: choose another"
                ) from exc
        s3.put_bucket_tagging(Bucket=bucket, Tagging={"TagSet": bucket_tags(purpose, campaign_id)})
    except (ClientError, BotoCoreError) as exc:
        raise convert(exc, f"bucket {bucket} in {location.region}") from exc
    return True


def _same_region(location: BucketLocation, actual: str | None) -> None:
    if actual and actual != location.region:
        raise PermanentError(
            f"bucket {location.bucket} is in {actual}, but it was resolved to {location.region}: set its region to "
            f"{actual} (weights.s3_region, or CAPSERVE_RECORDS__REGION for the records bucket) or choose another bucket"
        )
