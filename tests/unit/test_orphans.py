"""The orphan check, as data: which campaign a crashed run belonged to, and which runs of it are still live."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from capserve.core.orphans import RunFacts, campaign_in_parameters, left_alone, live_runs, orphan_target
from capserve.core.schedule import campaign_tag
from capserve.core.spec import load_spec

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kimi-k3-sandbox.yaml"
NOW = datetime(2026, 12, 1, 6, 0, tzinfo=UTC)
SOON = timedelta(minutes=30)


def run(run_id: str, state: str, *, campaign: str | None = "k3", start: datetime | None = None) -> RunFacts:
    return RunFacts(id=run_id, name=f"run-{run_id}", state_type=state, expected_start=start, campaign_id=campaign)


def test_the_campaign_comes_from_the_tag_the_campaign_id_or_the_spec() -> None:
    assert campaign_in_parameters({"campaign_id": "k9"}, ["capserve.io/scheduled", campaign_tag("k3")]) == "k3"
    assert campaign_in_parameters({"campaign_id": "k4", "region": "us-east-2"}) == "k4"
    assert campaign_in_parameters({"spec": {"name": "k5"}}) == "k5"
    assert campaign_in_parameters({"regions": ["us-east-2"]}) is None


def test_a_campaign_run_names_its_spec_and_a_serve_run_its_id_and_home_region() -> None:
    spec = load_spec(EXAMPLE)
    target = orphan_target("campaign", {"spec": spec.model_dump(mode="json")})
    assert not isinstance(target, str)
    assert (target.campaign_id, target.home_region, target.spec) == (spec.campaign_id, None, spec)
    served = orphan_target("serve", {"campaign_id": "k3", "region": "us-east-2", "reservation_id": "cr-1"})
    assert not isinstance(served, str)
    assert (served.campaign_id, served.home_region, served.spec) == ("k3", "us-east-2", None)


def test_anything_unclear_is_a_reason_not_to_tear_down() -> None:
    assert "not a campaign run" in str(orphan_target("reaper", {"regions": ["us-east-2"]}))
    assert "no longer validates" in str(orphan_target("campaign", {"spec": {"name": "k3"}}))
    assert "names no campaign_id" in str(orphan_target("serve", {"campaign_id": "k3"}))


def test_live_means_running_pending_or_due_soon_and_only_of_this_campaign() -> None:
    runs = [
        run("crashed", "CRASHED"),
        run("running", "RUNNING"),
        run("pending", "PENDING"),
        run("late", "SCHEDULED", start=NOW - timedelta(minutes=5)),
        run("soon", "SCHEDULED", start=NOW + timedelta(minutes=10)),
        run("later", "SCHEDULED", start=NOW + timedelta(days=2)),  # the lease's drain and teardown
        run("done", "COMPLETED"),
        run("other", "RUNNING", campaign="k4"),
        run("unknown", "RUNNING", campaign=None),
    ]
    live = live_runs("k3", runs, now=NOW, soon=SOON)
    assert [r.id for r in live] == ["running", "pending", "late", "soon"]
    assert live_runs("k3", [runs[0], runs[5], runs[6]], now=NOW, soon=SOON) == []
    message = left_alone("k3", live)
    assert message.startswith("campaign k3 still has live runs: run-running (running, RUNNING)")
    assert "nothing was torn down" in message


def test_a_stage_subflow_left_running_by_its_crashed_parent_is_not_a_live_run() -> None:
    # Stage subflows carry the campaign's tag; when the campaign run's process dies they stay Running.
    zombie = run("sub", "RUNNING").model_copy(update={"subflow": True})
    assert live_runs("k3", [zombie], now=NOW, soon=SOON) == []
