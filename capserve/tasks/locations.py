"""Resolving where a campaign's things live (``capserve.core.locations``) needs one fact from AWS: the account."""

from __future__ import annotations

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    NoCredentialsError,
    PartialCredentialsError,
    ProfileNotFound,
)

from capserve.core.errors import SpecError
from capserve.core.locations import BucketLocation, Locations, records_location, resolve_locations
from capserve.core.record import RecordRef
from capserve.core.settings import RecordSettings
from capserve.core.spec import CampaignSpec
from capserve.tasks.aws import client, convert, error_code
from capserve.tasks.resilience import aws_task


def account_id(region: str) -> str:
    """The caller's AWS account (STS GetCallerIdentity needs no permission)."""
    try:
        return str(client("sts", region).get_caller_identity()["Account"])
    except (ClientError, BotoCoreError) as exc:
        raise convert(exc, "finding the AWS account (sts:GetCallerIdentity)", fix="check the AWS credentials") from exc


# STS answers these when the credentials themselves are wrong (STS API reference, "Common Errors").
BAD_CREDENTIAL_CODES = {"InvalidClientTokenId", "SignatureDoesNotMatch", "ExpiredToken", "UnrecognizedClientException"}

CREDENTIAL_CHAIN = (
    "boto3 looks in AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN), then AWS_PROFILE's entry in "
    "~/.aws/credentials and ~/.aws/config (SSO, assume-role, credential_process), then a container or instance role"
)


def caller_arn(region: str) -> str:
    """Who the AWS credentials belong to, asked before anything starts (STS GetCallerIdentity needs no permission).

    Missing or rejected credentials are the user's input to fix (``SpecError``: exit 2, one line); an STS that
    cannot be reached is transient (``RetryableError``: exit 4).
    """
    try:
        return str(client("sts", region).get_caller_identity()["Arn"])
    except (NoCredentialsError, PartialCredentialsError, ProfileNotFound) as exc:
        found = f"{type(exc).__name__}: {exc}"
        raise SpecError(f"no usable AWS credentials ({found}): {CREDENTIAL_CHAIN}; set one") from exc
    except ClientError as exc:
        if error_code(exc) in BAD_CREDENTIAL_CODES:
            raise SpecError(f"AWS refused the credentials (sts:GetCallerIdentity: {error_code(exc)}); "
                            f"{CREDENTIAL_CHAIN}: fix the one in use") from exc
        raise convert(exc, "checking the AWS credentials (sts:GetCallerIdentity)") from exc
    except BotoCoreError as exc:
        raise convert(exc, "checking the AWS credentials (sts:GetCallerIdentity)") from exc


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
