"""Draining: the serving workload stops taking traffic before the block ends, then the hard teardown, both before
AWS's cut.

AWS terminates a Capacity Block's instances 30 minutes before its end (docs/aws-capacity.md). The two scheduled
runs count back from there by what each needs of the nodes (docs/timeline.md §5):

- the hard teardown must have deleted the serving workloads while the nodes still run (its pods get their
  termination grace), so it starts that grace plus a scheduled run's start before the cut;
- the drain deletes the campaign's Services (no new connections reach the pods) and scales its serving workloads
  to zero replicas, whose pods get the same grace to finish; it starts that long, plus a run's start, before the
  hard teardown.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

AWS_TERMINATION_BEFORE_END_MINUTES = 30
"""AWS begins terminating a Capacity Block's instances this long before its end (EC2 user guide, "Work with
Capacity Blocks")."""

POD_TERMINATION_GRACE_S = 60
"""terminationGracePeriodSeconds of the serving pods (``RolloutSettings.termination_grace_s``'s default): the
longest a pod being deleted keeps running before it is killed."""

ENGINE_EXIT_S = 15
"""What a serving pod's grace keeps, after vLLM's in-flight requests end, for its engine processes to exit and free
the GPUs before the kubelet's SIGKILL [inf] (5–15 s: vLLM 0.32 allows its engine processes 15 s to release device
memory on ROCm, ``ROCM_ENGINE_PROCESS_SHUTDOWN_TIMEOUT_S`` in ``vllm/v1/engine/utils.py``; docs/serving.md §3)."""


def vllm_shutdown_timeout_s(termination_grace_s: int) -> int:
    """vLLM's ``--shutdown-timeout``: how long, after SIGTERM, its in-flight requests may finish (0 aborts them at
    once, vLLM's default), so that they end and the process exits within the pod's grace (docs/serving.md §3)."""
    return max(0, termination_grace_s - ENGINE_EXIT_S)


RUN_START_S = 60
"""How late a scheduled run may start after its time [inf]: a Prefect worker polls for due runs every 10 s by
default (PREFECT_WORKER_QUERY_SECONDS), then starts a process and imports the flow."""

_STEP_MINUTES = math.ceil((POD_TERMINATION_GRACE_S + RUN_START_S) / 60)
HARD_TEARDOWN_BEFORE_END_MINUTES = AWS_TERMINATION_BEFORE_END_MINUTES + _STEP_MINUTES
"""The hard teardown's default: its workload deletions (a pod's grace) done before AWS's cut."""
DRAIN_BEFORE_END_MINUTES = HARD_TEARDOWN_BEFORE_END_MINUTES + _STEP_MINUTES
"""The drain's default: the serving pods stopped (a pod's grace) before the hard teardown starts."""

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
