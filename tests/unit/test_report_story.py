"""The report on the block's clock: a scheduled serve run's report starts with the purchase the campaign run made
two days earlier and the cluster's preparation, lists them among its events, and shows its plots as images."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from capserve.core.capacity.result import AcquireResult
from capserve.core.cluster.result import PreparedCluster
from capserve.core.evaluation.result import EvaluationResult
from capserve.core.lease import Lease
from capserve.core.report import CampaignReport
from capserve.core.stages import Stage, StageStatus
from capserve.tasks.reporting import write_report_files

BLOCK = datetime(2026, 12, 6, 11, 30, tzinfo=UTC)
BOUGHT = BLOCK - timedelta(days=1, hours=12, minutes=55, seconds=15, microseconds=156956)


def served(out: Path) -> CampaignReport:
    lease = Lease(provider="ec2-capacity-block", region="us-east-2", availability_zone="us-east-2a",
                  reservation_id="cr-0f4ab", start=BLOCK, end=BLOCK + timedelta(days=1),
                  instance_type="p6-b300.48xlarge", instance_count=1, upfront_fee=2832.0)
    report = CampaignReport(campaign="k3-demo")
    report.add(AcquireResult(campaign_id="k3-demo", outcome="adopted", lease=lease, bought_by="campaign-k3-demo",
                             bought_at=BOUGHT, adopted_by="serve-k3-demo"))
    report.add(PreparedCluster(run="prepare-cluster-k3-demo", cluster="capserve-k3-demo",
                               started_at=BLOCK - timedelta(minutes=50), ended_at=BLOCK - timedelta(minutes=24),
                               block_start=BLOCK))
    for stage, start, minutes in ((Stage.PLAN, 0.3, 0.3), (Stage.BRING_UP, 1, 32), (Stage.EVALUATE, 126, 5)):
        record = report.begin(stage, BLOCK + timedelta(minutes=start))
        report.end(record, StageStatus.COMPLETED, now=BLOCK + timedelta(minutes=start + minutes))
    report.add(EvaluationResult(url="http://127.0.0.1:1", model="kimi-k3", profiles=["load"], verdict="pass",
                                plots=[str(out / "evaluation" / "latency-cdf.png")]))
    return report


def test_the_first_table_starts_with_the_purchase_then_the_preparation(tmp_path: Path) -> None:
    markdown = served(tmp_path).to_markdown()
    lines = markdown.splitlines()
    header = lines.index("| stage | run | status | started (UTC) | block time | took |")
    rows = lines[header + 2:]
    assert rows[0].startswith("| purchase | campaign-k3-demo | completed | 2026-12-04 22:34:44 | block −1d 12:55 | — |")
    assert rows[1].startswith("| prepare_cluster | prepare-cluster-k3-demo | completed | 2026-12-06 10:40:00 "
                              "| block −00:50 | 26 min |")
    assert rows[2].startswith("| plan | this run |") and rows[3].startswith("| bring_up | this run |")
    assert ".156956" not in markdown  # times to the second


def test_the_events_hold_the_purchase_and_the_preparation(tmp_path: Path) -> None:
    markdown = served(tmp_path).to_markdown()
    events = markdown[markdown.index("## Events"):]
    assert "| 2026-12-04 22:34:44 | purchase: `cr-0f4ab` by run campaign-k3-demo |" in events
    assert events.index("purchase:") < events.index("cluster preparation began") < events.index("cluster prepared")


def test_the_plots_are_images_relative_to_the_report(tmp_path: Path) -> None:
    report = served(tmp_path)
    markdown = report.to_markdown()
    assert "![latency-cdf](evaluation/latency-cdf.png)" in markdown and str(tmp_path) not in markdown
    assert "![" not in report.to_markdown(images=False)  # the UI's artifact cannot show the files
    write_report_files(report, tmp_path)
    assert (tmp_path / "timeline.png").read_bytes().startswith(b"\x89PNG")


def test_the_report_rendered_from_the_record_keeps_the_purchase_and_the_preparation_in_its_events(
    tmp_path: Path,
) -> None:
    """The scheduled teardown renders the report from the record: the purchase and the preparation, which are no
    events of the serve run, stay in its Events table beside the redeploys' events."""
    import uuid

    from capserve.core.block_cost import campaign_report
    from capserve.core.events import CapserveEvent
    from capserve.core.record import CampaignRecord
    from capserve.core.redeploy import RedeployEntry

    ready = CapserveEvent(event="capserve.rollout.ready", resource={"prefect.resource.id": "capserve.campaign.x"},
                          occurred=BLOCK + timedelta(hours=9), id=uuid.uuid4())
    entry = RedeployEntry(from_sha="a" * 40, to_sha="b" * 40, trigger="revision-published", strategy="recreate",
                          verdict="pass", outcome="promoted", serving_sha="b" * 40,
                          started_at=BLOCK + timedelta(hours=8), ended_at=BLOCK + timedelta(hours=9),
                          detail="promoted", events=(ready,))
    record = CampaignRecord.new("k3-demo", BLOCK).model_copy(update={"report": served(tmp_path)}).with_redeploy(entry)
    rendered = campaign_report(record)
    assert rendered is not None
    events = rendered.to_markdown().split("## Events")[-1]
    assert "purchase: `cr-0f4ab` by run campaign-k3-demo" in events and "cluster prepared" in events
    assert events.index("purchase:") < events.index("capserve.rollout.ready")
