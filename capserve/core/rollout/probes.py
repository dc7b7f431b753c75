"""Startup budgets and the probes of the leader pod.

vLLM calls ``listen()`` only once every engine, remote ones included, is ready: until then a probe
gets "connection refused", so the startup probe's budget must cover the whole load and compile
(docs/serving.md §3.1). Kubernetes runs liveness and readiness only after the startup probe has
succeeded, so a liveness probe can never kill a pod still loading weights; and one liveness kill
rebuilds the whole LeaderWorkerSet group, so liveness is slow to act (§2, §3.2). ``/health`` needs
no API key, unlike ``/v1/models`` (§6), so no probe carries the key.
"""

from __future__ import annotations

import math
from typing import Any

from capserve.core.rollout.settings import RolloutSettings, StartupModel
from capserve.core.timeline import CompileShape, Storage, TimeFigures, vllm_start_s, weight_read_bytes_per_s


def expected_start_s(
    shape: CompileShape,
    node_bytes: int,
    *,
    warm: bool,
    instance_type: str | None = None,
    storage: Storage = "nvme",
    nodes: int = 1,
    figures: TimeFigures | None = None,
) -> float:
    """How long vLLM is expected to take from process start to listening (``capserve.core.timeline``).

    The weights are read at the rate of where they are on ``instance_type`` (its NVMe array from the
    catalog; one measured disk's rate when the instance type is not given or its rate unknown).
    """
    read = weight_read_bytes_per_s(instance_type, storage, nodes=nodes, figures=figures)
    return vllm_start_s(shape, node_bytes, warm=warm, read_bytes_per_s=read, figures=figures)


def startup_budget_s(
    shape: CompileShape,
    node_bytes: int,
    *,
    warm: bool,
    model: StartupModel | None = None,
    override_minutes: int | None = None,
    instance_type: str | None = None,
    storage: Storage = "nvme",
    nodes: int = 1,
    figures: TimeFigures | None = None,
) -> int:
    """Seconds the startup probe allows: the spec's override, else safety factor × expected, bounded.

    ``shape``: what compile and graph capture depend on; ``node_bytes``: what the fullest node loads. Kimi K3
    on one p6-b300 from its NVMe comes out at about 14 min cold and the 10-minute floor warm (docs/timeline.md
    §4); a small model gets the floor.
    """
    if override_minutes is not None:
        return override_minutes * 60
    expected = expected_start_s(
        shape, node_bytes, warm=warm, instance_type=instance_type, storage=storage, nodes=nodes, figures=figures
    )
    return budget_for_s(expected, model)


def budget_for_s(expected_s: float, model: StartupModel | None = None) -> int:
    """The startup probe's budget for a start expected to take ``expected_s``: safety factor × it, bounded."""
    model = model or StartupModel()
    return math.ceil(min(max(expected_s * model.safety_factor, model.min_budget_s), model.max_budget_s))


def _http(path: str) -> dict[str, Any]:
    return {"httpGet": {"path": path, "port": "http"}}


def leader_probes(budget_s: int, settings: RolloutSettings | None = None) -> dict[str, dict[str, Any]]:
    """``startupProbe``, ``readinessProbe`` and ``livenessProbe`` of the leader's vLLM container."""
    settings = settings or RolloutSettings()
    period = settings.probe_period_s
    return {
        "startupProbe": {
            **_http("/health"),
            "periodSeconds": period,
            "timeoutSeconds": settings.probe_timeout_s,
            "failureThreshold": max(1, math.ceil(budget_s / period)),
        },
        "readinessProbe": {
            **_http("/health"),
            "periodSeconds": period,
            "timeoutSeconds": settings.probe_timeout_s,
            "failureThreshold": settings.readiness_failure_threshold,
        },
        "livenessProbe": {
            **_http("/health"),
            "periodSeconds": settings.liveness_period_s,
            "timeoutSeconds": settings.liveness_timeout_s,
            "failureThreshold": settings.liveness_failure_threshold,
        },
    }


def probe_budget_s(probe: dict[str, Any]) -> int:
    """A probe's budget as Kubernetes applies it: initialDelaySeconds + failureThreshold × periodSeconds."""
    return int(probe.get("initialDelaySeconds", 0)) + int(probe["failureThreshold"]) * int(probe["periodSeconds"])
