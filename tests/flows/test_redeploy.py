"""The redeploy flow on one running sandbox campaign: a good revision is promoted, a bad one rolled back, a second
event for a commit does nothing, and it refuses inside the drain window and without a cluster.

The tests share one campaign (module-scoped, the costly part) and run in file order: each one starts from
what the one before left serving.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from capserve_sandbox.environment import SandboxEndpoints, sandbox

from capserve.campaign.context import CampaignContext, RunOptions
from capserve.campaign.runner import finish
from capserve.core.errors import PermanentError
from capserve.core.record import CampaignRecord, RecordRef
from capserve.core.redeploy import RedeployEntry
from capserve.core.report import CampaignReport
from capserve.core.settings import RecordSettings, Settings
from capserve.core.spec import load_spec
from capserve.flows.campaign import campaign
from capserve.flows.redeploy import redeploy
from capserve.tasks.locations import record_ref
from capserve.tasks.record_store import change_record, load_record
from capserve.tasks.reporting import REPORT_DIR_ENV
from tests.clocks import moved_to
from tests.flows.test_campaign import SMALL_LOAD, spec_file

pytestmark = pytest.mark.slow  # whole campaigns, minutes: ranked before the other flows (tests/conftest.py)

REGION = "us-east-2"  # the example's first capacity region: the campaign's home, where its record lives


@dataclass
class Running:
    far_ends: SandboxEndpoints
    campaign_id: str
    ref: RecordRef
    first: CampaignReport
    out: Path

    def record(self) -> CampaignRecord:
        found = load_record.fn(self.ref)
        assert found is not None
        return found

    def redeploy(self, sha: str, name: str) -> RedeployEntry:
        entry = redeploy(self.campaign_id, sha, trigger="revision-published", region=REGION,
                         hub_endpoint=self.far_ends.hub, out_dir=self.out / name)
        assert isinstance(entry, RedeployEntry)
        return entry


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    out = tmp_path_factory.mktemp("redeploy")
    with sandbox(served_model_name="kimi-k3") as far_ends:
        spec = load_spec(spec_file(out, evaluation__load=SMALL_LOAD))
        first = campaign(spec, out_dir=out / "campaign", hub_endpoint=far_ends.hub)  # keeps serving
        yield Running(far_ends, spec.campaign_id, record_ref(spec, RecordSettings()), first, out)


def test_a_good_revision_is_promoted_and_a_second_event_for_it_does_nothing(
    running: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert running.first.weights is not None
    before = running.first.weights.revision_sha
    good = running.far_ends.publish_revision()
    # The redeploy runs on another host: none of the campaign run's files there, its own folder for reports.
    monkeypatch.setenv(REPORT_DIR_ENV, str(running.out / "other-host" / "{campaign}"))

    entry = running.redeploy(good, "good")

    assert (entry.from_sha, entry.to_sha, entry.trigger) == (before, good, "revision-published")
    assert (entry.strategy, entry.verdict, entry.outcome, entry.serving_sha) == ("recreate", "pass", "promoted", good)
    record = running.record()
    assert record.last_good_rollout is not None and record.last_good_rollout.config.revision_sha == good
    assert record.redeploys == (entry,)
    written = json.loads((running.out / "good" / "report.json").read_text())
    assert written["rollout"]["revision"] == record.last_good_rollout.config.revision  # type: ignore[union-attr]
    assert written["evaluation"]["verdict"] == "pass"
    # Promoted on the gate before traffic alone: no load profile held back the switch or counted in the downtime.
    assert written["evaluation"]["load"] is None
    # A new revision of the same architecture: the compiled graphs of the first rollout serve it (a warm start).
    assert running.first.rollout is not None
    assert written["rollout"]["compile_cache"]["key"] == running.first.rollout.compile_cache["key"]
    assert written["rollout"]["compile_cache"]["result"] == "hit"
    phases = {p.name: p for p in entry.phases}
    assert phases["start"].note == "warm compile cache" and "gate" in phases
    # ... and renders the campaign's report there from the record: the first run's stages, this redeploy, and its
    # downtime in the block's ledger.
    rendered = json.loads((running.out / "other-host" / running.campaign_id / "report.json").read_text())
    assert [s["name"] for s in rendered["stages"]] == [s.name.value for s in running.first.stages]
    assert [(r["to"], r["outcome"]) for r in rendered["redeploys"]] == [(good, "promoted")]
    # (Its downtime here is seconds, which the ledger's minutes round to 0: its phases are listed, to the second.)
    markdown = (running.out / "other-host" / running.campaign_id / "report.md").read_text()
    assert "### Redeploys' downtime, by phase" in markdown and f"redeploy to {good[:8]} (promoted)" in markdown

    again = redeploy(running.campaign_id, good, region=REGION, hub_endpoint=running.far_ends.hub,
                     out_dir=running.out / "again", return_state=True)
    assert (again.type.value, again.name) == ("COMPLETED", "Skipped"), again
    assert f"already serves revision {good}" in (again.message or "")
    assert running.record().redeploys == (entry,)  # nothing staged, rolled out or recorded
    assert not (running.out / "again").exists()


def test_a_bad_revision_fails_its_evaluation_and_is_rolled_back_to_the_good_one(running: Running) -> None:
    good = running.record().redeploys[-1].to_sha
    bad = running.far_ends.publish_revision(good=False)

    entry = running.redeploy(bad, "bad")

    assert (entry.from_sha, entry.to_sha, entry.verdict, entry.outcome) == (good, bad, "fail", "rolled-back")
    assert entry.serving_sha == good and "quality" in entry.detail
    record = running.record()
    assert record.last_good_rollout is not None and record.last_good_rollout.config.revision_sha == good
    written = json.loads((running.out / "bad" / "report.json").read_text())
    assert written["rollout"]["rolled_back"] is True
    assert [(a["revision"] == written["rollout"]["revision"], a["rollback"]) for a in written["rollout"]["attempts"]] \
        == [(False, False), (True, True)]  # the bad configuration, then the good one back
    assert [(r["from"], r["to"], r["outcome"]) for r in written["redeploys"]] == [
        (running.first.weights.revision_sha, good, "promoted"),  # type: ignore[union-attr]
        (good, bad, "rolled-back"),
    ]
    assert set(written["redeploys"][1]) >= {"from", "to", "trigger", "strategy", "verdict", "outcome"}
    assert "rolled-back" in [e["event"].rsplit(".", 1)[-1] for e in written["events"]]

    # The bad commit was tried: its event again does nothing.
    again = redeploy(running.campaign_id, bad, region=REGION, hub_endpoint=running.far_ends.hub,
                     return_state=True)
    assert again.name == "Skipped" and "already tried" in (again.message or "")

    # The report a campaign run writes lists both: it copies them from the record (capserve.campaign.runner).
    spec = load_spec(spec_file(running.out, evaluation__load=SMALL_LOAD))
    ctx = CampaignContext.start(spec, Settings(), RunOptions(out_dir=running.out / "final", staging_dir=running.out))
    ctx.start_saving()  # as a campaign run has it from acquire on
    finish(ctx, None, lambda context, reason: pytest.fail("nothing to tear down"))
    final = json.loads((running.out / "final" / "report.json").read_text())
    assert [(r["to"], r["outcome"]) for r in final["redeploys"]] == [(good, "promoted"), (bad, "rolled-back")]
    assert "## Redeploys" in (running.out / "final" / "report.md").read_text()


def test_a_campaign_inside_its_drain_window_or_without_a_cluster_is_refused(running: Running) -> None:
    record = running.record()
    assert record.lease is not None
    inside = record.lease.end - timedelta(minutes=33)  # drain_before_end_minutes is 34
    with moved_to(inside), pytest.raises(PermanentError, match="inside its drain window.*drain_before_end_minutes"):
        redeploy(running.campaign_id, "0" * 40, region=REGION, hub_endpoint=running.far_ends.hub)

    # A record that says "brought up" while AWS has no cluster of that campaign: AWS's tags are the truth.
    ghost = record.model_copy(update={"campaign_id": "k3-ghost"})
    ghost_ref = running.ref.model_copy(update={"campaign_id": "k3-ghost"})
    change_record.fn(ghost_ref, [lambda _: ghost])
    with pytest.raises(PermanentError, match="campaign k3-ghost has no cluster to redeploy on"):
        redeploy("k3-ghost", running.far_ends.publish_revision(), region=REGION, hub_endpoint=running.far_ends.hub)
    assert load_record.fn(ghost_ref) == ghost  # refused: nothing recorded
