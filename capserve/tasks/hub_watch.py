"""What the Hub watcher reads and writes: the campaign records in S3, branch heads on the Hub, and the
per-(campaign, sha) markers that keep it from announcing a revision twice (docs/events.md §3)."""

from __future__ import annotations

from botocore.exceptions import ClientError

from capserve.core.errors import PermanentError
from capserve.core.hub_watch import published_marker_key
from capserve.core.locations import BucketLocation
from capserve.core.record import CampaignRecord
from capserve.tasks.aws import client, convert, error_code
from capserve.tasks.resilience import s3_task

_PREFIX = "capserve/campaigns/"
_ABSENT = frozenset({"NoSuchKey", "404", "NotFound", "NoSuchBucket"})


@s3_task("list-campaign-records")
def list_campaign_records(location: BucketLocation) -> list[CampaignRecord]:
    """Every campaign record in the records bucket (none when the bucket does not exist yet)."""
    s3 = client("s3", location.region)
    records: list[CampaignRecord] = []
    try:
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket=location.bucket, Prefix=_PREFIX)
        keys = [o["Key"] for page in pages for o in page.get("Contents", []) if o["Key"].endswith("/record.json")]
        for key in keys:
            body = s3.get_object(Bucket=location.bucket, Key=key)["Body"].read()
            try:
                records.append(CampaignRecord.model_validate_json(body))
            except ValueError as exc:
                raise PermanentError(
                    f"{location.uri(key)} is not a valid campaign record ({type(exc).__name__}): fix or delete it"
                ) from exc
    except ClientError as exc:
        if error_code(exc) in _ABSENT:
            return []
        raise convert(exc, f"listing campaign records in {location.uri(_PREFIX)}", fix="allow s3:ListBucket") from exc
    return records


@s3_task("revision-announced")
def was_announced(location: BucketLocation, campaign_id: str, sha: str) -> bool:
    key = published_marker_key(campaign_id, sha)
    try:
        client("s3", location.region).head_object(Bucket=location.bucket, Key=key)
    except ClientError as exc:
        if error_code(exc) in _ABSENT:
            return False
        raise convert(exc, f"reading {location.uri(key)}") from exc
    return True


@s3_task("mark-revision-announced")
def mark_announced(location: BucketLocation, campaign_id: str, sha: str) -> None:
    key = published_marker_key(campaign_id, sha)
    try:
        client("s3", location.region).put_object(Bucket=location.bucket, Key=key, Body=b"")
    except ClientError as exc:
        raise convert(exc, f"writing {location.uri(key)}", fix="allow s3:PutObject on the records bucket") from exc
