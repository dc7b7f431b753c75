"""The memory-fit planner (pure): model x instance type x (context, concurrency) -> layout and KV budget.

``plan_serving`` returns a ServingPlan; when nothing fits it returns ``fits=False`` with the reason
and what would fit instead rather than raising. ``ServingPlan.require_fit()`` raises DoesNotFitError.
Bad input (a context above the model's maximum, concurrency below 1, GPUs that cannot hold the
dense weights) raises SpecError. docs/planner.md explains every rule and default.
"""

from __future__ import annotations

from capserve.core.planner.cache import kda_recurrent_bytes, kv_bytes_per_token, state_bytes_per_sequence
from capserve.core.planner.evaluate import Candidate
from capserve.core.planner.kernels import KernelVerdict, kernel_support
from capserve.core.planner.plan import ParallelLayout, ServingPlan, plan_serving
from capserve.core.planner.ranking import Alternative
from capserve.core.planner.reserve import ReserveParts, activation_bytes, default_max_batched_tokens, reserve_parts
from capserve.core.planner.settings import PlannerSettings, ReserveOverrides
from capserve.core.planner.shapes import Shape, layout_shapes
from capserve.core.planner.weights import (
    GpuWeights,
    ModelBytes,
    fp8_block_bytes,
    gpu_weights,
    linear_bytes,
    mxfp4_bytes,
    pipeline_stages,
    weight_bytes_by_class,
)

__all__ = [
    "Alternative",
    "Candidate",
    "GpuWeights",
    "KernelVerdict",
    "ModelBytes",
    "ParallelLayout",
    "PlannerSettings",
    "ReserveOverrides",
    "ReserveParts",
    "ServingPlan",
    "Shape",
    "activation_bytes",
    "default_max_batched_tokens",
    "fp8_block_bytes",
    "gpu_weights",
    "kda_recurrent_bytes",
    "kernel_support",
    "kv_bytes_per_token",
    "layout_shapes",
    "linear_bytes",
    "mxfp4_bytes",
    "pipeline_stages",
    "plan_serving",
    "reserve_parts",
    "state_bytes_per_sequence",
    "weight_bytes_by_class",
]
