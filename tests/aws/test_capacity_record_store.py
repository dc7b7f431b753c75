"""The campaign record in the sandbox's S3: created once, replaced only over the ETag we read, re-read on conflict.

moto 5.2.5 honours ``IfNoneMatch="*"`` and ``IfMatch`` on PutObject (412 PreconditionFailed), which these
tests rely on; it does not make check-and-write atomic the way S3 does.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import boto3
import pytest

from capserve.core.errors import PermanentError
from capserve.core.lease import Lease
from capserve.core.locations import BucketLocation
from capserve.core.record import CampaignRecord, RecordRef, record_key
from capserve.core.stages import Stage, StageStatus
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



def ref(bucket: str, campaign_id: str, attempts: int = 5) -> RecordRef:
    return RecordRef(
        campaign_id=campaign_id, location=BucketLocation(bucket=bucket, region=REGION), write_attempts=attempts
    )


def lease(reservation_id: str = "cr-0123456789abcdef0") -> Lease:
    return Lease(provider="ec2-capacity-block", region=REGION, availability_zone=f"{REGION}a",
                 reservation_id=reservation_id, start=NOW, end=NOW + timedelta(days=1),
                 instance_type="p6-b300.48xlarge", instance_count=1, upfront_fee=2832.0)


def test_create_only_once_then_replace_only_over_the_etag_read(sandbox: None) -> None:
    where = ref("rec-conditional", "c1")  # the bucket is missing: the first write creates it
    assert read_record(where) is None
    first = write_record(where, CampaignRecord.new("c1", NOW), etag=None)
    with pytest.raises(RecordConflictError):
        write_record(where, CampaignRecord.new("c1", NOW), etag=None)
    second = write_record(where, first.record.with_lease(lease(), offering_id="cbo-1", now=NOW), etag=first.etag)
    with pytest.raises(RecordConflictError):  # stale ETag: someone (we) wrote since
        write_record(where, first.record, etag=first.etag)
    stored = read_record(where)
    assert stored is not None and stored.etag == second.etag and stored.record.lease == lease()
    tags = boto3.client("s3", region_name=REGION).get_bucket_tagging(Bucket="rec-conditional")["TagSet"]
    assert {"Key": "capserve.io/purpose", "Value": "campaign-records"} in tags


def test_update_rereads_and_reapplies_after_a_conflict(sandbox: None) -> None:
    where = ref("rec-update", "c2", attempts=3)
    write_record(where, CampaignRecord.new("c2", NOW), etag=None)
    raced = []

    def change(record: CampaignRecord) -> CampaignRecord:
        if not raced:  # another writer sneaks in between our read and our write, once
            raced.append(True)
            stored = read_record(where)
            assert stored is not None
            write_record(where, stored.record.model_copy(update={"offering_id": "theirs"}), etag=stored.etag)
        return record.with_lease(lease(), offering_id=record.offering_id, now=NOW)

    result = update_record(where, [change])
    assert result.offering_id == "theirs" and result.lease == lease()


def test_save_lease_records_the_stage_and_load_reads_it_back(sandbox: None) -> None:
    where = ref("rec-tasks", "c3")
    saved = save_lease.fn(where, lease(), "cbo-9")
    entry = saved.stages[Stage.ACQUIRE]
    assert entry.status is StageStatus.COMPLETED and entry.detail == "bought cr-0123456789abcdef0"
    assert load_record.fn(where) == saved


def test_a_corrupt_record_is_a_clear_permanent_error(sandbox: None) -> None:
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket="rec-corrupt", CreateBucketConfiguration={"LocationConstraint": REGION})
    s3.put_object(Bucket="rec-corrupt", Key=record_key("c4"), Body=b"{not json")
    with pytest.raises(PermanentError, match="not a valid campaign record"):
        read_record(ref("rec-corrupt", "c4"))


def test_a_record_of_schema_1_is_read_as_schema_2(sandbox: None) -> None:
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket="rec-v1", CreateBucketConfiguration={"LocationConstraint": REGION})
    old = {
        "schema_version": 1, "campaign_id": "c5", "lease": None, "offering_id": None, "updated_at": NOW.isoformat(),
        "stages": {"acquire": {"status": "stopped", "finished_at": NOW.isoformat(), "detail": "rejected by alice"}},
    }
    s3.put_object(Bucket="rec-v1", Key=record_key("c5"), Body=json.dumps(old).encode())
    stored = read_record(ref("rec-v1", "c5"))
    assert stored is not None and stored.record.schema_version == 2
    entry = stored.record.stages[Stage.ACQUIRE]
    assert (entry.status, entry.ended_at, entry.detail) == (StageStatus.STOPPED, NOW, "rejected by alice")
