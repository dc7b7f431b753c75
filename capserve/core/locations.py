"""Where each of a campaign's durable things lives, decided in one place.

- **Records** (the campaign record, S3): ``settings.records.bucket`` in ``settings.records.region``,
  by default ``capserve-records-<account>-<region>`` in the spec's first capacity region. The default
  is derived from the account and the region alone, so a scheduled run given only a campaign id and a
  region finds the record without the spec.
- **Weights** (verified checkpoints, S3, shared across campaigns): ``weights.s3_bucket`` in
  ``weights.s3_region``, by default the first capacity region.
- **Capacity**: the regions searched for offerings (``capacity.regions``); the lease says which one won.

A bucket has exactly one region: naming the same bucket for records and weights in two regions is
refused here, before anything is created (that mix-up once created the shared bucket in the wrong
region, untagged).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from capserve.core.errors import SpecError
from capserve.core.settings import AWS_REGION, S3_BUCKET, RecordSettings
from capserve.core.spec import CampaignSpec

# Bucket purposes, as the value of the PURPOSE_TAG on buckets capserve creates.
RECORDS = "campaign-records"
WEIGHTS = "weights"
PURPOSE_TAG = "capserve.io/purpose"


class BucketLocation(BaseModel):
    """An S3 bucket and the region it lives in."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bucket: str = Field(pattern=S3_BUCKET, description="Bucket name.")
    region: str = Field(pattern=AWS_REGION, description="The bucket's region.")

    def uri(self, key: str = "") -> str:
        return f"s3://{self.bucket}/{key}"


class Locations(BaseModel):
    """Where one campaign's record, weights and capacity live."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    campaign_id: str = Field(min_length=1, max_length=64, description="The campaign.")
    records: BucketLocation = Field(description="Bucket of the campaign record.")
    weights: BucketLocation = Field(description="Bucket of the verified checkpoints.")
    capacity_regions: tuple[str, ...] = Field(min_length=1, max_length=16, description="Regions searched.")

    @model_validator(mode="after")
    def _one_region_per_bucket(self) -> Locations:
        if self.records.bucket == self.weights.bucket and self.records.region != self.weights.region:
            raise ValueError(
                f"bucket {self.records.bucket} cannot hold the records in {self.records.region} and the weights in "
                f"{self.weights.region}: a bucket has one region. Use another records bucket "
                "(CAPSERVE_RECORDS__BUCKET) or the same region for both"
            )
        return self


def default_records_bucket(account_id: str, region: str) -> str:
    """``capserve-records-<account>-<region>``: unique per account and region, well inside S3's 63 characters."""
    return f"capserve-records-{account_id}-{region}"


def records_location(records: RecordSettings, *, region: str, account_id: str | None) -> BucketLocation:
    """The records bucket for ``region`` (the campaign's home region); ``account_id`` is needed only when
    ``records.bucket`` is not set."""
    if records.bucket is not None:
        return BucketLocation(bucket=records.bucket, region=records.region or region)
    if account_id is None:
        raise ValueError("the default records bucket is named after the AWS account: pass account_id")
    home = records.region or region
    return BucketLocation(bucket=default_records_bucket(account_id, home), region=home)


def home_region(spec: CampaignSpec, records: RecordSettings) -> str:
    """The campaign's home region: where its record lives and what its scheduled runs are given."""
    return records.region or spec.capacity.regions[0]


def resolve_locations(spec: CampaignSpec, records: RecordSettings, *, account_id: str | None) -> Locations:
    """Every location of ``spec``'s campaign; SpecError when they contradict each other."""
    records_at = records_location(records, region=home_region(spec, records), account_id=account_id)
    try:
        return Locations(
            campaign_id=spec.campaign_id,
            records=records_at,
            weights=BucketLocation(bucket=spec.weights.s3_bucket, region=spec.weights_region),
            capacity_regions=tuple(spec.capacity.regions),
        )
    except ValidationError as exc:
        problems = "; ".join(str(err["msg"]).removeprefix("Value error, ") for err in exc.errors(include_url=False))
        raise SpecError(f"campaign {spec.campaign_id}: {problems}") from None
