"""Ledger inputs from what a campaign already records: report.json's stages and its evaluation section.

These read the report's JSON (a stable contract: ``{"name", "status", "started_at", "ended_at"}`` per
stage; the evaluation section's ``load`` and ``gates``) rather than the classes behind it, so the wiring
is a few lines: build the intervals and throughput here, add the serving interval (rollout ready →
drain, or the moment serving stopped) and the resources bring-up ran, and call ``build_ledger``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from types import MappingProxyType
from typing import Any

from capserve.core.cost.causes import Cause
from capserve.core.cost.inputs import Interval, ThroughputPoint
from capserve.core.stages import Stage, StageStatus

# Campaign stage → the cause its GPU time counts under. Stages that need no GPU (plan, acquire, stage_image,
# stage_weights) are not listed: while they run inside the block the GPUs wait, and the ledger's gap
# rule counts that as waiting_for_bring_up (or idle after bring-up began). Node readiness is part of
# bring_up's stage; the wiring may add it as its own interval when bring-up reports when nodes joined.
STAGE_CAUSES: Mapping[Stage, Cause] = MappingProxyType(
    {
        Stage.BRING_UP: Cause.BRING_UP,
        Stage.WEIGHTS_TO_NODES: Cause.WEIGHTS_TO_NODES,
        Stage.ROLLOUT: Cause.VLLM_COLD_START,
        Stage.EVALUATE: Cause.EVALUATION,
        Stage.DRAIN: Cause.DRAIN_AND_TEARDOWN_MARGIN,
        Stage.TEARDOWN: Cause.DRAIN_AND_TEARDOWN_MARGIN,
    }
)
_STAGES = {stage.value: stage for stage in Stage}


def intervals_from_report_stages(stages: Sequence[Mapping[str, Any]]) -> list[Interval]:
    """One interval per timed stage that uses the GPUs; a failed stage's time becomes failures_and_rollbacks.

    Only a stage that failed on its own merits is a failure: an interrupted or stopped stage still
    spent its time on what it was doing. Skipped stages and stages still running (no end) are left out.
    """
    intervals = []
    for stage in stages:
        known = _STAGES.get(str(stage.get("name")))
        cause = STAGE_CAUSES.get(known) if known is not None else None
        status = stage.get("status")
        if cause is None or status == StageStatus.SKIPPED.value or not stage.get("ended_at"):
            continue
        intervals.append(
            Interval(
                cause=cause,
                start=datetime.fromisoformat(str(stage["started_at"])),
                end=datetime.fromisoformat(str(stage["ended_at"])),
                label=str(stage["name"]),
                failed=status == StageStatus.FAILED.value,
            )
        )
    return intervals


def throughput_from_evaluation(section: Mapping[str, Any]) -> list[ThroughputPoint]:
    """Closed-loop load levels from report.json's ``evaluation`` section, each with its gate outcome.

    A level passed when its run was valid (the client was not the bottleneck) and every gate judged on it
    passed; a gate that could not be judged (``passed: null``) is not a pass.
    """
    gates = section.get("gates") or []
    points = []
    for level in section.get("load") or []:
        if level.get("mode") != "closed" or not level.get("concurrency"):
            continue
        suffix = f"@{level['name']}"
        own = [g for g in gates if str(g.get("name", "")).endswith(suffix)]
        passed = bool(level.get("valid")) and all(g.get("passed") is True for g in own)
        points.append(
            ThroughputPoint(
                concurrency=int(level["concurrency"]),
                output_tokens_per_s=float(level["metrics"]["output_throughput"]),
                passed_gates=passed,
            )
        )
    return points
