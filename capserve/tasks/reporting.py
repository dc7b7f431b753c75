"""Writing the campaign report where a person (and the next stage) will look for it."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display here or in CI; must precede pyplot
import matplotlib.pyplot as plt  # noqa: E402
from prefect.artifacts import create_markdown_artifact  # noqa: E402

from capserve.tasks.resilience import local_task  # noqa: E402
from capserve.tasks.secrets import redactor  # noqa: E402

# Stage colours by outcome, so a failed or skipped stage stands out in the timeline.
_COLOURS = {"completed": "tab:green", "failed": "tab:red", "skipped": "tab:gray", "running": "tab:orange"}


@local_task(name="write-report")
def write_report(report_json: dict[str, Any], markdown: str, out_dir: Path) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / "report.json", out_dir / "report.md"
    # No secret of the run reaches the report or its artifact (capserve.tasks.secrets).
    report_json, markdown = redactor().redact_data(report_json), redactor().redact(markdown)
    # Write-then-rename: a reader never sees half a report.
    for path, text in ((json_path, json.dumps(report_json, indent=2, sort_keys=False) + "\n"), (md_path, markdown)):
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    if report_json["stages"]:
        timeline(report_json["stages"], out_dir / "timeline.png")
    campaign = str(report_json["campaign"])
    create_markdown_artifact(key=f"{campaign}-report", markdown=markdown, description="Campaign report")
    return json_path, md_path


def timeline(stages: list[dict[str, Any]], path: Path) -> Path:
    """A Gantt chart of the stages: where the paid window's time went."""
    start = datetime.fromisoformat(stages[0]["started_at"])
    fig, ax = plt.subplots(figsize=(9, 0.5 * len(stages) + 1.2))
    for row, stage in enumerate(reversed(stages)):
        began = (datetime.fromisoformat(stage["started_at"]) - start).total_seconds()
        ended = datetime.fromisoformat(stage["ended_at"] or stage["started_at"])
        width = max((ended - start).total_seconds() - began, 0.05)
        ax.barh(row, width, left=began, color=_COLOURS.get(stage["status"], "tab:blue"))
        ax.text(began + width, row, f" {width:.1f} s {stage['status']}", va="center", fontsize=8)
    ax.set_yticks(range(len(stages)), [s["name"] for s in reversed(stages)])
    ax.set_xlabel("seconds since the campaign started")
    ax.set_title("Campaign timeline")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
