"""Knobs of the memory-fit planner; the source of every default is in docs/planner.md."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

GIB = 2**30

Objective = Literal["kv_headroom", "throughput"]
SpareGpus = Literal["replicas", "idle"]


class ReserveOverrides(BaseModel):
    """Per-GPU reserve parts to use instead of the GPU family's defaults (None: the default)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cuda_context_bytes: int | None = Field(
        default=None, ge=0, le=64 * GIB, description="CUDA context, driver-held memory and vLLM's non-torch baseline."
    )
    activation_bytes: int | None = Field(
        default=None,
        ge=0,
        le=256 * GIB,
        description="Activation peak of vLLM's profiling pass (default: estimated from the model and the "
        "max batched tokens).",
    )
    cuda_graph_bytes: int | None = Field(default=None, ge=0, le=64 * GIB, description="CUDA graph pool.")
    nccl_bytes: int | None = Field(
        default=None, ge=0, le=64 * GIB, description="NCCL and custom all-reduce buffers when a replica has > 1 GPU."
    )
    efa_bytes: int | None = Field(
        default=None, ge=0, le=64 * GIB, description="Extra network buffers when a replica spans nodes (EFA)."
    )
    all2all_bytes: int | None = Field(
        default=None, ge=0, le=64 * GIB, description="Expert-parallel dispatch/combine buffers when EP is on."
    )


class PlannerSettings(BaseModel):
    """What the planner assumes about the serving engine (vLLM) beyond the model and the hardware."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu_memory_utilization: float = Field(
        default=0.95,
        gt=0.0,
        le=1.0,
        description="Share of each GPU's memory vLLM may use (--gpu-memory-utilization; 0.95 in the vLLM "
        "Kimi-K3 recipe). The rest is the 'utilization headroom' part of the reserve.",
    )
    max_num_batched_tokens: int | None = Field(
        default=None,
        ge=256,
        le=1 << 20,
        description="Tokens per scheduler step (--max-num-batched-tokens); sizes the activation peak. None: "
        "vLLM's own default for the GPU's memory (8192 below 160 GiB, 16384 from 160 GiB).",
    )
    reserve: ReserveOverrides = Field(
        default_factory=ReserveOverrides, description="Reserve parts to use instead of the GPU family's defaults."
    )
    kv_cache_dtype_bytes: Literal[1, 2] = Field(
        default=1, description="Bytes per cached KV value: 1 for fp8 (--kv-cache-dtype fp8, the K3 recipe), 2 for bf16."
    )
    state_dtype_bytes: Literal[2, 4] = Field(
        default=4, description="Bytes per value of linear-attention (KDA) recurrent state: fp32 in vLLM's KDA layer."
    )
    conv_state_dtype_bytes: Literal[2, 4] = Field(
        default=2, description="Bytes per value of the short-convolution state (model dtype, bf16)."
    )
    objective: Objective = Field(
        default="kv_headroom",
        description="Tiebreak among layouts on the fewest nodes. 'kv_headroom': the most KV tokens one engine "
        "(DP rank) holds, so the longest sequences and the most slack; 'throughput': the most attention "
        "batches running side by side (replicas x DP ranks), then the smallest TP.",
    )
    spare_gpus: SpareGpus = Field(
        default="replicas",
        description="GPUs of the planned nodes that one replica does not use: run more replicas on them, or "
        "leave them idle.",
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
        "(64 instances per Capacity Block).",
    )
