"""The memory-fit planner (pure): model x instance type x (context, concurrency) -> layout and KV budget.

``plan_serving`` returns a ServingPlan; when nothing fits it returns ``fits=False`` with the reason
and alternatives rather than raising. ``ServingPlan.require_fit()`` raises DoesNotFitError.
"""

from __future__ import annotations

from capserve.core.planner.cache import kda_recurrent_bytes, kv_bytes_per_token, state_bytes_per_sequence
from capserve.core.planner.plan import Candidate, Layout, ServingPlan, candidate_layouts, plan_serving
from capserve.core.planner.settings import PlannerSettings
from capserve.core.planner.weights import (
    fp8_block_bytes,
    linear_bytes,
    mxfp4_bytes,
    pipeline_stages,
    weight_bytes_by_class,
)

__all__ = [
    "Candidate",
    "Layout",
    "PlannerSettings",
    "ServingPlan",
    "candidate_layouts",
    "fp8_block_bytes",
    "kda_recurrent_bytes",
    "kv_bytes_per_token",
    "linear_bytes",
    "mxfp4_bytes",
    "pipeline_stages",
    "plan_serving",
    "state_bytes_per_sequence",
    "weight_bytes_by_class",
]
