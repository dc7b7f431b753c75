"""The campaign record in the sandbox's S3: created once, replaced only over the ETag we read, re-read on conflict.

moto 5.2.5 honours ``IfNoneMatch="*"`` and ``IfMatch`` on PutObject (412 PreconditionFailed), which these
tests rely on; it does not make check-and-write atomic the way S3 does.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import boto3
import pytest

from capserve.core.errors import PermanentError
from capserve.core.lease import Lease
from capserve.core.record import CampaignRecord, record_key
from capserve.sandbox.aws import moto_sandbox
from capserve.tasks.record_store import (
    RecordConflictError,
    load_record,
    read_record,
    save_lease,
    update_record,
    write_record,
)

REGION = "us-east-2"
NOW = datetime(2026, 12, 1, 11, 30, tzinfo=UTC)


@pytest.fixture(scope="module")
def sandbox() -> Iterator[None]:
    with moto_sandbox(REGION):
        yield


def lease(reservation_id: str = "cr-0123456789abcdef0") -> Lease:
    return Lease(provider="ec2-capacity-block", region=REGION, availability_zone=f"{REGION}a",
                 reservation_id=reservation_id, start=NOW, end=NOW + timedelta(days=1),
                 instance_type="p6-b300.48xlarge", instance_count=1, upfront_fee=2832.0)


def test_create_only_once_then_replace_only_over_the_etag_read(sandbox: None) -> None:
    bucket = "rec-conditional"  # missing: the first write creates it
    assert read_record(bucket, "c1", region=REGION) is None
    first = write_record(bucket, CampaignRecord.new("c1", NOW), etag=None, region=REGION)
    with pytest.raises(RecordConflictError):
        write_record(bucket, CampaignRecord.new("c1", NOW), etag=None, region=REGION)
    second = write_record(bucket, first.record.with_lease(lease(), offering_id="cbo-1", now=NOW),
                          etag=first.etag, region=REGION)
    with pytest.raises(RecordConflictError):  # stale ETag: someone (we) wrote since
        write_record(bucket, first.record, etag=first.etag, region=REGION)
    stored = read_record(bucket, "c1", region=REGION)
    assert stored is not None and stored.etag == second.etag and stored.record.lease == lease()


def test_update_rereads_and_reapplies_after_a_conflict(sandbox: None) -> None:
    bucket = "rec-update"
    write_record(bucket, CampaignRecord.new("c2", NOW), etag=None, region=REGION)
    raced = []

    def change(record: CampaignRecord) -> CampaignRecord:
        if not raced:  # another writer sneaks in between our read and our write, once
            raced.append(True)
            stored = read_record(bucket, "c2", region=REGION)
            assert stored is not None
            write_record(bucket, stored.record.model_copy(update={"offering_id": "theirs"}), etag=stored.etag,
                         region=REGION)
        return record.with_lease(lease(), offering_id=record.offering_id, now=NOW)

    result = update_record(bucket, "c2", change, region=REGION, attempts=3)
    assert result.offering_id == "theirs" and result.lease == lease()


def test_save_lease_records_the_stage_and_load_reads_it_back(sandbox: None) -> None:
    saved = save_lease.fn("rec-tasks", "c3", lease(), "cbo-9", REGION)
    assert saved.stages["acquire"].detail == "bought cr-0123456789abcdef0"
    assert load_record.fn("rec-tasks", "c3", REGION) == saved


def test_a_corrupt_record_is_a_clear_permanent_error(sandbox: None) -> None:
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket="rec-corrupt", CreateBucketConfiguration={"LocationConstraint": REGION})
    s3.put_object(Bucket="rec-corrupt", Key=record_key("c4"), Body=b"{not json")
    with pytest.raises(PermanentError, match="not a valid campaign record"):
        read_record("rec-corrupt", "c4", region=REGION)
