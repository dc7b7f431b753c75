"""Every knob of capserve in one bounded model, composed of each stage's own settings.

Where values come from, later wins:

1. the defaults below (sized for AWS, each with its bounds and why);
2. the environment of the process running the flows (``CAPSERVE_`` prefix, ``__`` between levels:
   ``CAPSERVE_BRING_UP__POLL_SECONDS=5``, ``CAPSERVE_RECORDS__BUCKET=my-records``), read by
   pydantic-settings in ``capserve.tasks.settings``;
3. the campaign spec's ``settings:`` block, for what one campaign may tune (``CampaignSettings``: not
   where records live, which must be known before the spec is read, nor the reaper, which serves every
   campaign, nor how outside calls are retried, fixed when the process's tasks are made). Only the fields the spec
   names override; the rest keep the environment's values.

Stages receive their part (``settings.bring_up``, ``settings.weights``, …) from the campaign flow.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from capserve.core.capacity.settings import CapacitySettings
from capserve.core.cluster.settings import BringUpSettings
from capserve.core.cost.settings import CostSettings
from capserve.core.planner.settings import PlannerSettings
from capserve.core.rollout.settings import RolloutSettings, RolloutWaitSettings
from capserve.core.teardown.settings import ReaperSettings, TeardownSettings
from capserve.core.weights.settings import WeightsSettings

S3_BUCKET = r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$"
AWS_REGION = r"^[a-z]{2}(-gov)?-[a-z]+-\d$"


class RecordSettings(BaseModel):
    """Where campaign records live. Known without the spec, so a scheduled run given only a campaign id and
    a region can find the record (and the spec inside it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bucket: str | None = Field(
        None,
        pattern=S3_BUCKET,
        description="S3 bucket of campaign records; default capserve-records-<account>-<region>, created "
        "(and tagged) on first use.",
    )
    region: str | None = Field(
        None,
        pattern=AWS_REGION,
        description="Region of the records bucket: the campaign's home region; default the first of "
        "capacity.regions. Scheduled runs of a campaign are given this region.",
    )
    write_attempts: int = Field(5, ge=1, le=20, description="Read-modify-write attempts on a conflicting write.")


class SlotSettings(BaseModel):
    """The one-run-per-campaign slot on a Prefect server (capserve/tasks/slots.py, docs/prefect.md §5)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    lease_seconds: int = Field(
        300,
        ge=60,  # Prefect's minimum lease
        le=3600,
        description="Lease of the slot, renewed while its run lives: how long a killed run's slot stays taken.",
    )


class RetryPolicy(BaseModel):
    """How often and how patiently a kind of call is retried after a ``RetryableError`` (tasks/resilience.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    retries: int = Field(ge=0, le=10, description="Retries after the first attempt (0: never retried).")
    first_delay_s: float = Field(1.0, ge=0, le=600, description="Delay before the first retry.")
    growth: float = Field(4.0, ge=1, le=10, description="Each delay is the previous one times this.")
    max_delay_s: float = Field(30.0, ge=0, le=3600, description="No delay is longer than this.")
    jitter: float = Field(
        0.5, ge=0, le=1, description="Prefect's retry_jitter_factor: a delay may grow by up to this fraction."
    )

    def delays(self) -> list[float]:
        """The delay before each retry, in order."""
        return [min(self.first_delay_s * self.growth**i, self.max_delay_s) for i in range(self.retries)]


class RetrySettings(BaseModel):
    """The retry policy of each kind of outside call. Calls to Prefect (its client retries on its own), local work
    and single-shot calls (a purchase) are never retried and have no policy to set."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    aws: RetryPolicy = Field(
        RetryPolicy(retries=3, first_delay_s=2, max_delay_s=30),
        description="AWS control plane; botocore's standard mode already retries throttling and 5xx inside a call.",
    )
    s3: RetryPolicy = Field(
        RetryPolicy(retries=3, first_delay_s=2, max_delay_s=30),
        description="S3 object reads and writes (idempotent: same key, same bytes).",
    )
    hub: RetryPolicy = Field(
        RetryPolicy(retries=3, first_delay_s=1, max_delay_s=10),
        description="Hugging Face Hub metadata (429 and 5xx are common on big releases).",
    )
    kubernetes: RetryPolicy = Field(
        RetryPolicy(retries=3, first_delay_s=1, max_delay_s=15),
        description="Kubernetes API calls (server-side apply and deletes are idempotent).",
    )
    endpoint: RetryPolicy = Field(
        RetryPolicy(retries=2, first_delay_s=2, max_delay_s=10),
        description="The endpoint under evaluation, only for a transient error before any measurement.",
    )


class AwsCallSettings(BaseModel):
    """What every boto3 client is made with (botocore's Config: docs/settings.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_attempts: int = Field(
        5,
        ge=1,
        le=20,
        description="botocore's total_max_attempts in its standard retry mode, which retries throttling, 5xx and "
        "dropped connections inside one call, with backoff and jitter.",
    )
    connect_timeout_s: float = Field(10.0, gt=0, le=300, description="Timeout of opening a connection to AWS.")
    read_timeout_s: float = Field(
        60.0, gt=0, le=900, description="Timeout of reading an answer from AWS (a slow answer is retried by botocore)."
    )


class CampaignSettings(BaseModel):
    """The settings a campaign spec may override (its ``settings:`` block)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    capacity: CapacitySettings = Field(
        default_factory=CapacitySettings, description="Acquire: polls, payment and activation waits, approval."
    )
    bring_up: BringUpSettings = Field(
        default_factory=BringUpSettings, description="Bring-up: AWS and Kubernetes waits, HyperPod, VPC CIDR."
    )
    weights: WeightsSettings = Field(
        default_factory=WeightsSettings, description="Weights: parallelism, Hub timeouts, staging Jobs."
    )
    teardown: TeardownSettings = Field(
        default_factory=TeardownSettings, description="Teardown: how long to wait for each kind of thing to go."
    )
    planner: PlannerSettings = Field(
        default_factory=PlannerSettings, description="Planner: memory ceilings and what it assumes of vLLM."
    )
    rollout: RolloutSettings = Field(
        default_factory=RolloutSettings, description="Rollout: ports, probes and resources of the vLLM pods."
    )
    rollout_wait: RolloutWaitSettings = Field(
        default_factory=RolloutWaitSettings, description="Rollout: when to stop waiting, delete and cache-save waits."
    )


class Settings(CampaignSettings):
    """All of capserve's settings: the campaign's, plus those shared by every campaign of an installation."""

    records: RecordSettings = Field(default_factory=RecordSettings, description="Where campaign records live.")
    reaper: ReaperSettings = Field(
        default_factory=ReaperSettings, description="The reaper: when a campaign counts as over."
    )
    cost: CostSettings = Field(
        default_factory=CostSettings, description="The cost ledger: whether to read live prices."
    )
    slots: SlotSettings = Field(
        default_factory=SlotSettings, description="The campaign slot: how long a killed holder keeps it."
    )
    aws: AwsCallSettings = Field(
        default_factory=AwsCallSettings, description="AWS clients: botocore's attempts and timeouts of one call."
    )
    retries: RetrySettings = Field(
        default_factory=RetrySettings,
        description="Retry policy of each kind of outside call: the process's tasks are made with it at import, so "
        "it is the installation's, not a campaign's.",
    )

    def for_campaign(self, overrides: CampaignSettings | None) -> Settings:
        """These settings with the fields a spec's ``settings:`` block names put on top."""
        if overrides is None:
            return self
        return self.updated(overrides.model_dump(exclude_unset=True))

    def updated(self, values: dict[str, Any]) -> Settings:
        """These settings with ``values`` (nested by section) on top: a field they do not name keeps its value, even
        inside a section they name (``retries.aws.retries`` alone keeps the AWS policy's delays)."""
        return Settings.model_validate(_deep_merge(self.model_dump(), values))


def _deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out
