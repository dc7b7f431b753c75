"""Knobs of the memory-fit planner, with the source of each default."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

GIB = 2**30


class PlannerSettings(BaseModel):
    """What the planner assumes about the serving engine (vLLM) beyond the model and the hardware."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu_memory_utilization: float = Field(
        default=0.95,
        gt=0.0,
        le=1.0,
        description="Share of each GPU's memory vLLM may use (--gpu-memory-utilization; 0.95 in the vLLM "
        "Kimi-K3 recipe, docs/kimi-k3.md §6).",
    )
    reserve_bytes_per_gpu: int = Field(
        default=16 * GIB,
        ge=0,
        le=256 * GIB,
        description="Kept back inside that ceiling for activations, CUDA graphs and communication buffers. "
        "vLLM measures this at start-up; 16 GiB is a conservative order of magnitude for large MoE models "
        "— replace it with the value from a real boot log.",
    )
    kv_cache_dtype_bytes: Literal[1, 2] = Field(
        default=1, description="Bytes per cached KV value: 1 for fp8 (--kv-cache-dtype fp8, the K3 recipe), 2 for bf16."
    )
    state_dtype_bytes: Literal[2, 4] = Field(
        default=4,
        description="Bytes per value of linear-attention (KDA) recurrent state: fp32 (4), docs/kimi-k3.md §4.",
    )
    conv_state_dtype_bytes: Literal[2, 4] = Field(
        default=2, description="Bytes per value of the short-convolution state (model dtype, bf16)."
    )
    max_nodes: int = Field(
        default=8,
        ge=1,
        le=64,
        description="Largest node count the planner may choose (a Capacity Block holds up to 64).",
    )
    alternative_max_nodes: int = Field(
        default=64,
        ge=1,
        le=256,
        description="How far to search for a node count that would fit when max_nodes does not "
        "(64 instances per Capacity Block, docs/aws-capacity.md §1.1).",
    )
    prefer_expert_parallel: bool = Field(
        default=False,
        description="At equal node count, try DP-attention + EP before TP/TPxPP. Off by default: multi-node "
        "EP over EFA is not validated upstream (DeepEP#369, vllm#27898; docs/kimi-k3.md §7).",
    )
