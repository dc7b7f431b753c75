"""The campaign spec: one YAML file says what to serve, on what, for how long, and how to judge it.

Every field is strict (unknown keys are errors), bounded and described, because a typo in a spec that
buys capacity costs real money. ``load_spec`` turns every problem into one ``SpecError`` whose message
names each field path and what is allowed there, never a traceback.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import yaml
from pydantic import (
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from capserve.core.errors import SpecError
from capserve.core.evaluation.spec import EvaluationSpec

if TYPE_CHECKING:
    from capserve.core.settings import CampaignSettings

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


_RELATIVE = re.compile(r"^now(?:\s*\+\s*(\d+)\s*([mhdw]))?$")
_UNIT = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def _resolve_relative_time(value: Any, info: ValidationInfo) -> Any:
    """Accept 'now' or 'now+36h' / 'now+2d' / 'now+1w' besides absolute times.

    Scheduled campaigns ("every Monday, find a block in the next two weeks") need windows relative
    to when they run. Every relative time in one spec resolves against the same instant, taken from
    the validation context (``now``) or the wall clock.
    """
    if not isinstance(value, str):
        return value
    match = _RELATIVE.match(value.strip())
    if match is None:
        return value
    now = (info.context or {}).get("now") or datetime.now(UTC)
    amount, unit = match.groups()
    return now + timedelta(**{_UNIT[unit]: int(amount)}) if amount else now


WindowTime = Annotated[AwareDatetime, BeforeValidator(_resolve_relative_time)]


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelRef(StrictModel):
    """Which checkpoint to serve: a catalog entry, or a Hub repo at a revision."""

    catalog: str | None = Field(
        None, description="Catalog model id, e.g. 'kimi-k3' (see `capserve plan --help`).", min_length=1
    )
    repo: str | None = Field(
        None, description="Hugging Face repo 'owner/name'; overrides the catalog entry's repo.", pattern=HUB_REPO
    )
    revision: str = Field(
        "main",
        description="Branch, tag or commit sha; pinned to a commit sha before anything is fetched.",
        min_length=1,
        max_length=100,
    )

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
    instance_type: str = Field(description="EC2 instance type, e.g. 'p6-b300.48xlarge'.", min_length=1)
    instance_count: int = Field(1, ge=1, le=64, description="Instances in the reservation (AWS max 64 per block).")
    regions: list[str] = Field(
        min_length=1, max_length=16, description="Regions to search for offerings, searched concurrently."
    )
    earliest_start: WindowTime | None = Field(
        None,
        description="The reservation may start at or after this instant: ISO time with a timezone, 'now' or 'now+2d'.",
    )
    latest_end: WindowTime | None = Field(
        None, description="The reservation must end at or before this instant: ISO time with a timezone or 'now+14d'."
    )
    duration_hours: int | None = Field(
        None,
        ge=24,
        le=24 * MAX_RESERVATION_DAYS,
        description="Reservation length: whole days; beyond 14 days, whole weeks (Capacity Block rule).",
    )
    max_upfront_fee_usd: float | None = Field(
        None, gt=0, le=100_000_000, description="Never buy an offering whose upfront fee is above this."
    )
    approval_threshold_usd: float = Field(
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
        assert self.duration_hours is not None and self.earliest_start and self.latest_end
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
    kubernetes_version: str = Field("1.34", pattern=r"^1\.(2[89]|3\d)$", description="EKS Kubernetes minor version.")
    existing_cluster_name: str | None = Field(
        None,
        min_length=1,
        max_length=100,
        pattern=r"^[0-9A-Za-z][A-Za-z0-9_-]*$",
        description="Use this existing cluster instead of creating one (nothing of it is deleted at teardown).",
    )
    min_serving_minutes: int = Field(
        120,
        ge=0,
        le=24 * 60,
        description="Refuse to bring up, or stop, when less serving time than this is left before drain.",
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
    node_target: Literal["fsx", "nvme"] = Field(
        "nvme", description="Per-node copy target: the instance's local NVMe, or an FSx for Lustre file system."
    )


class ServingSpec(StrictModel):
    """How vLLM serves the model."""

    image: str = Field("vllm/vllm-openai:latest", min_length=1, max_length=255, description="vLLM container image.")
    extra_args: list[str] = Field(
        default_factory=list,
        max_length=64,
        description="Extra `vllm serve` arguments, appended after the ones derived from the plan; none may repeat "
        "or contradict those (the layout, lengths, KV dtype, model path, port and API key come from the plan).",
    )
    replicas: int = Field(1, ge=1, le=64, description="Independent serving replicas (each a full model copy).")
    max_model_len: int | None = Field(
        None, ge=256, le=16 * 1024 * 1024, description="Context length to serve; default: the model's maximum."
    )
    max_num_seqs: int = Field(16, ge=1, le=4096, description="Concurrent sequences the KV budget must hold.")
    served_model_name: str | None = Field(
        None, min_length=1, max_length=200, description="Name clients ask for; default: the Hub repo id."
    )
    endpoint_access: Literal["port-forward", "internal-nlb"] = Field(
        "port-forward",
        description="How the campaign reaches the endpoint: a port-forward through the Kubernetes API server "
        "(nothing exposed), or an internal Network Load Balancer in the VPC (AWS Load Balancer Controller).",
    )
    startup_budget_minutes: int | None = Field(
        None,
        ge=5,
        le=24 * 60,
        description="How long vLLM may take to start before the pod counts as failed; default: computed from the "
        "weights per node and whether the compile cache is warm (K3 cold: at least 90 minutes).",
    )
    compile_cache: bool = Field(
        True,
        description="Restore vLLM's compile/JIT/autotune caches from S3 before start and save them once ready, "
        "so the next reservation's first boot is warm.",
    )


class TeardownSpec(StrictModel):
    """When to stop serving and tear down, counted back from the reservation's end."""

    drain_before_end_minutes: int = Field(
        45,
        ge=31,
        le=24 * 60,
        description="Stop taking traffic this long before the reservation ends (AWS warns at end − 40 min).",
    )
    hard_teardown_before_end_minutes: int = Field(
        35,
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
    def _cluster_matches_capacity(self) -> CampaignSpec:
        provider, kind = self.capacity.provider, self.cluster.kind
        if provider == "sagemaker-training-plan" and kind != "hyperpod":
            raise ValueError("a SageMaker training plan serves a HyperPod cluster: set cluster.kind to 'hyperpod'")
        if kind == "hyperpod" and provider == "ec2-capacity-block":
            raise ValueError(
                "HyperPod runs on SageMaker training plans, not EC2 Capacity Blocks: set capacity.provider to "
                "'sagemaker-training-plan' or cluster.kind to 'eks'"
            )
        return self


def _campaign_settings(value: dict[str, JsonValue]) -> CampaignSettings:
    from capserve.core.settings import CampaignSettings

    try:
        return CampaignSettings.model_validate(value)
    except ValidationError as exc:
        problems = describe_errors(exc, CampaignSettings).replace("\n  ", "; ").strip()
        raise ValueError(f"{problems} (see `capserve.core.settings`)") from None


def load_spec(path: str | Path, *, now: datetime | None = None) -> CampaignSpec:
    """Read and validate a campaign spec; every problem becomes one ``SpecError`` naming field paths."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"{path}: cannot read the spec ({exc.strerror})") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 1}, column {where.column + 1}" if where else ""
        raise SpecError(f"{path}: not valid YAML{at}: {getattr(exc, 'problem', exc)}") from None
    return parse_spec(data, source=str(path), now=now)


def parse_spec(data: Any, *, source: str = "spec", now: datetime | None = None) -> CampaignSpec:
    if not isinstance(data, dict):
        raise SpecError(
            f"{source}: the spec must be a mapping of fields (name, model, capacity, …), got {type(data).__name__}"
        )
    try:
        return CampaignSpec.model_validate(data, context={"now": now or datetime.now(UTC)})
    except ValidationError as exc:
        raise SpecError(f"{source}: invalid campaign spec\n{describe_errors(exc, CampaignSpec)}") from None


def describe_errors(exc: ValidationError, root: type[BaseModel]) -> str:
    """One line per problem: the dotted field path, what is wrong, and what is allowed there."""
    lines = []
    for err in exc.errors(include_url=False):
        loc = [str(part) for part in err["loc"]]
        path = ".".join(loc) or "(top level)"
        if err["type"] == "extra_forbidden":
            allowed = _allowed_fields(root, err["loc"][:-1])
            hint = f"; allowed here: {', '.join(allowed)}" if allowed else ""
            lines.append(f"  {path}: unknown field{hint}")
            continue
        message = re.sub(r"^Value error, ", "", err["msg"])
        got = err.get("input")
        shown = "" if err["type"] in {"missing", "value_error"} or isinstance(got, dict) else f" (got {got!r})"
        lines.append(f"  {path}: {message}{shown}")
    return "\n".join(lines)


def _allowed_fields(root: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    model: Any = root
    for part in loc:
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return []
        model = field.annotation
        # Unwrap `X | None` to the model inside.
        for arg in getattr(model, "__args__", ()) or ():
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                model = arg
    return list(getattr(model, "model_fields", {}))
