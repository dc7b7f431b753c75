"""Resolving where a campaign's things live (``capserve.core.locations``) needs one fact from AWS: the account."""

from __future__ import annotations

from botocore.exceptions import BotoCoreError, ClientError

from capserve.core.locations import BucketLocation, Locations, records_location, resolve_locations
from capserve.core.record import RecordRef
from capserve.core.settings import RecordSettings
from capserve.core.spec import CampaignSpec
from capserve.tasks.aws import client, convert
from capserve.tasks.resilience import aws_task


def account_id(region: str) -> str:
    """The caller's AWS account (STS GetCallerIdentity needs no permission)."""
    try:
        return str(client("sts", region).get_caller_identity()["Account"])
    except (ClientError, BotoCoreError) as exc:
        raise convert(exc, "finding the AWS account (sts:GetCallerIdentity)", fix="check the AWS credentials") from exc


def locations_for(spec: CampaignSpec, records: RecordSettings) -> Locations:
    """Where ``spec``'s record, weights and capacity live (asks AWS the account only when a name needs it)."""
    needs_account = records.bucket is None
    region = records.region or spec.capacity.regions[0]
    return resolve_locations(spec, records, account_id=account_id(region) if needs_account else None)


@aws_task(name="locate-campaign")
def locate(spec: CampaignSpec, records: RecordSettings) -> Locations:
    """``locations_for`` as a task (retried like any AWS control-plane call)."""
    return locations_for(spec, records)


@aws_task(name="locate-records")
def locate_records(region: str, records: RecordSettings) -> BucketLocation:
    """The records bucket of the campaigns whose home region is ``region`` (no spec needed)."""
    return records_location(records, region=region, account_id=None if records.bucket else account_id(region))


def record_ref(spec: CampaignSpec, records: RecordSettings) -> RecordRef:
    """Where ``spec``'s campaign record lives (and how patiently it is written)."""
    return RecordRef(
        campaign_id=spec.campaign_id,
        location=locations_for(spec, records).records,
        write_attempts=records.write_attempts,
    )
