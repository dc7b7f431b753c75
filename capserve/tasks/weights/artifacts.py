"""What the Prefect UI shows for the weights stage: the plan (markdown) and download progress."""

from __future__ import annotations

import re
from uuid import UUID

from prefect.artifacts import create_markdown_artifact, create_progress_artifact, update_progress_artifact

from capserve.core.report import markdown_table
from capserve.core.weights.plan import WeightsPlan


def artifact_key(*parts: str) -> str:
    """Prefect artifact keys allow lower-case letters, digits and dashes only (prefect.md §9)."""
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", "-".join(parts).lower())).strip("-")[:200]


def publish_plan(plan: WeightsPlan) -> None:
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
    create_markdown_artifact(key=artifact_key("weights-plan", plan.repo), markdown=markdown,
                             description="Bytes each node stages vs every node getting everything")


class Progress:
    """A Prefect progress artifact (0–100) for bytes done out of a total."""

    def __init__(self, key: str, total: int, description: str) -> None:
        self.total = max(total, 1)
        self.done = 0
        # Called from sync tasks, where Prefect's sync_compatible helper returns the value, not a coroutine.
        created = create_progress_artifact(progress=0.0, key=artifact_key(key), description=description)
        assert isinstance(created, UUID)
        self.id = created

    def advance(self, nbytes: int) -> None:
        self.done += nbytes
        update_progress_artifact(artifact_id=self.id, progress=min(100.0, 100.0 * self.done / self.total))
