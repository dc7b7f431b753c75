"""The campaign record in S3: one small JSON document per campaign, written with conditional writes.

S3 conditional writes (S3 user guide, "conditional-writes.html"): ``IfNoneMatch="*"`` creates the
object only if the key does not exist; ``IfMatch=<etag>`` replaces it only if nobody wrote since we
read it. Either failing answers 412 PreconditionFailed (409 ConditionalRequestConflict when two
writes race), and we re-read and re-apply the change. moto 5.2.5 honours both headers on PutObject
(checked in tests/aws/test_capacity_record_store.py), though without AWS's atomicity between check
and write.

Where the record lives is resolved once (``capserve.core.locations``, ``RecordRef``); a missing
records bucket is created through the one bucket path (``capserve.tasks.buckets``): in its region,
tagged.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError
from prefect.cache_policies import NO_CACHE

from capserve.core.approval import Approval
from capserve.core.capacity.result import AcquireResult
from capserve.core.errors import PermanentError, RetryableError
from capserve.core.lease import Lease
from capserve.core.locations import RECORDS, BucketLocation
from capserve.core.record import CampaignRecord, RecordRef, StageEntry
from capserve.core.rehearsal import RehearsalRecord, rehearsal_key
from capserve.core.stages import Stage, StageStatus
from capserve.tasks.aws import client, convert, error_code
from capserve.tasks.buckets import ensure_bucket
from capserve.tasks.resilience import s3_task
from capserve.tasks.the_clock import clock

CONFLICT_CODES = frozenset({"PreconditionFailed", "ConditionalRequestConflict"})
ABSENT_CODES = frozenset({"NoSuchKey", "NoSuchBucket", "404"})

RecordChange = Callable[[CampaignRecord], CampaignRecord]


class RecordConflictError(RetryableError):
    """Someone else wrote the record between our read and our write."""


@dataclass(frozen=True)
class StoredRecord:
    record: CampaignRecord
    etag: str


def read_record(ref: RecordRef) -> StoredRecord | None:
    """The record and its ETag, or None when there is none yet (no such key, or no bucket yet)."""
    s3 = client("s3", ref.location.region)
    try:
        response = s3.get_object(Bucket=ref.location.bucket, Key=ref.key)
    except ClientError as exc:
        if error_code(exc) in ABSENT_CODES:
            return None
        raise convert(exc, f"reading {ref.uri}") from exc
    body = response["Body"].read()
    try:
        record = CampaignRecord.model_validate_json(body)
    except ValueError as exc:
        raise PermanentError(
            f"{ref.uri} is not a valid campaign record ({exc.__class__.__name__}); "
            "fix or delete it (the cloud's tags stay the truth: a re-run adopts what exists)"
        ) from exc
    return StoredRecord(record=record, etag=str(response["ETag"]))


def write_record(ref: RecordRef, record: CampaignRecord, *, etag: str | None) -> StoredRecord:
    """Create (``etag=None``) or replace (the ETag we read) the record; a lost race raises RecordConflictError."""
    s3 = client("s3", ref.location.region)
    condition: dict[str, Any] = {"IfNoneMatch": "*"} if etag is None else {"IfMatch": etag}
    body = json.dumps(record.model_dump(mode="json"), indent=2, sort_keys=True).encode()
    request = {
        "Bucket": ref.location.bucket, "Key": ref.key, "Body": body, "ContentType": "application/json", **condition
    }
    try:
        try:
            response = s3.put_object(**request)
        except ClientError as exc:
            if error_code(exc) != "NoSuchBucket":
                raise
            ensure_bucket(ref.location, purpose=RECORDS, campaign_id=ref.campaign_id)
            response = s3.put_object(**request)
    except ClientError as exc:
        if error_code(exc) in CONFLICT_CODES or (etag is not None and error_code(exc) in ABSENT_CODES):
            raise RecordConflictError(f"{ref.uri} changed since it was read") from exc
        raise convert(exc, f"writing {ref.uri}", fix="check the role may s3:PutObject") from exc
    return StoredRecord(record=record, etag=str(response["ETag"]))


def update_record(ref: RecordRef, changes: Sequence[RecordChange]) -> CampaignRecord:
    """Read, apply ``changes`` in order, write conditionally; on a conflict read again and re-apply.

    The changes must be pure functions of the record: they may run more than once.
    """
    for _ in range(ref.write_attempts):
        stored = read_record(ref)
        current = stored.record if stored else CampaignRecord.new(ref.campaign_id, clock().now())
        for change in changes:
            current = change(current)
        try:
            return write_record(ref, current, etag=stored.etag if stored else None).record
        except RecordConflictError:
            continue
    raise RecordConflictError(f"campaign record {ref.uri}: {ref.write_attempts} conflicting writes in a row; re-run")


@s3_task(name="load-campaign-record", cache_policy=NO_CACHE)
def load_record(ref: RecordRef) -> CampaignRecord | None:
    stored = read_record(ref)
    return stored.record if stored else None


@s3_task(name="change-campaign-record", cache_policy=NO_CACHE)
def change_record(ref: RecordRef, changes: list[RecordChange]) -> CampaignRecord:
    """Apply ``changes`` (pure functions of the record, in order) to the stored record."""
    return update_record(ref, changes)


@s3_task(name="save-lease", cache_policy=NO_CACHE)
def save_lease(ref: RecordRef, lease: Lease, offering_id: str | None) -> CampaignRecord:
    """Put the lease into the campaign record (and the acquire stage as done), the moment it is known."""

    def change(record: CampaignRecord) -> CampaignRecord:
        now = clock().now()
        before = record.stage(Stage.ACQUIRE)
        entry = StageEntry(
            status=StageStatus.COMPLETED,
            started_at=before.started_at if before else None,
            ended_at=now,
            inputs_digest=before.inputs_digest if before else None,
            detail=f"{'adopted' if lease.adopted else 'bought'} {lease.reservation_id}",
        )
        return record.with_lease(lease, offering_id=offering_id, now=now).with_stage(Stage.ACQUIRE, entry, now=now)

    return update_record(ref, [change])


@s3_task(name="save-purchase", cache_policy=NO_CACHE)
def save_purchase(ref: RecordRef, purchase: AcquireResult) -> CampaignRecord:
    """Keep what the acquire stage bought, and how it chose it, for the reports of the runs that adopt it."""
    return update_record(ref, [lambda record: record.with_purchase(purchase, now=clock().now())])


@s3_task(name="save-stage", cache_policy=NO_CACHE)
def save_stage(ref: RecordRef, stage: Stage, entry: StageEntry) -> CampaignRecord:
    return update_record(ref, [lambda record: record.with_stage(stage, entry)])


@s3_task(name="save-approval", cache_policy=NO_CACHE)
def save_approval(ref: RecordRef, approval: Approval) -> CampaignRecord:
    return update_record(ref, [lambda record: record.with_approval(approval)])


@s3_task(name="load-rehearsal-record", cache_policy=NO_CACHE)
def load_rehearsal(location: BucketLocation, campaign_id: str, proof_digest: str) -> RehearsalRecord | None:
    """The rehearsal of ``campaign_id`` with this digest (``capserve.core.rehearsal``), or None when there is none."""
    key = rehearsal_key(campaign_id, proof_digest)
    s3 = client("s3", location.region)
    try:
        body = s3.get_object(Bucket=location.bucket, Key=key)["Body"].read()
    except ClientError as exc:
        if error_code(exc) in ABSENT_CODES:
            return None
        raise convert(exc, f"reading {location.uri(key)}") from exc
    try:
        return RehearsalRecord.model_validate_json(body)
    except ValueError as exc:
        raise PermanentError(
            f"{location.uri(key)} is not a valid rehearsal record ({exc.__class__.__name__}); delete it and "
            "rehearse again"
        ) from exc


@s3_task(name="save-rehearsal-record", cache_policy=NO_CACHE)
def save_rehearsal(location: BucketLocation, record: RehearsalRecord) -> str:
    """Write the rehearsal record (the latest rehearsal of a digest replaces the one before); returns its URI."""
    key = rehearsal_key(record.campaign_id, record.digest)
    body = json.dumps(record.model_dump(mode="json"), indent=2, sort_keys=True).encode()
    request = {"Bucket": location.bucket, "Key": key, "Body": body, "ContentType": "application/json"}
    s3 = client("s3", location.region)
    try:
        try:
            s3.put_object(**request)
        except ClientError as exc:
            if error_code(exc) != "NoSuchBucket":
                raise
            ensure_bucket(location, purpose=RECORDS, campaign_id=record.campaign_id)
            s3.put_object(**request)
    except ClientError as exc:
        raise convert(exc, f"writing {location.uri(key)}", fix="check the role may s3:PutObject") from exc
    return location.uri(key)
