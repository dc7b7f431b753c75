"""What the Prefect UI shows for the weights stage: the plan (markdown) and download progress."""

from __future__ import annotations

import sys
from uuid import UUID

from prefect.artifacts import create_markdown_artifact, create_progress_artifact, update_progress_artifact
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, TextColumn, TimeRemainingColumn, TransferSpeedColumn
from rich.progress import Progress as RichProgress

from capserve.core.artifact_keys import artifact_key
from capserve.core.markdown import markdown_table
from capserve.core.progress import Progress as LineProgress
from capserve.core.weights.plan import WeightsPlan
from capserve.tasks.progress import ProgressReporter


def publish_plan(plan: WeightsPlan, campaign: str | None = None) -> None:
    rows = [
        {"node": n.node, "experts": f"{n.experts_start}–{max(n.experts_stop - 1, n.experts_start)}",
         "weight files": len(n.weight_files), "bytes planned": b, "bytes naive": plan.bytes_naive_per_node}
        for n, b in zip(plan.node_plans, plan.bytes_per_node, strict=True)
    ]
    markdown = (
        f"# Weights plan: `{plan.repo}` @ `{plan.revision_sha[:12]}`\n\n"
        f"{len(plan.files)} files, {plan.bytes_total} bytes, {plan.tensors} tensors, {plan.num_experts} experts; "
        f"layout `{plan.layout.layout_id}`; re-shard: {'yes' if plan.reshard else 'no'}.\n\n"
        + markdown_table(rows)
    )
    create_markdown_artifact(key=artifact_key(campaign, "weights-plan", plan.repo), markdown=markdown,
                             description="Bytes each node stages vs every node getting everything")


class Progress:
    """Bytes done out of a total: a Prefect progress artifact (0–100) for the UI and, when a person is
    watching a terminal, a rich progress bar there too. ``close()`` when done."""

    def __init__(
        self, key: str, total: int, description: str, *, what: str = "done", terminal: bool | None = None
    ) -> None:
        self.total = max(total, 1)
        self.done = 0
        # The same progress as throttled log lines: what a log, CI or `capserve up` following a server shows.
        self._what, self._lines = what, ProgressReporter()
        self._bar: RichProgress | None = None
        if sys.stderr.isatty() if terminal is None else terminal:
            self._bar = RichProgress(
                TextColumn("{task.description}"),
                BarColumn(),
                DownloadColumn(),
                TransferSpeedColumn(),
                TimeRemainingColumn(),
                console=Console(stderr=True),
            )
            self._bar_task = self._bar.add_task(description, total=self.total)
            self._bar.start()
        # Called from sync tasks, where Prefect's sync_compatible helper returns the value, not a coroutine.
        created = create_progress_artifact(progress=0.0, key=artifact_key(key), description=description)
        assert isinstance(created, UUID)  # noqa: S101 - narrows the type for mypy
        self.id = created

    def advance(self, nbytes: int) -> None:
        self.done += nbytes
        self._lines.report(LineProgress(self._what, done=self.done, total=self.total, unit="bytes"))
        update_progress_artifact(artifact_id=self.id, progress=min(100.0, 100.0 * self.done / self.total))
        if self._bar is not None:
            self._bar.update(self._bar_task, completed=self.done)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
