"""Lifecycle events: names, the campaign resource and its related resources, small secret-free payloads,
stable ids, the report's ``events`` list, and the sender (to a real Prefect server)."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from capserve_sandbox.clock_client import plugged
from capserve_sandbox.clock_server import clock_server
from prefect.client.orchestration import get_client
from prefect.events.worker import EventsWorker

from capserve.core.capacity.result import AcquireResult
from capserve.core.cluster.result import ClusterResult
from capserve.core.evaluation.result import EvaluationResult, GateResult
from capserve.core.events import (
    CampaignRefs,
    EventName,
    capacity_obtained,
    cluster_ready,
    evaluation_done,
    revision_published,
    rollout_event,
    teardown_finished,
    weights_staged,
)
from capserve.core.lease import Lease
from capserve.core.report import CampaignReport
from capserve.core.teardown.result import TeardownResult
from capserve.core.weights.result import WeightsResult
from capserve.tasks.events import emit, event_body
from capserve.tasks.secrets import register_secret

T0 = datetime(2026, 12, 1, 11, 30, tzinfo=UTC)
SHA = "0123456789abcdef0123456789abcdef01234567"
SECRET = "sk-planted-5e3c7a1f9b2d4e6a8c0b"
REFS = CampaignRefs(campaign_id="k3-demo")


def lease(**changes: object) -> Lease:
    values: dict[str, object] = {
        "provider": "ec2-capacity-block", "region": "us-east-2", "availability_zone": "us-east-2a",
        "reservation_id": "cr-0123456789abcdef0", "start": T0, "end": T0 + timedelta(days=1),
        "instance_type": "p6-b300.48xlarge", "instance_count": 1, "upfront_fee": 2832.0,
    }
    return Lease.model_validate({**values, **changes})


def cluster() -> ClusterResult:
    return ClusterResult(
        kind="eks", name="capserve-k3-demo", region="us-east-2", endpoint=f"https://admin:{SECRET}@k8s",
        ca_data=SECRET, gpu_pool="gpu", nodes_ready=2, gpus_allocatable=16,
    )


def weights() -> WeightsResult:
    return WeightsResult(
        repo="moonshotai/Kimi-K3", revision_sha=SHA, files=3, bytes_total=10, bytes_per_node=[5, 5],
        bytes_naive_per_node=10, downloaded_bytes=10, uploaded_bytes=10, verified=True, layout_id="full",
        resharded=False,
        s3_uri=f"s3://b/{SECRET}/", manifest_uri=f"s3://b/{SECRET}/manifest.json",
    )


def evaluation(verdict: str) -> EvaluationResult:
    return EvaluationResult(
        url=f"https://user:{SECRET}@endpoint", model="kimi-k3", profiles=["smoke"], verdict=verdict,  # type: ignore[arg-type]
        gates=[GateResult(name="quality", value=0.2, threshold=0.5, passed=verdict != "fail", note=SECRET)],
        notes=[SECRET],
    )


def every_lifecycle_event() -> list[Any]:
    acquired = AcquireResult(campaign_id="k3-demo", outcome="bought", lease=lease(), message=SECRET)
    refs = REFS.updated(reservation_id="cr-0123456789abcdef0")
    return [
        capacity_obtained(REFS, acquired, occurred=T0),
        weights_staged(refs, weights(), occurred=T0),
        cluster_ready(refs, cluster(), occurred=T0),
        rollout_event(refs, "ready", revision=SHA, strategy="blue-green", occurred=T0),
        evaluation_done(refs, evaluation("pass"), occurred=T0),
        teardown_finished(refs, TeardownResult(
            campaign_id="k3-demo", region="us-east-2", reason="campaign-finished", dry_run=False, finished_at=T0,
            deleted=("eks/cluster",),
        ), complete=True),
    ]


def test_each_builder_names_its_fact_about_the_campaign() -> None:
    names = [e.event for e in every_lifecycle_event()]
    assert names == [
        "capserve.capacity.purchased", "capserve.weights.staged", "capserve.cluster.ready",
        "capserve.rollout.ready", "capserve.evaluation.passed", "capserve.teardown.done",
    ]
    for event in every_lifecycle_event():
        assert event.resource == {
            "prefect.resource.id": "capserve.campaign.k3-demo", "prefect.resource.name": "k3-demo"
        }
    adopted = AcquireResult(campaign_id="k3-demo", outcome="adopted", lease=lease(adopted=True, upfront_fee=0))
    assert capacity_obtained(REFS, adopted, occurred=T0).event == EventName.CAPACITY_ADOPTED


def test_related_resources_carry_roles_as_far_as_the_campaign_got() -> None:
    staged = weights_staged(REFS.updated(reservation_id="cr-1", region="us-east-2"), weights(), occurred=T0)
    assert {r["prefect.resource.role"]: r["prefect.resource.id"] for r in staged.related} == {
        "reservation": "capserve.reservation.cr-1",
        "model-revision": f"capserve.model.moonshotai/Kimi-K3@{SHA}",
    }
    ready = cluster_ready(staged_refs := REFS.updated(reservation_id="cr-1"), cluster(), occurred=T0)
    assert "capserve.cluster.us-east-2.capserve-k3-demo" in [r["prefect.resource.id"] for r in ready.related]
    assert staged_refs.related() == ({"prefect.resource.id": "capserve.reservation.cr-1",
                                      "prefect.resource.role": "reservation", "prefect.resource.name": "cr-1"},)
    assert staged.payload["revision"] == SHA


def test_no_payload_carries_a_secret_planted_in_the_results() -> None:
    for event in every_lifecycle_event():
        text = json.dumps(event.model_dump(mode="json"))
        assert SECRET not in text, event.event
        assert len(json.dumps(event.payload)) < 1000  # small: ids, counts, verdicts


def test_verdicts_and_rollout_outcomes_map_to_their_events() -> None:
    assert [evaluation_done(REFS, evaluation(v), occurred=T0).event for v in ("pass", "fail", "invalid")] == [
        "capserve.evaluation.passed", "capserve.evaluation.failed", "capserve.evaluation.invalid",
    ]
    assert evaluation_done(REFS, evaluation("fail"), occurred=T0).payload["failed_gates"] == ["quality"]
    back = rollout_event(REFS, "rolled-back", revision="b" * 40, strategy="canary", occurred=T0, rolled_back_to=SHA)
    assert back.event == "capserve.rollout.rolled-back" and back.payload["rolled_back_to"] == SHA
    assert rollout_event(REFS, "failed", revision=SHA, strategy="x", occurred=T0).event == "capserve.rollout.failed"
    with pytest.raises(ValueError, match="rollout outcome must be one of"):
        rollout_event(REFS, "exploded", revision=SHA, strategy="x", occurred=T0)  # type: ignore[arg-type]


def test_the_same_fact_has_the_same_id_and_another_fact_another() -> None:
    def published(head: str, at: datetime) -> uuid.UUID:
        return revision_published(REFS, repo="o/m", branch="main", pinned=SHA, head=head, occurred=at).id

    assert published("a" * 40, T0) == published("a" * 40, T0 + timedelta(minutes=5))
    assert published("a" * 40, T0) != published("b" * 40, T0)
    other = CampaignRefs(campaign_id="other")
    assert revision_published(other, repo="o/m", branch="main", pinned=SHA, head="a" * 40, occurred=T0).id != (
        published("a" * 40, T0)
    )


def test_the_report_lists_the_events_with_their_times() -> None:
    report = CampaignReport(campaign="k3-demo")
    report.events.extend(every_lifecycle_event()[:2])
    out = report.to_json()
    assert out["events"][0]["event"] == "capserve.capacity.purchased"
    assert out["events"][0]["occurred"] == T0.isoformat() and out["events"][0]["reservation_id"]
    assert "## Events" in report.to_markdown() and "`capserve.weights.staged`" in report.to_markdown()


def test_emit_redacts_the_runs_secrets_and_the_server_stores_one_copy_of_a_repeat() -> None:
    register_secret(SECRET)
    built = rollout_event(REFS, "failed", revision=SHA, strategy="x", occurred=datetime.now(UTC),
                          detail=f"pod said {SECRET}")
    sent = emit(built)
    emit(built)  # a retried stage sends the same fact again
    assert SECRET not in json.dumps(sent.model_dump(mode="json")) and SECRET not in json.dumps(event_body(built))
    assert sent.id == built.id
    EventsWorker.drain_all()
    stored = asyncio.run(_stored_events(str(built.id)))
    assert [e["event"] for e in stored] == ["capserve.rollout.failed"]
    assert SECRET not in json.dumps(stored)


async def _stored_events(event_id: str) -> list[dict[str, Any]]:
    """Events with this id on the server (the persister writes in batches: wait for it, boundedly)."""
    async with get_client() as client:
        for _ in range(60):
            answer = await client._client.post(
                "/events/filter", json={"filter": {"id": {"id": [event_id]}}, "limit": 10}
            )
            found = answer.json()["events"]
            if found:
                await asyncio.sleep(1)  # a duplicate, if any, would be in the same or the next batch
                answer = await client._client.post(
                    "/events/filter", json={"filter": {"id": {"id": [event_id]}}, "limit": 10}
                )
                return list(answer.json()["events"])
            await asyncio.sleep(0.5)
    return []


def test_on_a_simulated_clock_an_event_occurs_at_wall_time_with_its_block_time_in_the_payload(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    block_time = datetime.now(UTC) + timedelta(days=3)  # a simulated block runs days ahead of the server's clock
    with clock_server() as url:
        for key, value in plugged(url).items():
            monkeypatch.setenv(key, value)
        before = datetime.now(UTC)
        sent = emit(rollout_event(REFS, "ready", revision=SHA, strategy="recreate", occurred=block_time))
        after = datetime.now(UTC)
    EventsWorker.drain_all()
    [stored] = asyncio.run(_stored_events(str(sent.id)))
    assert before <= datetime.fromisoformat(stored["occurred"]) <= after
    assert stored["payload"]["block_time"] == block_time.isoformat()
