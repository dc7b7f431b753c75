"""The campaign's report rendered from its record by whichever run comes after the one that held the block (a
redeploy, the scheduled teardown), on whichever host: nothing of the first host's files is needed."""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from pathlib import Path

import pytest

from capserve.core.block_cost import block_ledger, campaign_report
from capserve.core.campaign_cost import campaign_cost_inputs
from capserve.core.cost.causes import Cause
from capserve.core.events import CapserveEvent
from capserve.core.record import CampaignRecord, StageEntry
from capserve.core.redeploy import RedeployEntry
from capserve.core.stages import Stage, StageStatus
from capserve.core.teardown.result import TeardownResult
from capserve.tasks.reporting import REPORT_DIR_ENV, write_campaign_report, write_report_files
from tests.unit.test_campaign_cost import lease, minute, served_day, spec


def event(name: str, at: datetime) -> CapserveEvent:
    return CapserveEvent(event=name, resource={"prefect.resource.id": "capserve.campaign.k3-demo"}, occurred=at,
                         id=uuid.uuid4())


def held_block() -> CampaignRecord:
    """The record as the S3 copy has it once the serving run ended (written at minute 90, serving until the drain
    point projected) and one redeploy took the endpoint down from minute 400 to 460."""
    report = served_day()
    report.events = [event("capserve.evaluation.passed", minute(80))]
    inputs = campaign_cost_inputs(report, spec(), lease(), written_at=minute(90))
    entry = RedeployEntry(
        from_sha="a" * 40, to_sha="b" * 40, trigger="revision-published", strategy="recreate", verdict="pass",
        outcome="promoted", serving_sha="b" * 40, started_at=minute(390), down_from=minute(400), ended_at=minute(460),
        detail="promoted", events=(event("capserve.rollout.ready", minute(455)),),
    )
    record = CampaignRecord.new("k3-demo", minute(-600)).with_block_report(report, inputs, now=minute(90))
    stored = record.with_redeploy(entry).model_dump_json()
    return CampaignRecord.model_validate_json(stored)  # through JSON, as every run reads it from S3


def test_a_redeploy_on_another_host_renders_the_campaigns_report_with_the_redeploy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = held_block()
    assert record.report is not None
    write_report_files(record.report, tmp_path / "first-host")  # the serving run's files, left where it ran
    monkeypatch.setenv(REPORT_DIR_ENV, str(tmp_path / "second-host" / "{campaign}"))

    written = write_campaign_report(record)

    assert written == tmp_path / "second-host" / "k3-demo" / "report.json"
    document = json.loads(written.read_text())
    assert [(r["to"], r["outcome"]) for r in document["redeploys"]] == [("b" * 40, "promoted")]
    assert [e["event"] for e in document["events"]] == ["capserve.evaluation.passed", "capserve.rollout.ready"]
    assert [s["name"] for s in document["stages"]] == [s.name.value for s in record.report.stages]
    # The block's ledger: the redeploy's hour is lost, not served, and every paid minute still has one cause.
    assert document["cost"]["lost_gpu_minutes"][Cause.REDEPLOYS.value] == 60 * 8
    assert document["cost"]["paid_gpu_minutes"] == document["cost"]["serving_gpu_minutes"] + sum(
        document["cost"]["lost_gpu_minutes"].values())
    markdown = (written.parent / "report.md").read_text()
    headings = [line for line in markdown.splitlines() if line.startswith("## ")]
    assert (headings.count("## Cost"), headings.count("## Redeploys"), headings.count("## Events")) == (1, 1, 1)
    assert "capserve.rollout.ready" in markdown.split("## Events", 1)[1]
    assert (written.parent / "cost_timeline.png").read_bytes().startswith(b"\x89PNG")


def test_the_teardown_renders_it_with_its_own_section_and_the_drain_settles_the_projection() -> None:
    drained = held_block().with_stage(
        Stage.DRAIN, StageEntry(status=StageStatus.COMPLETED, started_at=minute(1406), ended_at=minute(1408))
    )
    done = TeardownResult(campaign_id="k3-demo", region="us-east-2", reason="drain-deadline", dry_run=False,
                          deleted=("eks-cluster/capserve-k3-demo",), finished_at=minute(1412))

    report = campaign_report(drained, done)

    assert report is not None and report.teardown == done and report.evaluation is None
    assert report.cost is not None and not any("projected" in note for note in report.cost.notes)
    assert any("the drain run ended at 2026-12-04 10:58 UTC" in note for note in report.cost.notes)
    again = campaign_report(drained, done)  # a teardown that renders the report twice adds nothing twice
    assert again is not None and len(again.events) == len(report.events) == 2


def test_before_a_run_has_held_a_block_there_is_nothing_to_render(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(REPORT_DIR_ENV, str(tmp_path / "{campaign}"))
    nothing = CampaignRecord.new("k3-demo", minute(0))
    assert campaign_report(nothing) is None and block_ledger(nothing) is None
    assert write_campaign_report(nothing) is None
    assert list(tmp_path.iterdir()) == []


def test_the_campaigns_artifact_becomes_the_rendered_report_without_its_images(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The UI's copy of the report is the campaign's one artifact, updated in place by the run that renders it."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    monkeypatch.setenv(REPORT_DIR_ENV, str(tmp_path / "{campaign}"))
    campaign = f"render-{uuid.uuid4().hex[:8]}"
    record = held_block()
    assert record.report is not None
    record = record.model_copy(update={"campaign_id": campaign,
                                       "report": record.report.model_copy(update={"campaign": campaign})})
    write_campaign_report(record)

    with get_client(sync_client=True) as client:
        latest = client.read_latest_artifacts(artifact_filter=ArtifactFilter(
            key=ArtifactFilterKey(any_=[f"{campaign}-report"])))
    assert [artifact.key for artifact in latest] == [f"{campaign}-report"]
    shown = str(latest[0].data)
    assert "## Redeploys" in shown and "## Cost" in shown and "![" not in shown


def test_a_record_that_kept_its_reports_host_path_still_reads() -> None:
    """A campaign in flight when this version came: its record names the folder of its report on one host."""
    held = held_block()
    stored = json.loads(held.model_dump_json())
    assert CampaignRecord.model_validate({**stored, "report_dir": "/home/ops/out/k3-demo"}) == held
