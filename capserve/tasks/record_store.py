"""The campaign record in S3: one small JSON document per campaign, written with conditional writes.

S3 conditional writes (S3 user guide, "conditional-writes.html"): ``IfNoneMatch="*"`` creates the
object only if the key does not exist; ``IfMatch=<etag>`` replaces it only if nobody wrote since we
read it. Either failing answers 412 PreconditionFailed (409 ConditionalRequestConflict when two
writes race), and we re-read and re-apply the change. moto 5.2.5 honours both headers on PutObject
(checked in tests/aws/test_capacity_record_store.py), though without AWS's atomicity between check
and write.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError

from capserve.core.errors import PermanentError, RetryableError
from capserve.core.lease import Lease
from capserve.core.record import CampaignRecord, StageOutcome, record_key
from capserve.core.stages import Stage, StageStatus
from capserve.tasks.aws import client, convert, error_code
from capserve.tasks.resilience import s3_task

CONFLICT_CODES = frozenset({"PreconditionFailed", "ConditionalRequestConflict"})
ABSENT_CODES = frozenset({"NoSuchKey", "NoSuchBucket", "404"})


class RecordConflictError(RetryableError):
    """Someone else wrote the record between our read and our write."""


@dataclass(frozen=True)
class StoredRecord:
    record: CampaignRecord
    etag: str


def read_record(bucket: str, campaign_id: str, *, region: str) -> StoredRecord | None:
    """The record and its ETag, or None when there is none yet (no such key, or no bucket yet)."""
    s3 = client("s3", region)
    key = record_key(campaign_id)
    try:
        response = s3.get_object(Bucket=bucket, Key=key)
    except ClientError as exc:
        if error_code(exc) in ABSENT_CODES:
            return None
        raise convert(exc, f"reading s3://{bucket}/{key}") from exc
    body = response["Body"].read()
    try:
        record = CampaignRecord.model_validate_json(body)
    except ValueError as exc:
        raise PermanentError(
            f"s3://{bucket}/{key} is not a valid campaign record ({exc.__class__.__name__}); "
            "fix or delete it (the cloud's tags stay the truth: a re-run adopts what exists)"
        ) from exc
    return StoredRecord(record=record, etag=str(response["ETag"]))


def write_record(bucket: str, record: CampaignRecord, *, etag: str | None, region: str) -> StoredRecord:
    """Create (``etag=None``) or replace (the ETag we read) the record; a lost race raises RecordConflictError."""
    s3 = client("s3", region)
    key = record_key(record.campaign_id)
    condition: dict[str, Any] = {"IfNoneMatch": "*"} if etag is None else {"IfMatch": etag}
    body = json.dumps(record.model_dump(mode="json"), indent=2, sort_keys=True).encode()
    request = {"Bucket": bucket, "Key": key, "Body": body, "ContentType": "application/json", **condition}
    try:
        try:
            response = s3.put_object(**request)
        except ClientError as exc:
            if error_code(exc) != "NoSuchBucket":
                raise
            _create_bucket(s3, bucket, region)
            response = s3.put_object(**request)
    except ClientError as exc:
        if error_code(exc) in CONFLICT_CODES or (etag is not None and error_code(exc) in ABSENT_CODES):
            raise RecordConflictError(f"s3://{bucket}/{key} changed since it was read") from exc
        raise convert(exc, f"writing s3://{bucket}/{key}", fix="check the role may s3:PutObject") from exc
    return StoredRecord(record=record, etag=str(response["ETag"]))


def _create_bucket(s3: Any, bucket: str, region: str) -> None:
    """Converge: the campaign's bucket is created on first use when missing (outside us-east-1 it needs a location)."""
    request: dict[str, Any] = {"Bucket": bucket}
    if region != "us-east-1":
        request["CreateBucketConfiguration"] = {"LocationConstraint": region}
    try:
        s3.create_bucket(**request)
    except ClientError as exc:
        if error_code(exc) != "BucketAlreadyOwnedByYou":
            raise


def update_record(
    bucket: str,
    campaign_id: str,
    change: Callable[[CampaignRecord], CampaignRecord],
    *,
    region: str,
    attempts: int,
) -> CampaignRecord:
    """Read, apply ``change``, write conditionally; on a conflict read again and re-apply (``change`` must be pure)."""
    for _ in range(attempts):
        stored = read_record(bucket, campaign_id, region=region)
        current = stored.record if stored else CampaignRecord.new(campaign_id, datetime.now(UTC))
        try:
            return write_record(bucket, change(current), etag=stored.etag if stored else None, region=region).record
        except RecordConflictError:
            continue
    raise RecordConflictError(f"campaign record {campaign_id}: {attempts} conflicting writes in a row; re-run")


@s3_task(name="load-campaign-record")
def load_record(bucket: str, campaign_id: str, region: str) -> CampaignRecord | None:
    stored = read_record(bucket, campaign_id, region=region)
    return stored.record if stored else None


@s3_task(name="save-lease")
def save_lease(
    bucket: str, campaign_id: str, lease: Lease, offering_id: str | None, region: str, attempts: int = 5
) -> CampaignRecord:
    """Put the lease (and the acquire stage's outcome) into the campaign record."""

    def change(record: CampaignRecord) -> CampaignRecord:
        now = datetime.now(UTC)
        detail = f"{'adopted' if lease.adopted else 'bought'} {lease.reservation_id}"
        outcome = StageOutcome(status=StageStatus.COMPLETED, finished_at=now, detail=detail)
        return record.with_lease(lease, offering_id=offering_id, now=now).with_stage(Stage.ACQUIRE, outcome)

    return update_record(bucket, campaign_id, change, region=region, attempts=attempts)


@s3_task(name="save-stage-outcome")
def save_stage_outcome(
    bucket: str, campaign_id: str, stage: Stage, outcome: StageOutcome, region: str, attempts: int = 5
) -> CampaignRecord:
    return update_record(
        bucket, campaign_id, lambda record: record.with_stage(stage, outcome), region=region, attempts=attempts
    )
