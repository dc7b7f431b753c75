"""Preflight: everything that can be checked without spending, checked before the purchase, all at once.

A campaign that would fail after buying a block has lost the block's fee (a Capacity Block cannot be
cancelled: docs/aws-capacity.md). So before the acquire stage creates or buys anything, the campaign
gathers a few read-only facts (``capserve.tasks.preflight``) and this module judges them, collecting
**every** problem into one message, so a person fixes the spec once, not once per run:

- each region is known to the partition and offers the instance type (``DescribeInstanceTypeOfferings``);
  a region that does not offer it is only searched in vain, so it is a problem only when no region does;
- the report folder is writable, the endpoint and Hub URLs parse, the API-key variables are set;
- the local disk can hold what this host must download (the Hub's listing, with the plan's figure);
- the bucket names follow S3's rules (the spec's pattern cannot say all of them);
- the instance count fits a Capacity Block (64 per block: docs/aws-capacity.md §1.1); the account's VPC,
  Elastic IP and NAT gateway quotas (and a rehearsal's on-demand vCPUs) leave room for what the campaign
  creates (``capserve.core.quotas``, docs/preflight.md §3);
- the reservation (the offer length asked for, or the existing reservation's remaining window) is long
  enough for bring-up, the weights' staging (S3 → nodes, and Hub → S3 when the window is already open),
  vLLM's startup budget and the evaluation, before the drain point (the time model: docs/timeline.md), and
  leaves ``cluster.min_serving_minutes`` of serving after bring-up (bring-up's own rule);
- a layout across nodes gets the EFA interfaces its pods request, laid out from what ``DescribeInstanceTypes``
  says of the type now (``capserve.core.cluster.efa.layout_shortfall``, the rule the sandbox's EC2 enforces);
- a layout across nodes is served from an image whose own files hold the EFA stack (aws-ofi-nccl and libfabric:
  ``capserve.core.rollout.efa_image``), or NCCL would talk between the nodes over TCP sockets;
- the caller may make every AWS call the campaign's features need (``capserve.core.permissions``, simulated
  by IAM): every denied action in one problem;
- vLLM would start with the final command line the rollout renders: parsed by vLLM's own parser and cross-flag
  rules for the image's vLLM version (``capserve.core.rollout.command``), each refusal naming the field and the
  flag, never the value.

Pure: no SDK, no I/O. The facts are data; the decision is a list of strings.
"""

from __future__ import annotations

import ipaddress
import math
from datetime import timedelta

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from capserve.core.cluster.settings import BringUpSettings
from capserve.core.errors import SpecError
from capserve.core.planner.plan import ServingPlan
from capserve.core.quotas import QuotaReading, quota_problems
from capserve.core.rollout.command import serve_command_problems
from capserve.core.rollout.probes import startup_budget_s
from capserve.core.rollout.settings import StartupModel
from capserve.core.spec import CampaignSpec
from capserve.core.timeline import hub_to_s3_s, s3_to_node_s

# A Capacity Block holds at most 64 instances (docs/aws-capacity.md §1.1).
MAX_INSTANCES_PER_BLOCK = 64


class PreflightError(SpecError):
    """The campaign cannot start: one message listing every problem found before anything was bought."""

    def __init__(self, campaign_id: str, problems: list[str]) -> None:
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(
            f"preflight of campaign {campaign_id} found {len(self.problems)} problem(s); nothing was bought or "
            f"created:\n{lines}"
        )


class ReservationWindow(BaseModel):
    """An existing reservation the spec names, as AWS reports it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    reservation_id: str = Field(min_length=1, max_length=2048, description="cr-… id or training plan ARN.")
    state: str = Field(min_length=1, max_length=32, description="State as AWS reports it.")
    start: AwareDatetime = Field(description="Start of the window.")
    end: AwareDatetime = Field(description="End of the window (AWS kills instances 30 minutes earlier).")


class PreflightFacts(BaseModel):
    """What the preflight task found, read-only. ``None`` means "not asked" (nothing to check)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    now: AwareDatetime = Field(description="When the facts were gathered.")
    known_regions: tuple[str, ...] = Field(max_length=512, description="Regions the partition knows for EC2.")
    offering_regions: dict[str, str | None] = Field(
        default_factory=dict,
        max_length=512,
        description="Known region → None when it offers the instance type, else why not (not offered, not enabled).",
    )
    out_dir_problem: str | None = Field(None, max_length=2000, description="Why the report folder is not writable.")
    url_problems: tuple[str, ...] = Field((), max_length=16, description="URLs that do not parse, and why.")
    unset_variables: tuple[str, ...] = Field((), max_length=16, description="Credential variables named but unset.")
    staging_dir: str = Field("", max_length=4096, description="Where the checkpoint is downloaded.")
    staging_free_bytes: int | None = Field(None, ge=0, description="Free bytes on the staging folder's disk.")
    download_bytes: int | None = Field(None, ge=0, description="What the Hub lists for the pinned revision.")
    present_bytes: int = Field(0, ge=0, description="Of which already downloaded in the staging folder.")
    bucket_names: tuple[str, ...] = Field((), max_length=16, description="Bucket names the campaign will use.")
    reservation: ReservationWindow | None = Field(None, description="The existing reservation the spec names.")
    reservation_problem: str | None = Field(None, max_length=2000, description="Why it could not be read.")
    lifecycle_problem: str | None = Field(
        None, max_length=2000, description="Why HyperPod's lifecycle script cannot be put or found (docs/hyperpod.md)."
    )
    permission_problem: str | None = Field(
        None, max_length=20000, description="The AWS actions the caller may not call, all of them (docs/iam)."
    )
    quotas: tuple[QuotaReading, ...] = Field(
        (), max_length=64, description="The quotas the campaign counts against, with usage (docs/preflight.md §3)."
    )
    cluster_access_problem: str | None = Field(
        None, max_length=2000, description="The caller has no access entry on the spec's existing EKS cluster."
    )
    efa_layout_problem: str | None = Field(
        None, max_length=2000, description="Why the GPU nodes' interfaces would not carry the plan's EFA devices."
    )
    efa_image_problem: str | None = Field(
        None, max_length=2000, description="Why serving.image cannot serve a layout across nodes (docs/serving.md)."
    )


def bucket_name_problems(name: str) -> list[str]:
    """S3's general-purpose bucket naming rules (docs/preflight.md §2) that the spec's pattern cannot express."""
    problems = []
    if not 3 <= len(name) <= 63:
        problems.append(f"bucket name {name!r} must be 3 to 63 characters long (it has {len(name)})")
    if ".." in name or ".-" in name or "-." in name:
        problems.append(f"bucket name {name!r} must not contain '..', '.-' or '-.'")
    try:
        ipaddress.IPv4Address(name)
        problems.append(f"bucket name {name!r} must not look like an IP address")
    except ValueError:
        pass
    for prefix in ("xn--", "sthree-", "amzn-s3-demo-"):
        if name.startswith(prefix):
            problems.append(f"bucket name {name!r} must not start with {prefix!r} (reserved by S3)")
    for suffix in ("-s3alias", "--ol-s3", "--x-s3", "--table-s3", ".mrap"):
        if name.endswith(suffix):
            problems.append(f"bucket name {name!r} must not end with {suffix!r} (reserved by S3)")
    return problems


def time_needed(
    spec: CampaignSpec, plan: ServingPlan, bring_up: BringUpSettings, *, hub_to_s3_in_window: bool = False
) -> dict[str, timedelta]:
    """What a campaign needs of its reservation before the drain point, by part (the longest each may take).

    Bring-up: the waits bring-up allows (control plane and node group, or HyperPod in service); Hub → S3
    staging, only when the window is already open (otherwise it runs before the block starts); S3 → node
    staging: the time model's copy onto each node's NVMe (docs/timeline.md), times the startup budget's safety
    factor; startup: the startup probe's budget for the plan's shape and bytes on its instance type (cold: a first
    start compiles); the gate before traffic: its budget (the load profile runs after the switch, while serving).
    """
    if spec.cluster.kind == "hyperpod":
        bring_up_s = bring_up.cluster_active_timeout_s + bring_up.hyperpod_in_service_timeout_s
    elif spec.cluster.existing_cluster_name is not None:
        bring_up_s = bring_up.nodegroup_active_timeout_s
    else:
        bring_up_s = bring_up.cluster_active_timeout_s + bring_up.nodegroup_active_timeout_s
    node_bytes = plan.node_bytes
    margin = StartupModel().safety_factor
    startup_s = startup_budget_s(
        plan.compile_shape,
        node_bytes,
        warm=False,
        override_minutes=spec.serving.startup_budget_minutes,
        instance_type=plan.instance_type,
        storage=spec.weights.node_target,
        nodes=plan.nodes,
    )
    parts = {"bring-up": timedelta(seconds=bring_up_s)}
    if hub_to_s3_in_window:
        parts["Hub → S3 staging"] = timedelta(seconds=math.ceil(hub_to_s3_s(plan.weight_bytes) * margin))
    parts["S3 → node staging"] = timedelta(seconds=math.ceil(s3_to_node_s(node_bytes, plan.instance_type) * margin))
    parts["vLLM startup"] = timedelta(seconds=startup_s)
    parts["gate (smoke + quality)"] = timedelta(minutes=spec.evaluation.gate_budget_minutes)
    return parts


def preflight_problems(
    spec: CampaignSpec, plan: ServingPlan, facts: PreflightFacts, *, bring_up: BringUpSettings
) -> list[str]:
    """Every problem the facts show, each naming what to change; empty when the campaign may go on."""
    return [
        *_region_problems(spec, facts),
        *([facts.out_dir_problem] if facts.out_dir_problem else []),
        *facts.url_problems,
        *(f"environment variable {n} is not set (or empty): export it first" for n in facts.unset_variables),
        *_disk_problems(plan, facts),
        *(p for name in facts.bucket_names for p in bucket_name_problems(name)),
        *_capacity_problems(spec),
        *_window_problems(spec, plan, facts, bring_up),
        *([facts.lifecycle_problem] if facts.lifecycle_problem else []),
        *([facts.permission_problem] if facts.permission_problem else []),
        *serve_command_problems(plan, spec),
        *quota_problems(facts.quotas),
        *([facts.cluster_access_problem] if facts.cluster_access_problem else []),
        *([facts.efa_layout_problem] if facts.efa_layout_problem else []),
        *([facts.efa_image_problem] if facts.efa_image_problem else []),
    ]


def check_preflight(spec: CampaignSpec, plan: ServingPlan, facts: PreflightFacts, *, bring_up: BringUpSettings) -> None:
    """Raise ``PreflightError`` listing every problem, or return."""
    problems = preflight_problems(spec, plan, facts, bring_up=bring_up)
    if problems:
        raise PreflightError(spec.campaign_id, problems)


def _region_problems(spec: CampaignSpec, facts: PreflightFacts) -> list[str]:
    regions = spec.capacity.regions
    unknown = [r for r in regions if r not in facts.known_regions]
    problems = [
        f"capacity.regions: {r!r} is not a region of this AWS partition; use one of the regions EC2 lists "
        "(e.g. us-east-1, us-west-2)"
        for r in unknown
    ]
    known = [r for r in regions if r in facts.known_regions]
    offering = [r for r in known if r in facts.offering_regions and facts.offering_regions[r] is None]
    if known and not offering:
        why = "; ".join(f"{r}: {facts.offering_regions.get(r) or 'not asked'}" for r in known)
        problems.append(
            f"capacity.instance_type: no region of capacity.regions offers {spec.capacity.instance_type} ({why}); "
            "add a region that offers it"
        )
    if spec.weights.s3_region is not None and spec.weights.s3_region not in facts.known_regions:
        problems.append(f"weights.s3_region: {spec.weights.s3_region!r} is not a region of this AWS partition")
    return problems


def _disk_problems(plan: ServingPlan, facts: PreflightFacts) -> list[str]:
    if facts.staging_free_bytes is None:
        return []
    listed = facts.download_bytes if facts.download_bytes is not None else plan.weight_bytes
    needed = max(listed - facts.present_bytes, 0)
    if needed <= facts.staging_free_bytes:
        return []
    return [
        f"local disk: {_size(needed)} must be downloaded to {facts.staging_dir or 'the staging folder'} "
        f"(the revision lists {_size(listed)}, {_size(facts.present_bytes)} already there; the plan counts "
        f"{_size(plan.weight_bytes)} of weights for {plan.model}) but only {_size(facts.staging_free_bytes)} is "
        "free: free space there or point the staging folder at a larger disk"
    ]


def _capacity_problems(spec: CampaignSpec) -> list[str]:
    capacity = spec.capacity
    if capacity.provider == "ec2-capacity-block" and capacity.instance_count > MAX_INSTANCES_PER_BLOCK:
        return [
            f"capacity.instance_count: {capacity.instance_count} instances do not fit one Capacity Block "
            f"(at most {MAX_INSTANCES_PER_BLOCK}); split the campaign"
        ]
    return []


def _window_problems(
    spec: CampaignSpec, plan: ServingPlan, facts: PreflightFacts, bring_up: BringUpSettings
) -> list[str]:
    margin = timedelta(minutes=spec.teardown.drain_before_end_minutes)
    open_window = False
    if spec.capacity.reservation_id is not None:
        if facts.reservation_problem:
            return [f"capacity.reservation_id: {facts.reservation_problem}"]
        window = facts.reservation
        if window is None:
            return []
        open_window = window.start <= facts.now  # the checkpoint still has to reach S3, in paid time
        usable = window.end - margin - max(facts.now, window.start)
        what = f"reservation {window.reservation_id} ({window.state}, ends {window.end.isoformat()})"
    elif spec.capacity.duration_hours is not None:
        usable = timedelta(hours=spec.capacity.duration_hours) - margin
        what = f"a {spec.capacity.duration_hours} h reservation (capacity.duration_hours)"
    else:
        return []
    parts = time_needed(spec, plan, bring_up, hub_to_s3_in_window=open_window)
    needed = sum(parts.values(), timedelta(0))
    breakdown = " + ".join(f"{name} {_minutes(d)}" for name, d in parts.items())
    # Bring-up's own rule (core/cluster/deadline.py): it stops unless cluster.min_serving_minutes of serving
    # remain before drain once it is done. Judged here too, before the purchase, on the same figures.
    serving_left = usable - parts["bring-up"]
    min_serving = timedelta(minutes=spec.cluster.min_serving_minutes)
    problems = [] if serving_left >= min_serving else [
        f"cluster.min_serving_minutes {spec.cluster.min_serving_minutes}: {what} leaves "
        f"{_minutes(max(usable, timedelta(0)))} before the drain point and bring-up may take up to "
        f"{_minutes(parts['bring-up'])}, so only {_minutes(max(serving_left, timedelta(0)))} of serving would remain "
        "and bring-up would refuse on the paid block: lower cluster.min_serving_minutes or ask for a longer "
        "reservation"
    ]
    if usable >= needed:
        return problems
    return [*problems,
        f"{what} leaves {_minutes(max(usable, timedelta(0)))} before the drain point "
        f"(teardown.drain_before_end_minutes {spec.teardown.drain_before_end_minutes}), but the campaign needs up to "
        f"{_minutes(needed)} ({breakdown}): ask for a longer reservation, or lower serving.startup_budget_minutes "
        "or evaluation.gate_budget_minutes"
    ]


def _size(nbytes: int) -> str:
    if nbytes >= 10**12:
        return f"{nbytes / 10**12:.2f} TB"
    if nbytes >= 10**9:
        return f"{nbytes / 10**9:.1f} GB"
    return f"{nbytes / 10**6:.1f} MB"


def _minutes(delta: timedelta) -> str:
    return f"{math.ceil(delta.total_seconds() / 60)} min"

