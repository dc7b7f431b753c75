"""Where things live, in the sandbox's S3: records and weights each in the region they were resolved to, created
through one path that tags them, whatever order the stages touch them in; a bucket in another region is refused."""

from __future__ import annotations

from pathlib import Path

import boto3
import pytest

from capserve.core.errors import PermanentError
from capserve.core.locations import BucketLocation
from capserve.core.record import CampaignRecord, RecordRef
from capserve.core.settings import RecordSettings
from capserve.core.spec import CampaignSpec, load_spec
from capserve.tasks.buckets import ensure_bucket
from capserve.tasks.locations import locations_for
from capserve.tasks.record_store import update_record
from capserve.tasks.weights.s3 import ensure_weights_bucket

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kimi-k3-sandbox.yaml"



def two_region_spec(bucket: str) -> CampaignSpec:
    data = load_spec(EXAMPLE).model_dump(mode="json")
    data["capacity"]["regions"] = ["us-east-2", "us-west-2"]
    data["weights"] = {**data["weights"], "s3_bucket": bucket, "s3_region": "us-west-2"}
    return CampaignSpec.model_validate(data)


def region_and_tags(bucket: str) -> tuple[str, dict[str, str]]:
    s3 = boto3.client("s3", region_name="us-east-1")
    region = s3.get_bucket_location(Bucket=bucket)["LocationConstraint"] or "us-east-1"
    tags = {t["Key"]: t["Value"] for t in s3.get_bucket_tagging(Bucket=bucket)["TagSet"]}
    return region, tags


def test_record_first_then_weights_each_land_in_their_own_region_tagged(sandbox: None) -> None:
    spec = two_region_spec("two-region-weights")
    where = locations_for(spec, RecordSettings())
    ref = RecordRef(campaign_id=spec.campaign_id, location=where.records)
    # The record is written first (the acquire stage), the weights later: neither may take the other's region.
    update_record(ref, [lambda record: record.with_spec(spec, now=record.updated_at)])
    ensure_weights_bucket.fn(where.weights, spec.campaign_id)

    assert where.records.bucket == "capserve-records-123456789012-us-east-2"
    assert region_and_tags(where.records.bucket) == (
        "us-east-2", {"capserve.io/purpose": "campaign-records", "capserve.io/campaign": spec.campaign_id}
    )
    assert region_and_tags("two-region-weights") == (
        "us-west-2", {"capserve.io/purpose": "weights", "capserve.io/campaign": spec.campaign_id}
    )


def test_records_may_share_the_weights_bucket_when_the_region_agrees(sandbox: None) -> None:
    spec = two_region_spec("shared-bucket")
    where = locations_for(spec, RecordSettings(bucket="shared-bucket", region="us-west-2"))
    assert where.records == where.weights == BucketLocation(bucket="shared-bucket", region="us-west-2")
    stored = update_record(RecordRef(campaign_id=spec.campaign_id, location=where.records), [lambda r: r])
    assert isinstance(stored, CampaignRecord)
    assert region_and_tags("shared-bucket")[0] == "us-west-2"


def test_a_bucket_that_exists_in_another_region_is_refused_not_used(sandbox: None) -> None:
    s3 = boto3.client("s3", region_name="us-west-2")
    s3.create_bucket(Bucket="elsewhere-bucket", CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    with pytest.raises(PermanentError, match="elsewhere-bucket is in us-west-2, but it was resolved to us-east-2"):
        ensure_bucket(BucketLocation(bucket="elsewhere-bucket", region="us-east-2"), purpose="weights", campaign_id="c")
    assert ensure_bucket(BucketLocation(bucket="elsewhere-bucket", region="us-west-2"), purpose="weights",
                         campaign_id="c") is False  # there already, in its region: nothing to do
