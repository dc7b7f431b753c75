"""The facts preflight judges, gathered read-only: nothing here creates, buys or writes anything in AWS.

``capserve.core.preflight`` decides; this module only looks: the regions botocore knows for the
partition, ``DescribeInstanceTypeOfferings`` in each (docs/preflight.md §1), the report folder (a probe
file, removed at once), the credential variables, the staging disk's free space and the Hub's listing of
the revision to download, the existing reservation the spec names, and the quotas the campaign's network (or a
rehearsal's on-demand instances) will count against, with their current usage (docs/preflight.md §3).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError
from prefect.cache_policies import NO_CACHE

from capserve.core.catalog import get_instance_type
from capserve.core.cluster.efa import NetworkFacts, described_network_facts
from capserve.core.errors import CapserveError, RetryableError, SpecError
from capserve.core.preflight import PreflightFacts, ReservationWindow
from capserve.core.quotas import (
    ELASTIC_IPS,
    NAT_GATEWAYS,
    NETWORK_NEEDS,
    VPCS,
    Quota,
    QuotaReading,
    on_demand_quota,
)
from capserve.core.spec import CampaignSpec
from capserve.core.urls import parse_endpoint_url, parse_hub_endpoint
from capserve.core.weights.assembly import model_repo
from capserve.tasks.aws import client, convert, error_code, session
from capserve.tasks.capacity.reservations import describe_reservation_by_id
from capserve.tasks.resilience import aws_task, local_task
from capserve.tasks.the_clock import clock
from capserve.tasks.weights.hub import hub_connection, list_repo_files, resolve_revision

# What DescribeInstanceTypeOfferings answers in a region the account has not opted into, or may not use.
REGION_REFUSED_CODES = frozenset({"OptInRequired", "AuthFailure", "UnauthorizedOperation", "InvalidClientTokenId"})


@dataclass(frozen=True)
class PreflightInputs:
    """What the run was given beyond the spec (flags or deployment parameters)."""

    out_dir: Path
    staging_dir: Path
    endpoint_url: str | None = None
    hub_endpoint: str | None = None
    credential_variables: tuple[str, ...] = ()  # names, never values
    hub_timeout_seconds: float = 30.0


def known_regions(partition: str = "aws") -> tuple[str, ...]:
    """The EC2 regions botocore's endpoint data lists for ``partition`` (offline: no call is made)."""
    return tuple(sorted(session().get_available_regions("ec2", partition_name=partition)))


@aws_task(name="preflight-instance-type-offering", cache_policy=NO_CACHE)
def offering_in_region(region: str, instance_type: str) -> str | None:
    """None when ``region`` offers ``instance_type``; else why not (not offered, region not enabled)."""
    plain = instance_type.removeprefix("ml.")
    ec2 = client("ec2", region)
    try:
        found = ec2.describe_instance_type_offerings(
            LocationType="region", Filters=[{"Name": "instance-type", "Values": [plain]}]
        )["InstanceTypeOfferings"]
    except ClientError as exc:
        if error_code(exc) in REGION_REFUSED_CODES:
            return f"the account cannot use {region} ({error_code(exc)}): enable the region or drop it"
        raise convert(exc, f"listing the instance types {region} offers") from exc
    return None if found else f"{plain} is not offered in {region}"


@aws_task(name="describe-instance-network", cache_policy=NO_CACHE)
def network_facts(region: str, instance_type: str) -> NetworkFacts:
    """What DescribeInstanceTypes says of the type's network cards and EFA interfaces now."""
    ec2 = client("ec2", region)
    try:
        described = ec2.describe_instance_types(InstanceTypes=[instance_type])["InstanceTypes"]
    except ClientError as exc:
        raise convert(exc, f"instance type {instance_type} in {region}") from exc
    return described_network_facts(described[0])


def out_dir_problem(out_dir: Path) -> str | None:
    """Why the report folder cannot be written (it is created if missing, and probed with a real file)."""
    if out_dir.exists() and not out_dir.is_dir():
        return f"report folder {out_dir} exists and is not a folder: give a folder for the report"
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out_dir, prefix=".capserve-preflight-"):
            pass
    except OSError as exc:
        return f"report folder {out_dir} is not writable ({exc.strerror or exc}): give a folder you can write to"
    return None


def url_problems(inputs: PreflightInputs) -> tuple[str, ...]:
    problems = []
    if inputs.endpoint_url is not None:
        try:
            parse_endpoint_url(inputs.endpoint_url, what="endpoint_url")
        except SpecError as exc:
            problems.append(str(exc))
    if inputs.hub_endpoint is not None:
        try:
            parse_hub_endpoint(inputs.hub_endpoint)
        except SpecError as exc:
            problems.append(str(exc))
    return tuple(problems)


def free_bytes(folder: Path) -> int:
    """Free bytes on the disk ``folder`` will be on (its nearest existing parent)."""
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    return shutil.disk_usage(existing).free


def present_bytes(folder: Path) -> int:
    """Bytes already under ``folder`` (a re-run downloads only what is missing)."""
    if not folder.is_dir():
        return 0
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


@local_task(name="preflight-download-size", cache_policy=NO_CACHE)
def download_size(spec: CampaignSpec, inputs: PreflightInputs) -> tuple[int, int]:
    """(bytes the Hub lists for the pinned revision, bytes of it already in the staging folder)."""
    repo = model_repo(spec.model)
    conn = hub_connection(inputs.hub_endpoint, None, inputs.hub_timeout_seconds)
    sha = resolve_revision(conn, repo, spec.model.revision)
    listing = list_repo_files(conn, repo, sha)
    return listing.bytes_total, present_bytes(inputs.staging_dir / repo / sha / "source")


def reservation_window(spec: CampaignSpec) -> tuple[ReservationWindow | None, str | None]:
    reservation_id = spec.capacity.reservation_id
    if reservation_id is None:
        return None, None
    try:
        found = describe_reservation_by_id(reservation_id, spec.capacity.regions[0])
    except CapserveError as exc:
        return None, f"{reservation_id} could not be read ({exc})"
    if found is None:
        return None, f"{reservation_id} does not exist in {spec.capacity.regions[0]}: check the id and the region"
    window = ReservationWindow(
        reservation_id=found.reservation_id, state=found.state.value, start=found.start, end=found.end
    )
    return window, None


def quota_value(region: str, quota: Quota) -> tuple[float | None, str]:
    """The quota's applied value (its default when none was ever applied), or None and why it could not be read.

    GetServiceQuota answers NoSuchResourceException for a quota without an applied value; the default then holds
    (GetAWSDefaultServiceQuota). A quota that cannot be read (no permission, a partition without the quota) is
    not judged: the permission check names a missing ``servicequotas:GetServiceQuota``."""
    quotas = client("service-quotas", region)
    asked = {"ServiceCode": quota.service_code, "QuotaCode": quota.code}
    try:
        try:
            return float(quotas.get_service_quota(**asked)["Quota"]["Value"]), ""
        except ClientError as exc:
            if error_code(exc) != "NoSuchResourceException":
                raise
            return float(quotas.get_aws_default_service_quota(**asked)["Quota"]["Value"]), ""
    except ClientError as exc:
        converted = convert(exc, f"reading quota {quota.code} in {region}")
        if isinstance(converted, RetryableError):
            raise converted from exc
        return None, error_code(exc)


def _nat_gateways_by_zone(ec2: Any) -> dict[str, int]:
    """Live NAT gateways per zone (deleted and failed ones count against no quota)."""
    live = [
        g for page in ec2.get_paginator("describe_nat_gateways").paginate(
            Filter=[{"Name": "state", "Values": ["pending", "available", "deleting"]}]
        ) for g in page.get("NatGateways", [])
    ]
    subnets = sorted({g["SubnetId"] for g in live if g.get("SubnetId")})
    zone_of = {
        s["SubnetId"]: s["AvailabilityZone"]
        for s in (ec2.describe_subnets(SubnetIds=subnets)["Subnets"] if subnets else [])
    }
    counts = {z["ZoneName"]: 0 for z in ec2.describe_availability_zones()["AvailabilityZones"]}
    for gateway in live:
        zone = zone_of.get(gateway.get("SubnetId", ""), "")
        counts[zone] = counts.get(zone, 0) + 1
    return counts


def _running_vcpus(ec2: Any, quota: Quota) -> int:
    """vCPUs of the running and pending instances that count against ``quota`` (its family)."""
    pages = ec2.get_paginator("describe_instances").paginate(
        Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}]
    )
    total = 0
    for page in pages:
        for reservation in page.get("Reservations", []):
            for instance in reservation.get("Instances", []):
                if on_demand_quota(instance["InstanceType"]) != quota:
                    continue
                cpu = instance.get("CpuOptions") or {}
                total += int(cpu.get("CoreCount", 0)) * int(cpu.get("ThreadsPerCore", 1))
    return total


@aws_task(name="preflight-quotas", cache_policy=NO_CACHE)
def quota_readings(region: str, *, network: bool, on_demand: tuple[str, int] | None) -> tuple[QuotaReading, ...]:
    """The quotas the campaign counts against in ``region``, read with their usage: the network's (``network``:
    a cluster is built) and, for a rehearsal, the on-demand vCPUs of ``on_demand`` = (instance type, count)."""
    ec2 = client("ec2", region)
    readings = []
    try:
        if network:
            used = {
                VPCS: len(ec2.describe_vpcs()["Vpcs"]),
                ELASTIC_IPS: len(ec2.describe_addresses(Filters=[{"Name": "domain", "Values": ["vpc"]}])["Addresses"]),
            }
            nat = _nat_gateways_by_zone(ec2)
            fullest = max(nat, key=lambda zone: (nat[zone], zone), default="")
            for quota, needed in NETWORK_NEEDS:
                limit, unread = quota_value(region, quota)
                if quota == NAT_GATEWAYS:  # the block may land in any zone: its NAT gateway goes there
                    where = f"{fullest} holds {nat.get(fullest, 0)}; the NAT gateway goes in the block's zone"
                    readings.append(QuotaReading(quota=quota, region=region, where=where, limit=limit,
                                                 used=nat.get(fullest, 0), needed=needed, unread=unread))
                else:
                    readings.append(QuotaReading(quota=quota, region=region, limit=limit, used=used[quota],
                                                 needed=needed, unread=unread))
        if on_demand is not None:
            instance_type, count = on_demand
            quota = on_demand_quota(instance_type)
            limit, unread = quota_value(region, quota)
            needed = get_instance_type(instance_type).vcpus * count
            readings.append(QuotaReading(quota=quota, region=region, where=f"{count} × {instance_type}", limit=limit,
                                         used=_running_vcpus(ec2, quota), needed=needed, unread=unread))
    except ClientError as exc:
        raise convert(exc, f"reading the usage of the campaign's quotas in {region}") from exc
    return tuple(readings)


def gather_facts(
    spec: CampaignSpec, inputs: PreflightInputs, *, bucket_names: tuple[str, ...], on_demand: bool = False
) -> PreflightFacts:
    """Everything preflight judges, read-only (the report folder gets a probe file, removed at once).

    ``on_demand``: a rehearsal, whose instances count against the account's on-demand vCPU quota."""
    known = known_regions()
    asked = [r for r in spec.capacity.regions if r in known]
    answers = [offering_in_region(r, spec.capacity.instance_type) for r in asked]  # a handful of regions
    downloaded, present = download_size(spec, inputs)
    window, window_problem = reservation_window(spec)
    network = spec.cluster.existing_cluster_name is None
    usage = (spec.capacity.instance_type, spec.capacity.instance_count) if on_demand else None
    # Every region a block may be bought in: the network is built in the block's region.
    quotas = tuple(q for r in asked for q in quota_readings(r, network=network, on_demand=usage))
    return PreflightFacts(
        now=clock().now(),
        known_regions=known,
        offering_regions=dict(zip(asked, answers, strict=True)),
        out_dir_problem=out_dir_problem(inputs.out_dir),
        url_problems=url_problems(inputs),
        unset_variables=tuple(name for name in inputs.credential_variables if not os.environ.get(name)),
        staging_dir=str(inputs.staging_dir),
        staging_free_bytes=free_bytes(inputs.staging_dir),
        download_bytes=downloaded,
        present_bytes=present,
        bucket_names=bucket_names,
        reservation=window,
        reservation_problem=window_problem,
        quotas=quotas,
    )
