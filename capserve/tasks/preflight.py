"""The facts preflight judges, gathered read-only: nothing here creates, buys or writes anything in AWS.

``capserve.core.preflight`` decides; this module only looks: the regions botocore knows for the
partition, ``DescribeInstanceTypeOfferings`` in each (docs/preflight.md §1), the report folder (a probe
file, removed at once), the credential variables, the staging disk's free space and the Hub's listing of
the revision to download, and the existing reservation the spec names.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from botocore.exceptions import ClientError
from prefect.cache_policies import NO_CACHE

from capserve.core.cluster.efa import NetworkFacts, described_network_facts
from capserve.core.errors import CapserveError, SpecError
from capserve.core.preflight import PreflightFacts, ReservationWindow
from capserve.core.spec import CampaignSpec
from capserve.core.urls import parse_endpoint_url, parse_hub_endpoint
from capserve.core.weights.assembly import model_repo
from capserve.tasks.aws import client, convert, error_code, session
from capserve.tasks.capacity.reservations import describe_reservation_by_id
from capserve.tasks.clock import campaign_now
from capserve.tasks.resilience import aws_task, local_task
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


def gather_facts(spec: CampaignSpec, inputs: PreflightInputs, *, bucket_names: tuple[str, ...]) -> PreflightFacts:
    """Everything preflight judges, read-only (the report folder gets a probe file, removed at once)."""
    known = known_regions()
    asked = [r for r in spec.capacity.regions if r in known]
    answers = [offering_in_region(r, spec.capacity.instance_type) for r in asked]  # a handful of regions
    downloaded, present = download_size(spec, inputs)
    window, window_problem = reservation_window(spec)
    return PreflightFacts(
        now=campaign_now(),
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
    )
