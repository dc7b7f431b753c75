"""The Hub watcher: running campaigns whose branch moved on the (local) Hub get one revision-published event
per new commit; campaigns over, torn down or pinned to a commit are left alone."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from capserve_sandbox.aws import moto_sandbox
from capserve_sandbox.hub import local_hub
from capserve_sandbox.hub.server import HubState
from prefect.client.orchestration import get_client

from capserve.core.hub_watch import watch_target
from capserve.core.lease import Lease
from capserve.core.record import CampaignRecord, RolloutRecord, StageEntry, record_key
from capserve.core.spec import CampaignSpec, load_spec
from capserve.core.stages import Stage, StageStatus
from capserve.flows.hub_watch import watch_hub
from tests.unit.rollout_fixtures import config_for, k3_plan

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kimi-k3-sandbox.yaml"
REGION = "us-east-2"
BUCKET = "capserve-records-test"
REPO = "capserve-sandbox/watched"
NOW = datetime.now(UTC)


def spec(campaign: str, revision: str = "main") -> CampaignSpec:
    data = load_spec(EXAMPLE).model_dump(mode="json")
    data["name"] = campaign
    data["model"]["revision"] = revision
    return CampaignSpec.model_validate(data)


def record(campaign: str, pinned: str, *, revision: str = "main", end: datetime | None = None) -> CampaignRecord:
    lease = Lease(
        provider="ec2-capacity-block", region=REGION, availability_zone="us-east-2a", reservation_id="cr-0abc",
        start=NOW - timedelta(hours=1), end=end or NOW + timedelta(days=1), instance_type="p6-b300.48xlarge",
        instance_count=1, upfront_fee=1.0,
    )
    weights = StageEntry(status=StageStatus.COMPLETED, outputs={"repo": REPO, "revision_sha": pinned})
    return (
        CampaignRecord.new(campaign, NOW)
        .with_spec(spec(campaign, revision), now=NOW)
        .with_lease(lease, offering_id=None, now=NOW)
        .with_stage(Stage.STAGE_WEIGHTS, weights)
    )


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, HubState, Path]]:
    repo_dir = tmp_path / "repo"
    repo_dir.mkdir()
    (repo_dir / "config.json").write_text('{"v": 1}')
    states: list[HubState] = []
    with moto_sandbox(REGION), local_hub({REPO: repo_dir}, states=states) as hub:
        monkeypatch.setenv("CAPSERVE_RECORDS__BUCKET", BUCKET)
        monkeypatch.setenv("CAPSERVE_RECORDS__REGION", REGION)
        boto3.client("s3", region_name=REGION).create_bucket(
            Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION}
        )
        yield hub, states[0], repo_dir


def store(*records: CampaignRecord) -> None:
    s3 = boto3.client("s3", region_name=REGION)
    for r in records:
        s3.put_object(Bucket=BUCKET, Key=record_key(r.campaign_id), Body=r.model_dump_json().encode())


def test_a_moved_branch_is_announced_once_per_campaign_and_commit(
    world: tuple[str, HubState, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    hub, state, repo_dir = world
    first = state.repos[REPO].sha
    over = record("over", first, end=NOW - timedelta(minutes=1))
    store(record("live", first), record("pinned", first, revision=first), over)
    assert watch_hub([REGION], hub_endpoint=hub) == []  # nothing moved

    (repo_dir / "config.json").write_text('{"v": 2}')
    second = state.publish(REPO)
    assert second != first
    assert watch_hub([REGION], hub_endpoint=hub) == [f"live@{second}"]  # not "pinned", not "over"
    assert watch_hub([REGION], hub_endpoint=hub) == []  # once per (campaign, commit)

    (repo_dir / "config.json").write_text('{"v": 3}')
    third = state.publish(REPO)
    # As a deployment run: no parameter, the worker's environment names the Hub (as for every scheduled run).
    monkeypatch.setenv("CAPSERVE_HUB_ENDPOINT", hub)
    assert watch_hub([REGION]) == [f"live@{third}"]
    events = asyncio.run(_published("live"))
    assert sorted(e["payload"]["revision"] for e in events) == sorted([second, third])
    assert all(e["payload"]["pinned"] == first for e in events)


def test_the_served_commit_is_the_last_good_rollout_and_a_torn_down_campaign_is_not_watched() -> None:
    staged, rolled = "a" * 40, "b" * 40
    served = config_for(k3_plan()).model_copy(update={"revision_sha": rolled})
    rollout = RolloutRecord(color="blue", config=served, ready_at=NOW)
    target, _ = watch_target(record("c", staged).with_rollout(rollout), NOW)
    assert target is not None and target.pinned == rolled and target.branch == "main"
    done = record("c", staged).with_stage(Stage.TEARDOWN, StageEntry(status=StageStatus.COMPLETED))
    assert watch_target(done, NOW) == (None, "torn down")
    no_weights = CampaignRecord.new("c", NOW).with_spec(spec("c"), now=NOW)
    assert watch_target(no_weights, NOW)[0] is None


async def _published(campaign: str) -> list[dict[str, Any]]:
    query = {"filter": {
        "event": {"name": ["capserve.model.revision-published"]},
        "resource": {"id": [f"capserve.campaign.{campaign}"]},
    }, "limit": 50}
    async with get_client() as client:
        for _ in range(60):
            found = (await client._client.post("/events/filter", json=query)).json()["events"]
            if len(found) >= 2:
                return list(found)
            await asyncio.sleep(0.5)
    return list(found)


def test_the_reaper_looks_where_the_recorded_campaigns_leases_are(world: tuple[str, HubState, Path]) -> None:
    """A campaign whose record lives in its home region may hold its block elsewhere: the reaper scans both."""
    from capserve.core.settings import RecordSettings
    from capserve.tasks.maintenance import regions_of_records

    west = record("west", "a" * 40)
    assert west.lease is not None
    store(west.with_lease(west.lease.model_copy(update={"region": "us-west-2"}), offering_id=None, now=NOW),
          record("east", "a" * 40))
    records = RecordSettings(bucket=BUCKET, region=REGION)
    assert regions_of_records([REGION, REGION], records) == [REGION, "us-west-2"]
