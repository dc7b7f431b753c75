"""Writing the campaign report where a person (and the next stage) will look for it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from prefect import task
from prefect.artifacts import create_markdown_artifact


@task(name="write-report")
def write_report(report_json: dict[str, Any], markdown: str, out_dir: Path) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / "report.json", out_dir / "report.md"
    # Write-then-rename: a reader never sees half a report.
    for path, text in ((json_path, json.dumps(report_json, indent=2, sort_keys=False) + "\n"), (md_path, markdown)):
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    campaign = str(report_json["campaign"])
    create_markdown_artifact(key=f"{campaign}-report", markdown=markdown, description="Campaign report")
    return json_path, md_path
