"""Evaluation of an OpenAI-compatible endpoint: spec, metric math, scoring, gates and the result (pure)."""

from capserve.core.evaluation.metrics import (
    LoadMetrics,
    Slo,
    Summary,
    compute_metrics,
    percentile,
)
from capserve.core.evaluation.records import ClientStats, RequestRecord, RunRecord
from capserve.core.evaluation.result import (
    EvaluationResult,
    GateResult,
    LoadPointResult,
    LoadResult,
    QualityItemResult,
    QualityResult,
    SmokeResult,
    evaluate_gates,
    summarize_run,
)
from capserve.core.evaluation.smoke import SmokeCheck
from capserve.core.evaluation.spec import (
    EvaluationSpec,
    GateSpec,
    LengthSpec,
    LoadSpec,
    QualitySpec,
    SmokeSpec,
)

__all__ = [
    "ClientStats",
    "EvaluationResult",
    "EvaluationSpec",
    "GateResult",
    "GateSpec",
    "LengthSpec",
    "LoadMetrics",
    "LoadPointResult",
    "LoadResult",
    "LoadSpec",
    "QualityItemResult",
    "QualityResult",
    "QualitySpec",
    "RequestRecord",
    "RunRecord",
    "Slo",
    "SmokeCheck",
    "SmokeResult",
    "SmokeSpec",
    "Summary",
    "compute_metrics",
    "evaluate_gates",
    "percentile",
    "summarize_run",
]
