"""Writing the campaign report where a person (and the next stage) will look for it.

The files are written by a plain function, not a Prefect task: the report must be written also when
the run is being interrupted (Ctrl-C, SIGTERM, a cancellation), when the orchestrator may no longer
accept new task runs. The UI artifact is published separately, best effort.
"""

from __future__ import annotations

import json
import logging
import os
from datetime import datetime
from pathlib import Path

from prefect.artifacts import create_markdown_artifact
from pydantic import BaseModel

from capserve.core.block_cost import campaign_report
from capserve.core.record import CampaignRecord
from capserve.core.report import CampaignReport
from capserve.core.stages import StageStatus
from capserve.tasks.cost.plots import write_cost_plots
from capserve.tasks.pyplot import pyplot
from capserve.tasks.resilience import orchestrator_task
from capserve.tasks.secrets import redactor

# Stage colours by outcome, so a failed, interrupted or skipped stage stands out in the timeline.
_COLOURS = {
    StageStatus.COMPLETED: "tab:green",
    StageStatus.FAILED: "tab:red",
    StageStatus.INTERRUPTED: "tab:brown",
    StageStatus.STOPPED: "tab:purple",
    StageStatus.SKIPPED: "tab:gray",
    StageStatus.RUNNING: "tab:orange",
}


def write_report_files(report: CampaignReport, out_dir: Path) -> tuple[Path, Path]:
    """report.json, report.md, timeline.png and the cost plots in ``out_dir``; each report file appears whole or
    not at all."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / "report.json", out_dir / "report.md"
    # No secret of the run reaches the report or its artifact (capserve.tasks.secrets).
    redact = redactor()
    report_json, markdown = redact.redact_data(report.to_json()), redact.redact(report.to_markdown())
    # Write-then-rename: a reader never sees half a report.
    documents = ((json_path, json.dumps(report_json, indent=2) + "\n"), (md_path, markdown))
    for path, text in documents:
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    if report.stages:
        timeline(report, out_dir / "timeline.png")
    if report.cost is not None:
        write_cost_plots(report.cost, out_dir)  # the files report.md links to (COST_PLOTS)
    return json_path, md_path


REPORT_DIR_ENV = "CAPSERVE_REPORT_DIR"
"""Where a run that is not given a folder writes its campaign's report on this host (``{campaign}`` stands for the
campaign id; default ``out/{campaign}``). A scheduled run, a redeploy or a teardown gets only the campaign id and its
region: the worker's environment says where its reports go, and the record says what they hold."""


def campaign_report_dir(campaign_id: str) -> Path:
    """The campaign's report folder on this host (``CAPSERVE_REPORT_DIR``)."""
    return Path((os.environ.get(REPORT_DIR_ENV) or "out/{campaign}").replace("{campaign}", campaign_id))


def write_campaign_report(record: CampaignRecord, *sections: BaseModel) -> Path | None:
    """The campaign's report rendered from its record (``capserve.core.block_cost.campaign_report``) with this run's
    ``sections``, written whole in this host's folder for it, and the UI's copy updated: how a run after the one that
    held the block (a redeploy, the scheduled teardown) brings the report up to date on any worker. None when no run
    has held a block yet."""
    report = campaign_report(record, *sections)
    if report is None:
        return None
    json_path, _ = write_report_files(report, campaign_report_dir(record.campaign_id))
    _republish(report)
    return json_path


def _republish(report: CampaignReport) -> None:
    """The campaign's artifact in the UI becomes the report as rendered now (its one key, updated in place), best
    effort: the files are the report; a server that cannot take the artifact now must not fail the run that wrote
    them."""
    try:
        create_markdown_artifact(key=_artifact_key(report.campaign),
                                 markdown=redactor().redact(report.to_markdown(images=False)),
                                 description="Campaign report")
    except Exception as exc:  # noqa: BLE001 - the artifact is a copy for the UI; the files are written
        logging.getLogger(__name__).warning("the UI's copy of %s's report was not updated: %s", report.campaign, exc)


def _artifact_key(campaign_id: str) -> str:
    """One artifact key per campaign (campaigns never overwrite each other's), the same for every run of it."""
    return f"{campaign_id}-report"


@orchestrator_task(name="publish-report")
def publish_report(report: CampaignReport) -> None:
    """The report as a Prefect artifact, for the UI: the stage table is its timeline (the UI shows no local
    image), the key holds the campaign so campaigns never overwrite each other's."""
    create_markdown_artifact(
        key=_artifact_key(report.campaign), markdown=report.to_markdown(images=False), description="Campaign report"
    )


@orchestrator_task(name="publish-teardown")
def publish_teardown(campaign_id: str, markdown: str) -> None:
    """What a teardown deleted (or would delete), kept and found already gone, for the UI."""
    create_markdown_artifact(key=f"{campaign_id}-teardown", markdown=markdown, description="Teardown")


@orchestrator_task(name="publish-redeploy")
def publish_redeploy(campaign_id: str, markdown: str) -> None:
    """A redeploy's outcome, for the UI (its own key: the campaign's report artifact stays the campaign's)."""
    create_markdown_artifact(key=f"{campaign_id}-redeploy", markdown=markdown, description="Redeploy")


@orchestrator_task(name="publish-reaper")
def publish_reaper(markdown: str) -> None:
    """What the reaper reaped (or would reap) and kept, for the UI."""
    create_markdown_artifact(key="capserve-reaper", markdown=markdown, description="Reaper")


def timeline(report: CampaignReport, path: Path) -> Path:
    """A Gantt chart of the campaign's story (the report's first table): the purchase and the cluster's preparation
    when other runs did them, then this run's stages, in hours from the block's start on the campaign's clock."""
    rows = report.timeline_rows()
    block = report.block()
    zero = block[0] if block is not None else rows[0].started_at
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 0.5 * len(rows) + 1.4))
    for row, r in enumerate(reversed(rows)):
        began = (r.started_at - zero).total_seconds() / 3600
        ended: datetime = r.ended_at or r.started_at
        width = max((ended - r.started_at).total_seconds() / 3600, 0.0)
        ax.barh(row, width, left=began, color=_COLOURS.get(r.status, "tab:blue"))
        took = (ended - r.started_at).total_seconds()
        if took == 0:  # an instant (the purchase, a skipped stage): a mark with its time or status, not a bar
            ax.plot([began], [row], marker="D", color=_COLOURS.get(r.status, "tab:blue"))
            said = f"{r.started_at:%m-%d %H:%M}" if r.status is StageStatus.COMPLETED else r.status.value
            ax.text(began, row, f"  {said}", va="center", fontsize=8)
            continue
        ax.text(began + width, row, f" {took / 60:.0f} min" if took >= 60 else f" {took:.0f} s", va="center",
                fontsize=8)
    ax.set_yticks(range(len(rows)), [f"{r.what} ({r.run})" for r in reversed(rows)])
    if block is not None:
        ax.axvline(0, color="black", linestyle="--", linewidth=1)
        ax.text(0, len(rows) - 0.4, " block starts", fontsize=8)
        ax.set_xlabel("hours from the block's start (campaign clock)")
    else:
        ax.set_xlabel("hours from the first stage (campaign clock)")
    ax.set_title(f"Campaign {report.campaign}: timeline")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
