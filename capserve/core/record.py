"""The campaign record: the small durable document later stages and later runs read.

Kept outside the process (a JSON document in S3, written with conditional writes: see
capserve/tasks/record_store.py) because Prefect Variables hold 5,000 characters with last-writer-wins
and cache records only prove a task returned once. The cloud's tags stay the source of truth for what
exists; the record says what a run decided, paid and produced:

- the spec the campaign runs (validated JSON and its digest), so a scheduled run given only the
  campaign id and its home region can load it;
- each stage's status, start and end, the digest of its inputs and a few outputs (what a later run
  needs to skip a stage whose inputs did not change and whose outputs still verify);
- the lease, the purchase (the offers considered, the one chosen, the price and the run that bought it, so
  that the report a later run writes still tells it), the approvals (who, when, note), the last good rollout,
  what teardown kept, and every redeploy.

Every change is a pure function from one record to the next (``with_*``), so a conflicting write is
re-read and the change re-applied.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, JsonValue, model_validator

from capserve.core.approval import Approval
from capserve.core.capacity.result import AcquireResult
from capserve.core.cluster.result import PreparedCluster
from capserve.core.cost.inputs import CostInputs
from capserve.core.digest import SHA256_HEX, digest
from capserve.core.lease import Lease
from capserve.core.locations import BucketLocation
from capserve.core.redeploy import RedeployEntry
from capserve.core.report import CampaignReport
from capserve.core.rollout.strategy import Serving
from capserve.core.spec import CampaignSpec
from capserve.core.stages import Stage, StageStatus
from capserve.core.teardown.result import KeptResource

RECORD_SCHEMA_VERSION: Literal[2] = 2

# The parts of the spec each stage reads: a stage's inputs digest covers these and the outputs of the
# stages it builds on (STAGE_BUILDS_ON), so a change anywhere upstream shows as a changed digest.
STAGE_SPEC_SECTIONS: dict[Stage, tuple[str, ...]] = {
    Stage.PLAN: ("model", "capacity", "serving"),
    Stage.ACQUIRE: ("capacity",),
    Stage.STAGE_WEIGHTS: ("model", "weights"),
    Stage.STAGE_IMAGE: ("serving",),
    Stage.BRING_UP: ("cluster", "capacity"),
    Stage.WEIGHTS_TO_NODES: ("weights", "serving"),
    Stage.ROLLOUT: ("model", "serving"),
    Stage.EVALUATE: ("evaluation", "serving"),
    Stage.DRAIN: ("teardown",),
    Stage.TEARDOWN: ("cluster", "weights", "teardown"),
}
STAGE_BUILDS_ON: dict[Stage, tuple[Stage, ...]] = {
    Stage.PLAN: (),
    Stage.ACQUIRE: (Stage.PLAN,),
    Stage.STAGE_WEIGHTS: (Stage.PLAN,),
    Stage.STAGE_IMAGE: (Stage.ACQUIRE,),
    Stage.BRING_UP: (Stage.ACQUIRE,),
    Stage.WEIGHTS_TO_NODES: (Stage.STAGE_WEIGHTS, Stage.BRING_UP),
    Stage.ROLLOUT: (Stage.WEIGHTS_TO_NODES,),
    Stage.EVALUATE: (Stage.ROLLOUT,),
    Stage.DRAIN: (Stage.ROLLOUT,),
    Stage.TEARDOWN: (Stage.BRING_UP,),
}
# The fields of each stage's typed result kept as its outputs in the record.
STAGE_OUTPUTS: dict[Stage, tuple[str, ...]] = {
    # "parallel" (the layout as vLLM flags): the prepare run builds the GPU launch template for its nodes per copy.
    Stage.PLAN: (
        "layout", "nodes", "tensor_parallel", "pipeline_parallel", "data_parallel", "expert_parallel", "parallel",
    ),
    Stage.ACQUIRE: ("outcome",),
    # The whole weights result (a few hundred bytes): a re-run whose inputs did not change rebuilds it from here
    # once the manifest's files verify in S3 (capserve.campaign.reuse), instead of downloading anything.
    Stage.STAGE_WEIGHTS: (
        "repo", "revision_sha", "layout_id", "s3_uri", "manifest_uri", "verified", "files", "bytes_total",
        "bytes_per_node", "bytes_naive_per_node", "resharded",
        # The compile-cache key's architecture: a serve run that reuses the weights keys its caches as a redeploy will.
        "config_digest",
    ),
    # The digest the pods pull: a later run (the scheduled serve run) pulls the same bytes.
    Stage.STAGE_IMAGE: ("source", "digest", "region", "repository", "image"),
    Stage.BRING_UP: ("kind", "name", "region", "gpu_pool", "nodes_ready", "node_names"),
    Stage.WEIGHTS_TO_NODES: ("namespace", "target"),
    Stage.EVALUATE: ("verdict", "url"),
    Stage.TEARDOWN: ("reason", "remaining"),
}


def record_key(campaign_id: str) -> str:
    """Where a campaign's record lives in the records bucket."""
    return f"capserve/campaigns/{campaign_id}/record.json"


def stage_outputs(stage: Stage, result: BaseModel | None) -> dict[str, JsonValue]:
    """The few fields of ``stage``'s typed result that the record keeps (STAGE_OUTPUTS)."""
    fields = STAGE_OUTPUTS.get(stage, ())
    if result is None or not fields:
        return {}
    dumped: dict[str, JsonValue] = result.model_dump(mode="json", include=set(fields))
    return dumped


class RecordRef(BaseModel):
    """Where one campaign's record lives, and how patiently it is written."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    campaign_id: str = Field(min_length=1, max_length=64, description="The campaign.")
    location: BucketLocation = Field(description="The records bucket and its region.")
    write_attempts: int = Field(5, ge=1, le=20, description="Read-modify-write attempts on a conflicting write.")

    @property
    def key(self) -> str:
        return record_key(self.campaign_id)

    @property
    def uri(self) -> str:
        return self.location.uri(self.key)


class SpecSnapshot(BaseModel):
    """The spec a campaign runs, as validated JSON (relative times already resolved) and its digest."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    document: dict[str, JsonValue] = Field(description="CampaignSpec.model_dump(mode='json').")
    digest: str = Field(pattern=SHA256_HEX, description="sha256 of the canonical JSON of document.")

    @classmethod
    def of(cls, spec: CampaignSpec) -> SpecSnapshot:
        document = spec.model_dump(mode="json")
        return cls(document=document, digest=digest(document))

    def load(self) -> CampaignSpec:
        """The spec back (validated again: a record written by an older schema fails here, not later)."""
        return CampaignSpec.model_validate(self.document, context={"recorded": True})


class StageEntry(BaseModel):
    """How a stage last ended, what it was given and what it produced."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    status: StageStatus = Field(description="How it ended (or 'running': it started and the record has no end).")
    started_at: AwareDatetime | None = Field(None, description="When it started (None for a stage skipped).")
    ended_at: AwareDatetime | None = Field(None, description="When it ended; None while running.")
    inputs_digest: str | None = Field(None, pattern=SHA256_HEX, description="Digest of what it was given.")
    outputs: dict[str, JsonValue] = Field(default_factory=dict, max_length=64, description="What it produced.")
    detail: str = Field("", max_length=4000, description="One paragraph: what happened or why it stopped.")


# What records written before kept beside the rollout's config, each a copy of the config's own field
# (``revision_sha``, ``image``, ``engine.served_model_name``) or never set (``endpoint``).
_RESTATED_ROLLOUT_FIELDS = ("revision_sha", "image", "served_model_name", "endpoint")


class RolloutRecord(Serving):
    """The last rollout that passed its evaluation: what serves (colour and configuration) and since when.

    A failed rollout goes back to it: the strategy compares against it and a rollback renders its
    configuration again. What it serves (model commit, image, served name) is read from the configuration.
    """

    ready_at: AwareDatetime = Field(description="When it passed.")

    @model_validator(mode="before")
    @classmethod
    def _drop_restated(cls, data: Any) -> Any:
        """Read a record written with the configuration's fields repeated beside it."""
        if not isinstance(data, dict):
            return data
        return {key: value for key, value in data.items() if key not in _RESTATED_ROLLOUT_FIELDS}


class CampaignRecord(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[2] = Field(RECORD_SCHEMA_VERSION, description="Bumped on incompatible changes.")
    campaign_id: str = Field(min_length=1, max_length=64, description="The campaign this record belongs to.")
    spec: SpecSnapshot | None = Field(None, description="The spec of the last run.")
    lease: Lease | None = Field(None, description="The capacity the acquire stage obtained.")
    offering_id: str | None = Field(None, max_length=512, description="The offering bought, when we bought it.")
    purchase: AcquireResult | None = Field(
        None,
        description="The acquire stage's result as the run that bought the lease wrote it (offers considered, the "
        "chosen one, the fee, that run's name and time): a later run that adopts the lease reports it "
        "(AcquireResult.with_purchase). Never replaced by an adoption.",
    )
    stages: dict[Stage, StageEntry] = Field(default_factory=dict, max_length=64, description="Stage → last outcome.")
    approvals: tuple[Approval, ...] = Field(default=(), max_length=256, description="Every decision, oldest first.")
    last_good_rollout: RolloutRecord | None = Field(None, description="What a failed rollout rolls back to.")
    kept: tuple[KeptResource, ...] = Field(default=(), max_length=256, description="What teardown kept, and why.")
    teardown_when_done: bool = Field(
        False, description="The person who started the campaign asked for a teardown as soon as it has served and "
        "been evaluated (`capserve up --teardown-when-done`): the scheduled serve run does it, not only end − 35 min.",
    )
    fired: dict[str, AwareDatetime] = Field(
        default_factory=dict, max_length=16,
        description="Scheduled stage (bring_up, drain, teardown) → when its run started, on the campaign's clock.",
    )
    redeploys: tuple[RedeployEntry, ...] = Field(
        default=(), max_length=256, description="Every redeploy, oldest first (capserve.core.redeploy)."
    )
    prepared: PreparedCluster | None = Field(
        None, description="What the cluster's preparation run did before the block (capserve.flows.window)."
    )
    cost_inputs: CostInputs | None = Field(
        None,
        description="The block's cost ledger inputs as the last run that held the block wrote them: later runs (a "
        "redeploy, the teardown) build the block's ledger from them and the redeploys (capserve.core.block_cost).",
    )
    report: CampaignReport | None = Field(
        None,
        description="That run's report, typed: whichever run comes later, on whichever host, renders the campaign's "
        "report from it and this record (capserve.core.block_cost.campaign_report).",
    )
    updated_at: AwareDatetime = Field(description="Last write.")

    @model_validator(mode="before")
    @classmethod
    def _upgrade(cls, data: Any) -> Any:
        """Read records of schema 1 (stages as {status, finished_at, detail}) as schema 2, and records that kept the
        host path of their report (``report_dir``: the report is rendered from the record now, on any host)."""
        if not isinstance(data, dict):
            return data
        data = {key: value for key, value in data.items() if key != "report_dir"}
        if data.get("schema_version") != 1:
            return data
        stages = {
            name: {"status": old["status"], "ended_at": old["finished_at"], "detail": old.get("detail", "")}
            for name, old in (data.get("stages") or {}).items()
        }
        return {**data, "schema_version": 2, "stages": stages}

    @classmethod
    def new(cls, campaign_id: str, now: datetime) -> CampaignRecord:
        return cls(campaign_id=campaign_id, updated_at=now)

    def stage(self, stage: Stage) -> StageEntry | None:
        return self.stages.get(stage)

    def planned_nodes_per_replica(self) -> int | None:
        """The nodes one serving copy spans, as the last plan stage recorded it (None: no plan recorded)."""
        entry = self.stages.get(Stage.PLAN)
        parallel = entry.outputs.get("parallel") if entry is not None else None
        value = parallel.get("nodes_per_replica") if isinstance(parallel, dict) else None
        return value if isinstance(value, int) else None

    def load_spec(self) -> CampaignSpec | None:
        return self.spec.load() if self.spec else None

    def inputs_digest(self, stage: Stage, spec: CampaignSpec) -> str:
        """Digest of what ``stage`` is given: its spec sections and the outputs of the stages it builds on."""
        document = spec.model_dump(mode="json")
        given = {
            "spec": {section: document.get(section) for section in STAGE_SPEC_SECTIONS[stage]},
            "upstream": {
                str(s): entry.outputs for s in STAGE_BUILDS_ON[stage] if (entry := self.stages.get(s)) is not None
            },
        }
        return digest(given)

    def with_spec(self, spec: CampaignSpec, *, now: datetime) -> CampaignRecord:
        return self.model_copy(update={"spec": SpecSnapshot.of(spec), "updated_at": now})

    def with_lease(self, lease: Lease, *, offering_id: str | None, now: datetime) -> CampaignRecord:
        return self.model_copy(update={"lease": lease, "offering_id": offering_id, "updated_at": now})

    def with_purchase(self, purchase: AcquireResult, *, now: datetime) -> CampaignRecord:
        return self.model_copy(update={"purchase": purchase, "updated_at": now})

    def with_stage(self, stage: Stage, entry: StageEntry, *, now: datetime | None = None) -> CampaignRecord:
        when = now or entry.ended_at or entry.started_at or self.updated_at
        return self.model_copy(update={"stages": {**self.stages, stage: entry}, "updated_at": when})

    def with_approval(self, approval: Approval) -> CampaignRecord:
        return self.model_copy(update={"approvals": (*self.approvals, approval), "updated_at": approval.decided_at})

    def with_rollout(self, rollout: RolloutRecord) -> CampaignRecord:
        return self.model_copy(update={"last_good_rollout": rollout, "updated_at": rollout.ready_at})

    def with_teardown_when_done(self, wanted: bool, *, now: datetime) -> CampaignRecord:
        return self.model_copy(update={"teardown_when_done": wanted, "updated_at": now})

    def with_fired(self, stage: str, *, now: datetime) -> CampaignRecord:
        return self.model_copy(update={"fired": {**self.fired, stage: now}, "updated_at": now})

    def with_prepared(self, prepared: PreparedCluster) -> CampaignRecord:
        return self.model_copy(update={"prepared": prepared, "updated_at": prepared.ended_at})

    def with_block_report(self, report: CampaignReport, inputs: CostInputs, *, now: datetime) -> CampaignRecord:
        return self.model_copy(update={"report": report, "cost_inputs": inputs, "updated_at": now})

    def with_redeploy(self, entry: RedeployEntry) -> CampaignRecord:
        return self.model_copy(update={"redeploys": (*self.redeploys, entry), "updated_at": entry.ended_at})

    def with_kept(self, kept: tuple[KeptResource, ...], *, now: datetime) -> CampaignRecord:
        merged = {k.resource: k for k in (*self.kept, *kept)}
        return self.model_copy(update={"kept": tuple(merged.values()), "updated_at": now})
