"""What each GPU keeps back from the KV cache, from named parts (docs/planner.md, 'Reserve per GPU').

vLLM sizes its KV cache at start-up as ``total x gpu_memory_utilization`` minus the weights, the
activation peak of a profiling pass at ``max_num_batched_tokens``, the memory allocated outside
PyTorch (CUDA context, NCCL and all-to-all buffers) and an estimate of the CUDA graph pool
(``vllm/v1/worker/gpu_worker.py::determine_available_memory``). The planner reproduces that sum
before anything is bought: each part has a default per GPU family (most are estimates from published
boot logs, marked as such in the docs) and can be overridden in ``PlannerSettings.reserve``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from pydantic import BaseModel, ConfigDict, Field

from capserve.core.catalog.hardware import GpuFamily, GpuType
from capserve.core.catalog.models import ModelEntry
from capserve.core.planner.settings import GIB, PlannerSettings

BF16_BYTES = 2
FP32_BYTES = 4


@dataclass(frozen=True)
class FamilyDefaults:
    """Default reserve parts for one GPU family (bytes per GPU)."""

    cuda_context: int  # CUDA context + driver-held memory + vLLM's non-torch baseline on one GPU
    cuda_graphs: int  # the CUDA graph pool vLLM captures for decode batch sizes
    nccl: int  # NCCL communicators and custom all-reduce buffers, when a replica has more than one GPU
    efa: int  # extra network buffers (libfabric/aws-ofi-nccl) when a replica spans nodes
    all2all: int  # expert-parallel dispatch/combine buffers


# Estimates, each explained in docs/planner.md: a published H100 boot log (vLLM PR #10511) shows
# 1.79 GiB outside PyTorch on one GPU, 3.58 GiB at TP2, and a CUDA total 0.78 GiB below the
# 80 GiB EC2 lists; a published boot log of a large MoE (vLLM issue #50576) shows a 2.51 GiB
# graph pool. No Blackwell log was found: its defaults are the Hopper ones rounded up.
_HOPPER = FamilyDefaults(
    cuda_context=int(2.5 * GIB),
    cuda_graphs=int(2.5 * GIB),
    nccl=2 * GIB,
    efa=1 * GIB,
    all2all=1 * GIB,
)
_BLACKWELL = FamilyDefaults(
    cuda_context=3 * GIB,
    cuda_graphs=3 * GIB,
    nccl=2 * GIB,
    efa=1 * GIB,
    all2all=1 * GIB,
)
FAMILY_DEFAULTS: Mapping[GpuFamily, FamilyDefaults] = MappingProxyType(
    {"blackwell": _BLACKWELL, "hopper": _HOPPER, "ada": _HOPPER, "ampere": _HOPPER, "older": _HOPPER}
)


class ReserveParts(BaseModel):
    """The reserve of one GPU, part by part (bytes)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    utilization_headroom: int = Field(ge=0, description="HBM x (1 - gpu_memory_utilization): never given to vLLM.")
    cuda_context: int = Field(ge=0, description="CUDA context, driver-held memory, vLLM's non-torch baseline.")
    activations: int = Field(ge=0, description="Activation peak at max_num_batched_tokens (estimate).")
    cuda_graphs: int = Field(ge=0, description="CUDA graph pool (estimate).")
    nccl: int = Field(ge=0, description="NCCL / custom all-reduce buffers (0 on a single-GPU replica).")
    efa: int = Field(ge=0, description="Network buffers for a replica spanning nodes (0 on one node).")
    all2all: int = Field(ge=0, description="Expert-parallel all-to-all buffers (0 without EP).")

    @property
    def total(self) -> int:
        return (
            self.utilization_headroom
            + self.cuda_context
            + self.activations
            + self.cuda_graphs
            + self.nccl
            + self.efa
            + self.all2all
        )

    def by_name(self) -> dict[str, int]:
        """The parts as a plain dict, in the order they are listed above."""
        return self.model_dump()


def default_max_batched_tokens(gpu: GpuType) -> int:
    """vLLM's default ``--max-num-batched-tokens`` for an API server on this GPU.

    ``vllm/engine/arg_utils.py::get_batch_defaults``: 16384 from 160 GiB of device memory, 8192 from
    70 GiB (except A100s), 2048 below.
    """
    if gpu.hbm_bytes >= 160 * GIB:
        return 16_384
    if gpu.hbm_bytes >= 70 * GIB and gpu.family != "ampere":
        return 8_192
    return 2_048


def activation_bytes(model: ModelEntry, *, tp: int, batched_tokens: int, sequences: int) -> int:
    """Estimated activation peak of one GPU in vLLM's profiling pass (docs/planner.md).

    Per batched token: about 8 hidden-size vectors live at once (residual, norm output, attention
    and MLP in/out), plus 3 intermediate-size vectors of the widest MLP on this rank (gate+up and the
    activated product): a dense MLP's ``intermediate / tp``, or an MoE's ``k x moe_intermediate / tp``
    (each token's k expert rows, a 1/tp share of them per rank with or without EP). Plus one fp32
    logits row per sequence over the vocabulary. Calibrated on a published Llama-3-8B H100 boot log
    (1.26 GiB measured, 1.28 GiB estimated); an estimate for anything else.
    """
    m = model.moe
    widest = max(m.dense_intermediate_size if m.first_k_dense else 0, m.experts_per_token * m.moe_intermediate_size)
    per_token = 8 * model.hidden_size + 3 * -(-widest // tp)
    return batched_tokens * per_token * BF16_BYTES + sequences * model.vocab_size * FP32_BYTES


def reserve_parts(
    model: ModelEntry,
    gpu: GpuType,
    settings: PlannerSettings,
    *,
    tp: int,
    gpus_per_replica: int,
    spans_nodes: bool,
    expert_parallel: bool,
    sequences_per_rank: int,
) -> ReserveParts:
    """The reserve of one GPU of a replica with this shape, defaults overridden by ``settings.reserve``."""
    defaults = FAMILY_DEFAULTS[gpu.family]
    o = settings.reserve
    tokens = settings.max_num_batched_tokens or default_max_batched_tokens(gpu)
    return ReserveParts(
        utilization_headroom=gpu.hbm_bytes - int(gpu.hbm_bytes * settings.gpu_memory_utilization),
        cuda_context=_pick(o.cuda_context_bytes, defaults.cuda_context),
        activations=_pick(
            o.activation_bytes,
            activation_bytes(model, tp=tp, batched_tokens=tokens, sequences=sequences_per_rank),
        ),
        cuda_graphs=_pick(o.cuda_graph_bytes, defaults.cuda_graphs),
        nccl=_pick(o.nccl_bytes, defaults.nccl) if gpus_per_replica > 1 else 0,
        efa=_pick(o.efa_bytes, defaults.efa) if spans_nodes else 0,
        all2all=_pick(o.all2all_bytes, defaults.all2all) if expert_parallel else 0,
    )


def _pick(override: int | None, default: int) -> int:
    return default if override is None else override
