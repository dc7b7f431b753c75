"""Finishing a campaign's report after serving: the redeploys and their events join what the serve run wrote."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from capserve.core.events import CapserveEvent
from capserve.core.markdown import merge_sections
from capserve.core.redeploy import RedeployEntry
from capserve.core.report import CampaignReport
from capserve.tasks.reporting import amend_report_files

T0 = datetime(2026, 12, 3, 11, 30, tzinfo=UTC)


def event(name: str, at: datetime) -> CapserveEvent:
    return CapserveEvent(
        event=name, resource={"prefect.resource.id": "capserve.campaign.demo"}, occurred=at, id=uuid.uuid4(),
        payload={"revision": "b" * 40},
    )


def test_redeploys_and_their_events_are_added_once_in_time_order(tmp_path: Path) -> None:
    served = CampaignReport(campaign="demo", events=[event("capserve.evaluation.passed", T0)])
    (tmp_path / "report.json").write_text(json.dumps(served.to_json()))
    (tmp_path / "report.md").write_text(served.to_markdown(images=False))
    rolled_back = event("capserve.rollout.rolled-back", T0 + timedelta(hours=9))
    entry = RedeployEntry(
        from_sha="a" * 40, to_sha="b" * 40, trigger="revision-published", strategy="recreate", verdict="fail",
        outcome="rolled-back", serving_sha="a" * 40, started_at=T0 + timedelta(hours=8),
        ended_at=T0 + timedelta(hours=9), detail="its evaluation verdict is fail", events=(rolled_back,),
    )
    partial = CampaignReport(campaign="demo", redeploys=[entry], events=list(entry.events))

    for _ in range(2):  # a teardown run that finishes the report again adds no event twice
        assert amend_report_files(partial, tmp_path, heading="After serving") == tmp_path / "report.json"

    document = json.loads((tmp_path / "report.json").read_text())
    assert [e["event"] for e in document["events"]] == ["capserve.evaluation.passed", "capserve.rollout.rolled-back"]
    assert [(r["from"], r["to"], r["outcome"]) for r in document["redeploys"]] == [("a" * 40, "b" * 40, "rolled-back")]
    assert "events" not in document["redeploys"][0]  # report.json's redeploy entries keep their shape
    markdown = (tmp_path / "report.md").read_text()
    assert (markdown.count("# After serving"), markdown.count("## Redeploys"), markdown.count("## Events")) == (1, 1, 1)
    events_table = markdown.split("## Events", 1)[1]
    assert "capserve.evaluation.passed" in events_table and "capserve.rollout.rolled-back" in events_table


def test_a_section_the_report_has_is_replaced_where_it_stands() -> None:
    """The block's ledger rebuilt after the redeploys is the report's one Cost section, where the serving run's
    projection stood; what is new comes under the heading."""
    served = "# Campaign `demo`\n\n## Capacity: bought\n\nfee\n\n## Cost\n\nprojected\n\n### Timeline\n\nold\n\n" \
        "## Events\n\n| e |\n"
    after_redeploy = merge_sections(served, "## Cost\n\nafter one redeploy\n\n## Redeploys\n\none\n",
                                    heading="After redeploy 1")
    final = merge_sections(after_redeploy, "## Teardown\n\ndeleted\n\n## Cost\n\nthe block's\n\n## Redeploys\n\none\n",
                           heading="After serving")
    assert final == (
        "# Campaign `demo`\n\n## Capacity: bought\n\nfee\n\n## Cost\n\nthe block's\n\n## Events\n\n| e |\n\n"
        "# After redeploy 1\n\n## Redeploys\n\none\n\n# After serving\n\n## Teardown\n\ndeleted\n"
    )


def test_nothing_to_finish_without_a_report(tmp_path: Path) -> None:
    assert amend_report_files(CampaignReport(campaign="demo"), tmp_path, heading="After serving") is None
    assert list(tmp_path.iterdir()) == []


def test_the_campaigns_artifact_becomes_the_amended_report_without_its_images(tmp_path: Path) -> None:
    """The UI's copy of the report is the campaign's one artifact, updated in place by the run that amends it."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    campaign = f"amend-{uuid.uuid4().hex[:8]}"
    served = CampaignReport(campaign=campaign, events=[event("capserve.evaluation.passed", T0)])
    (tmp_path / "report.json").write_text(json.dumps(served.to_json()))
    (tmp_path / "report.md").write_text(served.to_markdown() + "\n![timeline](timeline.png)\n")
    entry = RedeployEntry(
        from_sha="a" * 40, to_sha="b" * 40, trigger="revision-published", strategy="recreate", verdict="pass",
        outcome="promoted", serving_sha="b" * 40, started_at=T0 + timedelta(hours=8),
        ended_at=T0 + timedelta(hours=9), detail="promoted",
    )
    amend_report_files(CampaignReport(campaign=campaign, redeploys=[entry]), tmp_path, heading="After redeploy 1")

    with get_client(sync_client=True) as client:
        latest = client.read_latest_artifacts(artifact_filter=ArtifactFilter(
            key=ArtifactFilterKey(any_=[f"{campaign}-report"])))
    assert [artifact.key for artifact in latest] == [f"{campaign}-report"]
    shown = str(latest[0].data)
    assert "# After redeploy 1" in shown and "## Redeploys" in shown and "![" not in shown
