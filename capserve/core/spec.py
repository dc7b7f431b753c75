"""The campaign spec: one YAML file says what to serve, on what, for how long, and how to judge it.

Every field is strict (unknown keys are errors), bounded and described, because a typo in a spec that
buys capacity costs real money. ``load_spec`` turns every problem into one ``SpecError`` whose message
names each field path and what is allowed there, never a traceback.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    StrictBool,
    StrictFloat,
    StrictInt,
    StringConstraints,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from capserve.core.catalog import get_instance_type
from capserve.core.catalog.entries import MODELS
from capserve.core.catalog.hardware import INSTANCE_TYPES
from capserve.core.cluster.access import IAM_PRINCIPAL_ARN
from capserve.core.cluster.eks_versions import kubernetes_version_problem
from capserve.core.cost.spec import CostSpec
from capserve.core.drain import DRAIN_BEFORE_END_MINUTES, HARD_TEARDOWN_BEFORE_END_MINUTES
from capserve.core.errors import SpecError
from capserve.core.evaluation.spec import EvaluationSpec
from capserve.core.instants import FORMAT as INSTANT_FORMAT
from capserve.core.instants import parse_instant
from capserve.core.plain_env import SECRET_HINT, argument_problems, env_problems
from capserve.core.settings import CampaignSettings
from capserve.core.spec_checks import (
    capacity_block_window_problems,
    catalog_id_problem,
    image_reference_problem,
    instance_type_problem,
    name_problem,
    non_finite_problems,
    open_loop_time_problem,
    s3_prefix_problem,
)
from capserve.core.strict_yaml import MAX_DOCUMENT_BYTES, Document, parse_document

# AWS begins terminating Capacity Block instances 30 minutes before the block ends
# (EC2 user guide, capacity-blocks-using.html); no teardown margin may be at or inside that line.
AWS_TERMINATION_LEAD = timedelta(minutes=30)

# Capacity Block durations: 1-day steps up to 14 days, then 7-day steps up to 182 days
# (EC2 user guide, capacity-blocks.html). Training plans take 1–182 days (SageMaker API reference).
MAX_RESERVATION_DAYS = 182

DNS_LABEL = r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$"
HUB_REPO = r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$"
AWS_REGION = r"^[a-z]{2}(-gov)?-[a-z]+-\d$"
S3_BUCKET = r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$"


def _instant(value: Any, info: ValidationInfo) -> Any:
    """A window time as ``capserve.core.instants`` reads it: absolute (RFC 3339) or 'now' / 'now+36h'.

    Scheduled campaigns ("every Monday, find a block in the next two weeks") need windows relative
    to when they run. Every relative time in one spec resolves against the same instant, taken from
    the validation context (``now``) or the wall clock.
    """
    if not isinstance(value, str):
        return value
    return parse_instant(value, now=(info.context or {}).get("now") or datetime.now(UTC))


WindowTime = Annotated[AwareDatetime, BeforeValidator(_instant)]
Region = Annotated[str, StringConstraints(pattern=AWS_REGION, max_length=32)]


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelRef(StrictModel):
    """Which checkpoint to serve: a catalog entry, or a Hub repo at a revision."""

    catalog: str | None = Field(
        None,
        description="Catalog model id, e.g. 'kimi-k3' (see `capserve plan --help`).",
        min_length=1,
        max_length=100,
    )
    repo: str | None = Field(
        None,
        description="Hugging Face repo id 'owner/name' (not a URL); overrides the catalog entry's repo.",
        max_length=200,
        pattern=HUB_REPO,
    )
    revision: str = Field(
        "main",
        description="Branch, tag or commit sha; pinned to a commit sha before anything is fetched.",
        min_length=1,
        max_length=100,
    )

    @field_validator("catalog")
    @classmethod
    def _known_catalog_model(cls, value: str | None) -> str | None:
        problem = None if value is None else catalog_id_problem("catalog model", value, MODELS)
        if problem:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _one_source(self) -> ModelRef:
        if self.catalog is None and self.repo is None:
            raise ValueError("give 'catalog' (a catalog model id) or 'repo' (a Hub repo 'owner/name')")
        return self


Provider = Literal["ec2-capacity-block", "sagemaker-training-plan", "existing-reservation"]
RankingPolicy = Literal["earliest-start", "cheapest-per-gpu-hour"]


class CapacitySpec(StrictModel):
    """Where the GPUs come from and what the campaign may spend on them."""

    provider: Provider = Field(description="How capacity is obtained.")
    instance_type: str = Field(
        description="EC2 instance type, e.g. 'p6-b300.48xlarge'.", min_length=1, max_length=64
    )
    instance_count: StrictInt = Field(
        1, ge=1, le=64, description="Instances in the reservation (AWS max 64 per block)."
    )
    regions: list[Region] = Field(
        min_length=1, max_length=16, description="Regions to search for offerings, searched concurrently."
    )
    earliest_start: WindowTime | None = Field(
        None,
        description="The reservation may start at or after this instant: ISO time with a timezone, 'now' or 'now+2d'.",
    )
    latest_end: WindowTime | None = Field(
        None, description="The reservation must end at or before this instant: ISO time with a timezone or 'now+14d'."
    )
    duration_hours: StrictInt | None = Field(
        None,
        ge=24,
        le=24 * MAX_RESERVATION_DAYS,
        description="Reservation length: whole days; beyond 14 days, whole weeks (Capacity Block rule).",
    )
    max_upfront_fee_usd: StrictFloat | None = Field(
        None, gt=0, le=100_000_000, description="Never buy an offering whose upfront fee is above this."
    )
    approval_threshold_usd: StrictFloat = Field(
        0,
        ge=0,
        le=100_000_000,
        description="A purchase above this fee waits for a person's approval; 0 asks for every purchase.",
    )
    policy: RankingPolicy = Field("earliest-start", description="How matching offerings are ranked.")
    reservation_id: str | None = Field(
        None,
        pattern=r"^(cr-[0-9a-f]{8,17}|arn:aws[a-z-]*:sagemaker:[a-z0-9-]+:\d{12}:training-plan/.+)$",
        description="For 'existing-reservation': the capacity reservation id (cr-…) or training plan ARN.",
    )
    require_rehearsal: StrictBool = Field(
        False,
        description="Refuse to buy without a passing rehearsal of this spec (`capserve rehearse SPEC`: the same "
        "path on on-demand capacity) recorded within rehearsal_valid_days (docs/rehearsal.md). Off by default.",
    )
    rehearsal_valid_days: StrictInt = Field(
        14, ge=1, le=90, description="How long a passing rehearsal counts for require_rehearsal, in days."
    )

    @field_validator("instance_type")
    @classmethod
    def _known_instance_type(cls, value: str) -> str:
        problem = instance_type_problem(value, INSTANCE_TYPES)
        if problem:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _provider_fields(self) -> CapacitySpec:
        if self.provider == "existing-reservation":
            if self.reservation_id is None:
                raise ValueError("provider 'existing-reservation' needs 'reservation_id' (cr-… or a training plan ARN)")
            return self
        missing = [
            name
            for name in ("earliest_start", "latest_end", "duration_hours", "max_upfront_fee_usd")
            if getattr(self, name) is None
        ]
        if missing:
            raise ValueError(f"provider {self.provider!r} needs {', '.join(missing)}")
        if self.reservation_id is not None:
            raise ValueError(f"'reservation_id' is only for provider 'existing-reservation', not {self.provider!r}")
        assert self.duration_hours is not None and self.earliest_start and self.latest_end  # noqa: S101 - narrows the type for mypy
        days, rest = divmod(self.duration_hours, 24)
        if rest or (self.provider == "ec2-capacity-block" and days > 14 and days % 7):
            raise ValueError(
                f"duration_hours={self.duration_hours}: Capacity Blocks last whole days up to 14 days "
                "(24..336 in steps of 24), then whole weeks (504, 672, … up to 4368)"
            )
        if self.latest_end - self.earliest_start < timedelta(hours=self.duration_hours):
            raise ValueError(
                f"the window {self.earliest_start.isoformat()} → {self.latest_end.isoformat()} is shorter than "
                f"duration_hours={self.duration_hours}: widen the window or shorten the duration"
            )
        if self.approval_threshold_usd > self.max_upfront_fee_usd:  # type: ignore[operator]
            raise ValueError(
                "approval_threshold_usd is above max_upfront_fee_usd: no purchase could ever need approval; "
                "lower the threshold or raise the budget"
            )
        return self


class ClusterSpec(StrictModel):
    """The Kubernetes cluster the GPUs join."""

    kind: Literal["eks", "hyperpod"] = Field("eks", description="EKS managed node group, or SageMaker HyperPod on EKS.")
    kubernetes_version: str = Field(
        "1.34", max_length=16, description="EKS Kubernetes minor version, one EKS supports (docs/eks-versions.md)."
    )
    existing_cluster_name: str | None = Field(
        None,
        min_length=1,
        max_length=100,
        pattern=r"^[0-9A-Za-z][A-Za-z0-9_-]*$",
        description="Use this existing cluster instead of creating one (nothing of it is deleted at teardown).",
    )
    min_serving_minutes: StrictInt = Field(
        120,
        ge=0,
        le=24 * 60,
        description="Refuse to bring up, or stop, when less serving time than this is left before drain.",
    )
    admin_principals: list[Annotated[str, StringConstraints(max_length=2048)]] = Field(
        default_factory=list,
        max_length=10,
        description="IAM role or user ARNs (arn:aws:iam::<account>:role/<name>) that get cluster-admin access "
        "entries besides the principal that creates the cluster: e.g. the role the scheduled drain/teardown runs "
        "and the reaper run as (docs/aws-network.md, \"Access\").",
    )

    @field_validator("kubernetes_version")
    @classmethod
    def _eks_version(cls, value: str, info: ValidationInfo) -> str:
        # A recorded spec is read again by its drain and teardown runs, after EKS may have retired the version
        # it was bought with: that must not stop a teardown. New specs are checked against today's table.
        problem = None if (info.context or {}).get("recorded") else kubernetes_version_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("admin_principals")
    @classmethod
    def _iam_principals(cls, value: list[str]) -> list[str]:
        for arn in value:
            odd = next((c for c in arn if not c.isascii() or not c.isprintable()), None)
            if odd is not None:
                # IAM's ARN and name grammar is ASCII (IAM user guide, "IAM identifiers"; docs/input.md).
                raise ValueError(
                    f"has the character U+{ord(odd):04X} ({unicodedata.name(odd, 'unnamed')}): IAM ARNs are ASCII "
                    "(letters, digits and _+=,.@-/:); retype the ARN, e.g. copy it from `aws iam get-role`"
                )
            if ":sts::" in arn:
                raise ValueError(
                    f"{arn!r} is an STS session ARN: give the IAM ARN of the role, arn:aws:iam::<account>:role/<name>"
                )
            if ":role/aws-service-role/" in arn:
                raise ValueError(f"{arn!r} is a service-linked role: EKS access entries cannot name one")
            if not re.match(IAM_PRINCIPAL_ARN, arn, re.ASCII):
                raise ValueError(
                    f"{arn!r} is not an IAM role or user ARN "
                    "(arn:aws:iam::<12-digit account>:role/<name> or :user/<name>)"
                )
        return value


# Options capserve once declared and cannot deliver (docs/input.md, "Refused options"): refused with
# what is supported and why, rather than accepted and left to fail on a paid block.
NO_FSX = (
    "'fsx' is not supported: capserve creates no FSx for Lustre file system, volume or claim for it, so the "
    "pods could never start; use 'nvme' (each node's instance-store NVMe, assembled as RAID0)"
)
NO_INTERNAL_NLB = (
    "'internal-nlb' is not supported: a LoadBalancer Service needs the AWS Load Balancer Controller, which "
    "capserve does not install, so no load balancer would be made; use 'port-forward' (through the API server)"
)


class WeightsSpec(StrictModel):
    """Where the checkpoint is staged on its way from the Hub to each node."""

    s3_bucket: str = Field(pattern=S3_BUCKET, description="S3 bucket that holds verified checkpoints.")
    s3_prefix: str = Field(
        "capserve/weights",
        max_length=512,
        pattern=r"^[A-Za-z0-9!_.*'()/-]*$",
        description="Key prefix; files land under <prefix>/<repo>/<sha>/.",
    )
    s3_region: str | None = Field(
        None, pattern=AWS_REGION, description="Region of the bucket; default: the first of capacity.regions."
    )
    node_target: Literal["nvme"] = Field(
        "nvme",
        description="Per-node copy target: the instance's local NVMe (RAID0). FSx for Lustre is not supported.",
    )

    @field_validator("s3_prefix")
    @classmethod
    def _clean_prefix(cls, value: str) -> str:
        problem = s3_prefix_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("node_target", mode="before")
    @classmethod
    def _no_fsx(cls, value: object) -> object:
        if value == "fsx":
            raise ValueError(NO_FSX)
        return value


class ServingSpec(StrictModel):
    """How vLLM serves the model."""

    image: str = Field("vllm/vllm-openai:latest", min_length=1, max_length=255, description="vLLM container image.")
    extra_args: list[Annotated[str, StringConstraints(max_length=4096)]] = Field(
        default_factory=list,
        max_length=64,
        description="Extra `vllm serve` arguments, appended after the ones derived from the plan; none may repeat "
        "or contradict those (the layout, lengths, KV dtype, model path, port and API key come from the plan).",
    )
    extra_env: dict[
        Annotated[str, StringConstraints(min_length=1, max_length=128)],
        Annotated[str, StringConstraints(max_length=4096)],
    ] = Field(
        default_factory=dict,
        max_length=64,
        description="Extra environment variables of the vLLM container (values are strings: quote numbers), set over "
        "the recipe's. Plain settings only: names or values that look like credentials are refused (use a "
        "Kubernetes Secret), and so are the variables the rollout sets itself.",
    )
    recipe: StrictBool = Field(
        True,
        description="Pass the catalog's vLLM recipe for the model and GPU family (capserve/core/catalog/recipes.py) "
        "before serving.extra_args; false: only the plan's arguments and serving.extra_args.",
    )
    replicas: StrictInt = Field(1, ge=1, le=64, description="Independent serving replicas (each a full model copy).")
    max_model_len: StrictInt | None = Field(
        None, ge=256, le=16 * 1024 * 1024, description="Context length to serve; default: the model's maximum."
    )
    max_num_seqs: StrictInt = Field(16, ge=1, le=4096, description="Concurrent sequences the KV budget must hold.")
    served_model_name: str | None = Field(
        None, min_length=1, max_length=200, description="Name clients ask for; default: the Hub repo id."
    )
    endpoint_access: Literal["port-forward"] = Field(
        "port-forward",
        description="How the campaign reaches the endpoint: a port-forward through the Kubernetes API server "
        "(nothing exposed). An internal Network Load Balancer is not supported.",
    )

    @field_validator("endpoint_access", mode="before")
    @classmethod
    def _no_nlb(cls, value: object) -> object:
        if value == "internal-nlb":
            raise ValueError(NO_INTERNAL_NLB)
        return value
    startup_budget_minutes: StrictInt | None = Field(
        None,
        ge=5,
        le=24 * 60,
        description="How long vLLM may take to start before the pod counts as failed; default: computed from the "
        "weights per node and whether the compile cache is warm (K3 cold: at least 90 minutes).",
    )
    image_mirror: Literal["ecr", "none"] = Field(
        "ecr",
        description="'ecr': before the block, copy the image into a campaign ECR repository in the block's region "
        "and pull it there by digest (docs/serving.md §9); 'none': the nodes pull serving.image from its registry.",
    )
    compile_cache: StrictBool = Field(
        True,
        description="Restore vLLM's compile/JIT/autotune caches from S3 before start and save them once ready, "
        "so the next reservation's first boot is warm.",
    )

    @field_validator("image")
    @classmethod
    def _pullable_image(cls, value: str) -> str:
        problem = image_reference_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("served_model_name")
    @classmethod
    def _visible_name(cls, value: str | None) -> str | None:
        problem = None if value is None else name_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("extra_args")
    @classmethod
    def _no_secrets_in_args(cls, value: list[str]) -> list[str]:
        problems = argument_problems(value, "serving.extra_args")
        if problems:
            raise ValueError("; ".join(problems))
        return value

    @field_validator("extra_env")
    @classmethod
    def _plain_env(cls, env: dict[str, str]) -> dict[str, str]:
        problems = env_problems(env)
        if problems:
            raise ValueError("; ".join(problems) + f". {SECRET_HINT}")
        return env


class TeardownSpec(StrictModel):
    """The window's scheduled runs: bring-up counted from the reservation's start, drain and hard teardown
    counted back from its end (docs/prefect.md §11)."""

    bring_up_lead_minutes: StrictInt = Field(
        0,
        ge=0,
        le=24 * 60,
        description="Start the scheduled serve run this long before the block starts (it waits for it to turn active).",
    )
    drain_before_end_minutes: StrictInt = Field(
        DRAIN_BEFORE_END_MINUTES,
        ge=31,
        le=24 * 60,
        description="Stop taking traffic this long before the reservation ends: by default AWS's 30 minutes plus "
        "the time to stop serving and to tear down what needs the nodes (docs/timeline.md §5).",
    )
    hard_teardown_before_end_minutes: StrictInt = Field(
        HARD_TEARDOWN_BEFORE_END_MINUTES,
        ge=31,
        le=24 * 60,
        description="Delete everything this long before the end; AWS starts terminating at end − 30 min.",
    )

    @model_validator(mode="after")
    def _ordered(self) -> TeardownSpec:
        if self.hard_teardown_before_end_minutes >= self.drain_before_end_minutes:
            raise ValueError(
                f"drain ({self.drain_before_end_minutes} min before end) must come before hard teardown "
                f"({self.hard_teardown_before_end_minutes} min before end): make drain_before_end_minutes larger"
            )
        return self

    def drain_at(self, end: datetime) -> datetime:
        return end - timedelta(minutes=self.drain_before_end_minutes)

    def teardown_at(self, end: datetime) -> datetime:
        return end - timedelta(minutes=self.hard_teardown_before_end_minutes)


# What the sandbox Hub serves (capserve_sandbox.hub.TINY_K3): a checkpoint of a few MB that plans onto one node
# of any GPU type. Against AWS, name a small model the Hub really has (docs/rehearsal.md).
DEFAULT_REHEARSAL_REPO = "capserve-sandbox/tiny-k3"


class RehearsalSpec(StrictModel):
    """The rehearsal: the campaign's own path on on-demand capacity, start to teardown (docs/rehearsal.md)."""

    instance_type: str | None = Field(
        None,
        min_length=1,
        max_length=64,
        description="On-demand instance type to rehearse on; default: the cheapest of the campaign's GPU family "
        "in capserve's price table. Must be of the campaign's GPU family.",
    )
    model: ModelRef = Field(
        default_factory=lambda: ModelRef(repo=DEFAULT_REHEARSAL_REPO),
        description="A small model to stage, roll out and evaluate instead of the campaign's; default: the one "
        "the sandbox Hub serves (against AWS, name a small Hub repo).",
    )
    max_minutes: StrictInt = Field(
        60,
        ge=15,
        le=8 * 60,
        description="How long the rehearsal's on-demand lease lasts before its drain point: bring-up must leave "
        "it this long (a killed rehearsal's leftovers are the reaper's after its grace period).",
    )

    @field_validator("instance_type")
    @classmethod
    def _known_instance_type(cls, value: str | None) -> str | None:
        problem = instance_type_problem(value, INSTANCE_TYPES) if value is not None else None
        if problem:
            raise ValueError(problem)
        return value


class CampaignSpec(StrictModel):
    """One campaign: one model served on one reservation window, then nothing left running."""

    name: str = Field(
        pattern=DNS_LABEL,
        description="Campaign name: lower-case letters, digits and '-', at most 40; it is the campaign id.",
    )
    model: ModelRef = Field(description="What to serve.")
    capacity: CapacitySpec = Field(description="Where the GPUs come from.")
    cluster: ClusterSpec = Field(default_factory=ClusterSpec, description="The Kubernetes cluster.")
    weights: WeightsSpec = Field(description="Checkpoint staging.")
    serving: ServingSpec = Field(default_factory=ServingSpec, description="vLLM serving.")
    evaluation: EvaluationSpec = Field(
        default_factory=EvaluationSpec, description="Smoke, quality and load profiles, and the gates that judge them."
    )
    teardown: TeardownSpec = Field(default_factory=TeardownSpec, description="Drain and teardown margins.")
    cost: CostSpec = Field(
        default_factory=CostSpec, description="Utilisation target and throughput estimate for the cost ledger."
    )
    rehearsal: RehearsalSpec = Field(
        default_factory=RehearsalSpec,
        description="How `capserve rehearse` rehearses this campaign on on-demand capacity (docs/rehearsal.md).",
    )
    settings: dict[str, JsonValue] | None = Field(
        None,
        max_length=16,
        description="Overrides of capserve's settings for this campaign (timeouts, polls, parallelism, …), checked "
        "against capserve.core.settings.CampaignSettings; only the fields named here change, the rest come from "
        "the environment (CAPSERVE_…) or the defaults.",
    )

    # Kept as written (a mapping, checked strictly here) rather than as a CampaignSettings: so a spec read
    # back from the campaign record still overrides only what it named, and so the spec does not import
    # every stage's settings module (their packages import the spec).
    @field_validator("settings")
    @classmethod
    def _known_settings(cls, value: dict[str, JsonValue] | None) -> dict[str, JsonValue] | None:
        if value is not None:
            _campaign_settings(value)
        return value

    def campaign_settings(self) -> CampaignSettings | None:
        """The spec's ``settings:`` block, typed (only the named fields are set)."""
        return None if self.settings is None else _campaign_settings(self.settings)

    @property
    def campaign_id(self) -> str:
        """The deterministic id every resource is tagged with (``capserve.io/campaign``).

        The name itself: it is already a DNS label, so it is valid as an AWS tag value, a Kubernetes
        label value, an S3 key part and a training plan name, and re-running a campaign under the same
        name finds (and never re-buys) what the first run made.
        """
        return self.name

    @property
    def weights_region(self) -> str:
        """Region of the weights bucket: weights.s3_region, or the first region searched for capacity."""
        return self.weights.s3_region or self.capacity.regions[0]

    @property
    def served_model_name(self) -> str:
        """The model name the endpoint serves (vLLM's --served-model-name)."""
        return self.serving.served_model_name or self.model.repo or self.model.catalog or self.name

    @model_validator(mode="after")
    def _fits_the_block(self) -> CampaignSpec:
        """What the spec asks of the block and of the model must fit them (checkable without a plan)."""
        hours = self.capacity.duration_hours
        serving_room = None if hours is None else hours * 60 - self.teardown.drain_before_end_minutes
        if serving_room is not None and self.cluster.min_serving_minutes > serving_room:
            raise ValueError(
                f"cluster.min_serving_minutes {self.cluster.min_serving_minutes} is more than a {hours} h block "
                f"leaves before its drain point ({serving_room} min): lower it or ask for a longer block"
            )
        load = self.evaluation.load
        too_long = open_loop_time_problem(load.open_loop_requests, load.request_rates, self.evaluation.timeout_s)
        if too_long:
            raise ValueError(too_long)
        context = self.serving.max_model_len or _catalog_context(self.model.catalog)
        longest = math.floor(load.prompt.tokens * (1 + load.prompt.range_ratio)) + math.floor(
            load.output.tokens * (1 + load.output.range_ratio)
        )
        if context is not None and longest > context:
            raise ValueError(
                f"evaluation.load.prompt.tokens + evaluation.load.output.tokens reach {longest:,} tokens (with their "
                f"range_ratio), more than the {context:,}-token context the endpoint will serve "
                f"({'serving.max_model_len' if self.serving.max_model_len else 'the model'}); shorten them"
            )
        return self

    @model_validator(mode="after")
    def _thinking_can_be_turned_off(self) -> CampaignSpec:
        # Checked here, before anything is bought: a quality profile asked to turn off thinking that
        # the model cannot turn off would only fail after the rollout.
        entry = MODELS.get(self.model.catalog) if self.model.catalog is not None else None
        if self.evaluation.quality.thinking == "off" and entry is not None and entry.thinking is not None:
            if entry.thinking.off_switch is None:
                raise ValueError(
                    f"evaluation.quality.thinking is 'off' but {entry.name} always thinks (vLLM "
                    f"--reasoning-parser {entry.thinking.reasoning_parser} has no switch): set it to 'leave_room'"
                )
        return self

    @model_validator(mode="after")
    def _cluster_matches_capacity(self) -> CampaignSpec:
        provider, kind = self.capacity.provider, self.cluster.kind
        if provider == "sagemaker-training-plan" and kind != "hyperpod":
            raise ValueError("a SageMaker training plan serves a HyperPod cluster: set cluster.kind to 'hyperpod'")
        rehearsal_type = self.rehearsal.instance_type
        if rehearsal_type is not None:
            ours, theirs = get_instance_type(self.capacity.instance_type), get_instance_type(rehearsal_type)
            if ours.gpu.family != theirs.gpu.family:
                raise ValueError(
                    f"rehearsal.instance_type {rehearsal_type} has {theirs.gpu.name} GPUs ({theirs.gpu.family}), the "
                    f"campaign's {self.capacity.instance_type} {ours.gpu.name} ({ours.gpu.family}): a rehearsal on "
                    "another GPU family proves neither the drivers nor the kernels; pick one of the same family"
                )
        if kind == "hyperpod" and provider == "ec2-capacity-block":
            raise ValueError(
                "HyperPod runs on SageMaker training plans, not EC2 Capacity Blocks: set capacity.provider to "
                "'sagemaker-training-plan' or cluster.kind to 'eks'"
            )
        return self


def _catalog_context(catalog: str | None) -> int | None:
    """The catalog model's longest context, or None (a Hub repo's is known only once its config is read)."""
    entry = MODELS.get(catalog) if catalog else None
    return entry.max_context if entry is not None else None


def new_campaign_problems(spec: CampaignSpec, *, now: datetime) -> list[str]:
    """What makes ``spec`` unable to buy anything *now* (a window over, too far ahead, or with no block in it).

    Not a validator: a recorded spec is read again by later runs (serve, drain, teardown) after its window has
    passed, and must still load. ``capserve up`` and the campaign flow ask this before anything runs.
    """
    capacity = spec.capacity
    if capacity.provider != "ec2-capacity-block":
        return []
    assert capacity.earliest_start and capacity.latest_end and capacity.duration_hours  # noqa: S101 - the validator's
    return capacity_block_window_problems(
        capacity.earliest_start, capacity.latest_end, timedelta(hours=capacity.duration_hours), now=now
    )


def _campaign_settings(value: dict[str, JsonValue]) -> CampaignSettings:
    try:
        # Strict as the spec itself: ``true`` is not 1.0 s, "5" is not 5, "no" is not false.
        return CampaignSettings.model_validate(value, strict=True)
    except ValidationError as exc:
        problems = describe_errors(exc, CampaignSettings).replace("\n  ", "; ").strip()
        raise ValueError(f"{problems} (see `capserve.core.settings`)") from None


def read_spec_bytes(path: Path) -> bytes:
    """The file's bytes, read no further than one byte past the size limit (a huge file is not slurped)."""
    try:
        if path.exists() and not (path.is_file() or path.is_dir()):
            # /dev/zero, a FIFO (whose open would block until a writer came), a socket: never a spec.
            raise SpecError(f"{path}: is not a regular file (a device, pipe or socket); give the spec's YAML file")
        with path.open("rb") as stream:
            return stream.read(MAX_DOCUMENT_BYTES + 1)
    except IsADirectoryError:
        raise SpecError(f"{path}: is a directory; give the spec's YAML file") from None
    except OSError as exc:
        raise SpecError(f"{path}: cannot read the spec ({exc.strerror or exc})") from None


def load_spec(path: str | Path, *, now: datetime | None = None) -> CampaignSpec:
    """Read and validate a campaign spec; every problem becomes one ``SpecError`` naming field paths.

    The document is read strictly (``core/strict_yaml.py``: UTF-8 only, no duplicate keys, no
    anchors or aliases, bounded size and depth), then validated by the strict models below.
    """
    path = Path(path)
    document = parse_document(read_spec_bytes(path), str(path))
    return parse_spec(document.data, source=str(path), now=now, document=document)


def parse_spec(
    data: Any, *, source: str = "spec", now: datetime | None = None, document: Document | None = None
) -> CampaignSpec:
    """Validate already-parsed spec data; ``document`` (from ``load_spec``) adds line numbers to errors."""
    if not isinstance(data, dict):
        raise SpecError(
            f"{source}: the spec must be a mapping of fields (name, model, capacity, …), got {_kind(data)}"
        )
    non_finite = non_finite_problems(data)
    if non_finite:
        raise SpecError(f"{source}: invalid campaign spec\n" + "\n".join(f"  {p}" for p in non_finite))
    try:
        return CampaignSpec.model_validate(data, context={"now": now or datetime.now(UTC)})
    except ValidationError as exc:
        raise SpecError(f"{source}: invalid campaign spec\n{describe_errors(exc, CampaignSpec, document)}") from None


def describe_errors(exc: ValidationError, root: type[BaseModel], document: Document | None = None) -> str:
    """One line per problem: where (line, dotted field path), what is wrong, what was given and what is allowed."""
    schema = root.model_json_schema()
    lines = []
    for err in exc.errors(include_url=False):
        loc = tuple(err["loc"])
        path = ".".join(str(part) for part in loc) or "(top level)"
        line = document.line_of(loc) if document is not None else None
        where = f"line {line}: " if line is not None else ""
        if err["type"] == "extra_forbidden":
            allowed = _allowed_fields(root, loc[:-1])
            hint = f"; allowed here: {', '.join(allowed)}" if allowed else ""
            lines.append(f"  {where}{path}: unknown field{hint}")
            continue
        message = re.sub(r"^Value error, ", "", err["msg"])
        got = err.get("input")
        if err["type"] in {"model_type", "model_attributes_type", "dict_type"}:
            message = "Input should be a mapping of fields (key: value), not a list or a single value"
        if err["type"] in {"missing", "value_error"}:
            shown = ""
        elif isinstance(got, dict | list | tuple):
            shown = f" (got {_kind(got)})"
        else:
            shown = f" (got {_show(got)})"
        if err["type"] in _TYPE_ERRORS:
            shown = f" (got {_show(got)}, {_kind(got)})" if not isinstance(got, dict | list | tuple) else shown
            if err["type"] == "string_type" and isinstance(got, bool | int | float):
                shown += "; YAML read this as a number or boolean: put the value in quotes"
            accepted = _allowed_text(schema, loc)
            if accepted:
                shown += f". Allowed: {accepted}"
        lines.append(f"  {where}{path}: {message}{shown}")
    return "\n".join(lines)


# Errors where the value has the wrong type: the message adds what the field allows.
_TYPE_ERRORS = {
    "timezone_aware",
    "int_type",
    "int_from_float",
    "float_type",
    "bool_type",
    "string_type",
    "list_type",
    "tuple_type",
    "dict_type",
    "model_type",
    "model_attributes_type",
    "datetime_type",
    "datetime_parsing",
    "datetime_from_date_parsing",
    "literal_error",
    "enum",
}


def _show(value: Any) -> str:
    """A value as the spec would spell it (JSON-like), cut short."""
    if isinstance(value, str):
        text = json.dumps(value, ensure_ascii=False)
    elif isinstance(value, date):
        text = value.isoformat()
    elif isinstance(value, bool) or value is None:
        text = json.dumps(value)
    else:
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "…"


def _kind(value: Any) -> str:
    """What kind of value this is, in the words of the spec's reader."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, datetime):
        return "a date and time" if value.tzinfo is not None else "a date and time without a timezone"
    if isinstance(value, date):
        return "a date without a time"
    return f"a {type(value).__name__}"


def _schema_at(schema: dict[str, Any], loc: tuple[int | str, ...]) -> dict[str, Any] | None:
    """The JSON-schema node of the field at ``loc`` (following $ref, nullable unions and list items)."""
    defs = schema.get("$defs", {})

    def resolve(node: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in node:
            node = defs.get(node["$ref"].rsplit("/", 1)[-1], {})
        options = [o for o in node.get("anyOf", []) if o.get("type") != "null"]
        if len(options) == 1:
            merged = {k: v for k, v in node.items() if k != "anyOf"}
            return {**resolve(options[0]), **merged}
        return node

    node = resolve(schema)
    for part in loc:
        if isinstance(part, int):
            items = node.get("items") or (node.get("prefixItems") or [{}])[0]
            node = resolve(items)
        else:
            properties = node.get("properties", {})
            if part not in properties:
                return None
            node = resolve(properties[part])
    return node


def _allowed_text(schema: dict[str, Any], loc: tuple[int | str, ...]) -> str:
    """What a field accepts, in words: type, bounds, choices, pattern; then its description."""
    node = _schema_at(schema, loc)
    if not node:
        return ""
    parts: list[str] = []
    kind = node.get("type")
    if "enum" in node or "const" in node:
        pass  # pydantic's message already lists the choices
    elif kind == "integer":
        parts.append("a whole number" + _range(node))
    elif kind == "number":
        parts.append("a number" + _range(node))
    elif kind == "boolean":
        parts.append("true or false")
    elif kind == "string" and node.get("format") == "date-time":
        parts.append(INSTANT_FORMAT)
    elif kind == "string":
        text = "text"
        if "pattern" in node:
            text += f" matching {node['pattern']}"
        if "maxLength" in node:
            text += f", at most {node['maxLength']} characters"
        parts.append(text)
    elif kind == "array":
        item = node.get("items") or {}
        item_kind = {"integer": "whole numbers", "number": "numbers", "string": "strings"}.get(item.get("type", ""))
        parts.append("a list" + (f" of {item_kind}" if item_kind else ""))
    elif kind == "object" and "properties" in node:
        parts.append("a mapping with the fields " + ", ".join(node["properties"]))
    description = node.get("description")
    if description:
        parts.append(description)
    return " — ".join(parts)


def _range(node: dict[str, Any]) -> str:
    low = node.get("minimum", node.get("exclusiveMinimum"))
    high = node.get("maximum", node.get("exclusiveMaximum"))
    low_word = "above" if "exclusiveMinimum" in node else "from"
    high_word = "below" if "exclusiveMaximum" in node else "to"
    if low is not None and high is not None:
        return f" {low_word} {low:g} {high_word} {high:g}"
    if low is not None:
        return f", {'above' if 'exclusiveMinimum' in node else 'at least'} {low:g}"
    if high is not None:
        return f", {'below' if 'exclusiveMaximum' in node else 'at most'} {high:g}"
    return ""


def _allowed_fields(root: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    schema = root.model_json_schema()
    node = _schema_at(schema, loc)
    return list((node or {}).get("properties", {}))
