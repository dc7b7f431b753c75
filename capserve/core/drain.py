"""Draining: the serving workload stops taking traffic before the block ends (end − 45 min by default).

AWS warns at end − 40 min and terminates the instances at end − 30 min (docs/aws-capacity.md): clients
should find the endpoint gone, not half-answering, well before that. Draining deletes the campaign's
Services (no new connections reach the pods) and scales its serving workloads to zero replicas; the
cluster itself stays until the hard teardown at end − 35 min.
"""

from __future__ import annotations

from typing import Any

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

SERVING_KINDS: tuple[tuple[str, str], ...] = (
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"),
    ("apps/v1", "Deployment"),
    ("apps/v1", "StatefulSet"),
)
"""Workloads that serve (scaled to zero); Jobs finish on their own and are left to teardown."""

SERVICE_KIND = ("v1", "Service")


class DrainResult(BaseModel):
    """What the drain run did (also the campaign record's drain stage outputs)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    campaign_id: str = Field(min_length=1, max_length=64, description="The campaign drained.")
    services_removed: tuple[str, ...] = Field((), max_length=256, description="'namespace/name' of each Service.")
    scaled_to_zero: tuple[str, ...] = Field((), max_length=256, description="'Kind namespace/name' scaled to 0.")
    note: str = Field("", max_length=1000, description="Why nothing was drained, when nothing was.")
    finished_at: AwareDatetime = Field(description="When draining ended.")

    def report_section(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def markdown(self) -> str:
        if not self.services_removed and not self.scaled_to_zero:
            return f"Nothing was serving. {self.note}".strip()
        return (
            f"Services removed: {', '.join(self.services_removed) or 'none'}; "
            f"scaled to zero: {', '.join(self.scaled_to_zero) or 'none'}."
        )
