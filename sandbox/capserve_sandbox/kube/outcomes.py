"""The older "outcome" knob, expressed as faults: workload status now follows from what the pods do."""

from __future__ import annotations

from enum import StrEnum

from capserve_sandbox.kube.kubelet.faults import Fault, FaultKind


class Outcome(StrEnum):
    READY = "ready"
    NEVER = "never"
    FAIL = "fail"


def outcome_faults(outcome: Outcome, name: str | None) -> list[Fault]:
    """``fail``: the workload's containers crash (a Job's pods exit 1, a Deployment's crash-loop until its
    progress deadline); ``never``: their image never pulls, so they never start; ``ready``: nothing."""
    pattern = f"{name}-*" if name else "*"
    if outcome is Outcome.FAIL:
        return [Fault(FaultKind.CRASH_LOOP, pod=pattern)]
    if outcome is Outcome.NEVER:
        return [Fault(FaultKind.IMAGE_PULL, pod=pattern)]
    return []
