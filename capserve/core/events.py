"""The events capserve sends to Prefect: their names, resource ids and payloads, built as data.

Every event is about one campaign (resource ``capserve.campaign.<id>``) and names what it concerns as
related resources: the reservation, the cluster and the model revision, each with a role, so an
automation can match on any of them (docs/events.md §1). Payloads are small and hold identifiers,
counts and verdicts only: never a URL with credentials, a key, a token or a spec (a planted-secret test
checks it). Sending is ``capserve.tasks.events``; these functions only build.
"""

from __future__ import annotations

import enum
import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, JsonValue

from capserve.core.capacity.result import AcquireResult
from capserve.core.cluster.result import ClusterResult
from capserve.core.evaluation.result import EvaluationResult
from capserve.core.lease import Lease
from capserve.core.rollout.strategy import Strategy
from capserve.core.teardown.result import TeardownResult
from capserve.core.weights.result import WeightsResult

# Every capserve event id is a UUID derived from a business key under this namespace, so the same fact
# sent twice (a retried task, a restarted forwarder) carries the same id and Prefect stores it once.
_NAMESPACE = uuid.UUID("6f1d3c2e-5b0a-4e1f-9a57-6b7c0d2e9f31")


class EventName(enum.StrEnum):
    """Every event capserve emits (docs/events.md §1)."""

    CAPACITY_PURCHASED = "capserve.capacity.purchased"
    CAPACITY_ADOPTED = "capserve.capacity.adopted"
    CLUSTER_READY = "capserve.cluster.ready"
    WEIGHTS_STAGED = "capserve.weights.staged"
    ROLLOUT_READY = "capserve.rollout.ready"
    ROLLOUT_FAILED = "capserve.rollout.failed"
    ROLLOUT_ROLLED_BACK = "capserve.rollout.rolled-back"
    EVALUATION_PASSED = "capserve.evaluation.passed"
    EVALUATION_FAILED = "capserve.evaluation.failed"
    EVALUATION_INVALID = "capserve.evaluation.invalid"
    TEARDOWN_DONE = "capserve.teardown.done"
    TEARDOWN_INCOMPLETE = "capserve.teardown.incomplete"
    REVISION_PUBLISHED = "capserve.model.revision-published"
    CAPACITY_BLOCK_DELIVERED = "capserve.aws.capacity-block.delivered"
    CAPACITY_BLOCK_EXPIRATION_WARNING = "capserve.aws.capacity-block.expiration-warning"


CAMPAIGN_PREFIX = "capserve.campaign."


def campaign_resource_id(campaign_id: str) -> str:
    return f"{CAMPAIGN_PREFIX}{campaign_id}"


class CampaignRefs(BaseModel):
    """What a campaign's events point at, as far as the campaign has got."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    campaign_id: str = Field(min_length=1, max_length=64, description="The campaign.")
    reservation_id: str | None = Field(None, max_length=2048, description="Capacity reservation id or plan ARN.")
    region: str | None = Field(None, max_length=32, description="Region of the reservation and cluster.")
    cluster: str | None = Field(None, max_length=100, description="EKS cluster name.")
    repo: str | None = Field(None, max_length=200, description="Hub repo 'owner/name'.")
    revision_sha: str | None = Field(None, max_length=64, description="Pinned model revision (commit sha).")

    def related(self) -> tuple[dict[str, str], ...]:
        """Prefect related resources, each with its role."""
        out: list[dict[str, str]] = []
        if self.reservation_id:
            out.append(_resource(f"capserve.reservation.{self.reservation_id}", "reservation", self.reservation_id))
        if self.cluster:
            where = f"{self.region}." if self.region else ""
            out.append(_resource(f"capserve.cluster.{where}{self.cluster}", "cluster", self.cluster))
        if self.repo and self.revision_sha:
            name = f"{self.repo}@{self.revision_sha}"
            out.append(_resource(f"capserve.model.{name}", "model-revision", name))
        return tuple(out)

    def updated(self, **changes: Any) -> CampaignRefs:
        return self.model_copy(update={k: v for k, v in changes.items() if v is not None})


def _resource(resource_id: str, role: str, name: str) -> dict[str, str]:
    return {"prefect.resource.id": resource_id, "prefect.resource.role": role, "prefect.resource.name": name}


class CapserveEvent(BaseModel):
    """One event, ready to send: name, resource, related resources, payload, time and a stable id."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    event: str = Field(min_length=1, max_length=1024, description="Event name (EventName for capserve's own).")
    resource: dict[str, str] = Field(description="Prefect resource: 'prefect.resource.id' and a name.")
    related: tuple[dict[str, str], ...] = Field(default=(), max_length=16, description="Related resources.")
    payload: dict[str, JsonValue] = Field(default_factory=dict, description="Small, secret-free details.")
    occurred: AwareDatetime = Field(description="When it happened on the campaign's clock, the block time (UTC).")
    id: uuid.UUID = Field(description="Stable id: the same fact sent twice has the same id (Prefect dedupes).")

    def report_entry(self) -> dict[str, Any]:
        """report.json ``"events"`` entry: ``{"event", "occurred", ...payload}``, ``occurred`` the block time."""
        return {"event": self.event, "occurred": self.occurred.isoformat(), **self.payload}

    def stamped(self, wall: datetime) -> CapserveEvent:
        """The event as Prefect receives it: ``occurred`` the wall time ``wall``, the block time in the payload
        (``block_time``).

        Prefect's event feed and its events API show a recent window of wall time by default; an event stamped
        days ahead on the campaign's clock would be outside it. The id stays the one derived from the block time,
        so the same fact sent twice is still one event.
        """
        return self.model_copy(
            update={"occurred": wall, "payload": {**self.payload, BLOCK_TIME: self.occurred.isoformat()}}
        )


BLOCK_TIME = "block_time"
"""The payload key of an event's time on the campaign's clock (its ``occurred`` is wall time: docs/events.md §1)."""


def event_id(*key: str) -> uuid.UUID:
    """A deterministic event id from a business key."""
    return uuid.uuid5(_NAMESPACE, "\x1f".join(key))


def campaign_event(
    name: EventName | str,
    refs: CampaignRefs,
    *,
    occurred: datetime,
    payload: dict[str, JsonValue] | None = None,
    key: str = "",
) -> CapserveEvent:
    """An event about ``refs.campaign_id``; ``key`` tells one occurrence of the same event from another."""
    return CapserveEvent(
        event=str(name),
        resource={
            "prefect.resource.id": campaign_resource_id(refs.campaign_id),
            "prefect.resource.name": refs.campaign_id,
        },
        related=refs.related(),
        payload=payload or {},
        occurred=occurred,
        id=event_id(str(name), refs.campaign_id, key or occurred.isoformat()),
    )


# ---------------------------------------------------------------- lifecycle events, one builder each


def capacity_obtained(refs: CampaignRefs, acquired: AcquireResult, *, occurred: datetime) -> CapserveEvent:
    lease = _need_lease(acquired)
    name = EventName.CAPACITY_ADOPTED if lease.adopted else EventName.CAPACITY_PURCHASED
    return campaign_event(
        name,
        refs.updated(reservation_id=lease.reservation_id, region=lease.region),
        occurred=occurred,
        payload={
            "reservation_id": lease.reservation_id,
            "region": lease.region,
            "availability_zone": lease.availability_zone,
            "instance_type": lease.instance_type,
            "instance_count": lease.instance_count,
            "start": lease.start.isoformat(),
            "end": lease.end.isoformat(),
            "upfront_fee": lease.upfront_fee,
        },
        key=lease.reservation_id,
    )


def _need_lease(acquired: AcquireResult) -> Lease:
    if acquired.lease is None:
        raise ValueError("capacity_obtained needs an acquire result with a lease")
    return acquired.lease


def cluster_ready(refs: CampaignRefs, cluster: ClusterResult, *, occurred: datetime) -> CapserveEvent:
    return campaign_event(
        EventName.CLUSTER_READY,
        refs.updated(cluster=cluster.name, region=cluster.region),
        occurred=occurred,
        payload={
            "cluster": cluster.name,
            "kind": cluster.kind,
            "nodes_ready": cluster.nodes_ready,
            "gpus_allocatable": cluster.gpus_allocatable,
        },
        key=f"{cluster.region}/{cluster.name}/{occurred.isoformat()}",
    )


def weights_staged(refs: CampaignRefs, weights: WeightsResult, *, occurred: datetime) -> CapserveEvent:
    return campaign_event(
        EventName.WEIGHTS_STAGED,
        refs.updated(repo=weights.repo, revision_sha=weights.revision_sha),
        occurred=occurred,
        payload={
            "repo": weights.repo,
            "revision": weights.revision_sha,
            "files": weights.files,
            "bytes_total": weights.bytes_total,
            "layout": weights.layout_id,
            "verified": weights.verified,
        },
        key=f"{weights.repo}@{weights.revision_sha}",
    )


RolloutOutcome = Literal["ready", "failed", "rolled-back"]
_ROLLOUT_EVENTS: dict[str, EventName] = {
    "ready": EventName.ROLLOUT_READY,
    "failed": EventName.ROLLOUT_FAILED,
    "rolled-back": EventName.ROLLOUT_ROLLED_BACK,
}


def rollout_event(
    refs: CampaignRefs,
    outcome: RolloutOutcome,
    *,
    revision: str,
    strategy: Strategy | None,
    occurred: datetime,
    detail: str = "",
    rolled_back_to: str | None = None,
) -> CapserveEvent:
    """A rollout ended: ``outcome`` is "ready", "failed" or "rolled-back" (to ``rolled_back_to``)."""
    if outcome not in _ROLLOUT_EVENTS:
        raise ValueError(f"rollout outcome must be one of {sorted(_ROLLOUT_EVENTS)}, not {outcome!r}")
    # A rollout that failed before choosing how to roll out says "" (the payload's field is a string).
    payload: dict[str, JsonValue] = {"revision": revision, "strategy": strategy or ""}
    if detail:
        payload["detail"] = detail[:500]
    if rolled_back_to:
        payload["rolled_back_to"] = rolled_back_to
    return campaign_event(
        _ROLLOUT_EVENTS[outcome],
        refs.updated(revision_sha=revision),
        occurred=occurred,
        payload=payload,
        key=f"{revision}/{occurred.isoformat()}",
    )


_VERDICT_EVENTS: dict[str, EventName] = {
    "pass": EventName.EVALUATION_PASSED,
    "fail": EventName.EVALUATION_FAILED,
    "invalid": EventName.EVALUATION_INVALID,
}


def evaluation_done(refs: CampaignRefs, result: EvaluationResult, *, occurred: datetime) -> CapserveEvent:
    failed = sorted({g.name for g in result.gates if g.passed is False})
    return campaign_event(
        _VERDICT_EVENTS[result.verdict],
        refs,
        occurred=occurred,
        payload={"verdict": result.verdict, "model": result.model, "failed_gates": list(failed[:20])},
        key=occurred.isoformat(),
    )


def teardown_finished(refs: CampaignRefs, result: TeardownResult, *, complete: bool) -> CapserveEvent:
    """A teardown ended: why (``reason``), how many and which resources it deleted (the first 50 labels, e.g.
    ``eks-cluster/capserve-k3``), what it kept and what is still there."""
    return campaign_event(
        EventName.TEARDOWN_DONE if complete else EventName.TEARDOWN_INCOMPLETE,
        refs.updated(region=result.region),
        occurred=result.finished_at,
        payload={
            "reason": result.reason,
            "region": result.region,
            "dry_run": result.dry_run,
            "deleted": len(result.deleted),
            "deleted_resources": [str(r) for r in result.deleted[:50]],
            "kept": len(result.kept),
            "remaining": [str(r) for r in result.remaining[:20]],
        },
        key=result.finished_at.isoformat(),
    )


def revision_published(
    refs: CampaignRefs,
    *,
    repo: str,
    branch: str,
    pinned: str,
    head: str,
    occurred: datetime,
    home_region: str | None = None,
) -> CapserveEvent:
    """The campaign's branch on the Hub moved from its pinned sha to ``head``: one event per (campaign, head).

    ``home_region``: where the campaign's record lives (the redeploy it starts reads the record from there).
    """
    payload: dict[str, JsonValue] = {"repo": repo, "branch": branch, "pinned": pinned, "revision": head}
    if home_region:
        payload["home_region"] = home_region
    return campaign_event(
        EventName.REVISION_PUBLISHED,
        refs.updated(repo=repo, revision_sha=head),
        occurred=occurred,
        payload=payload,
        key=head,
    )
