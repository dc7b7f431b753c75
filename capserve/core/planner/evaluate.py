"""One layout against the memory of one GPU: weights, reserve, KV and state, and the verdict.

A layout fits when, on the fullest GPU of every pipeline stage, ``HBM - reserve - weights`` holds
the sequences each DP rank must serve at the requested context: ``ceil(concurrency / dp)`` of them,
each ``context x KV per token + fixed state``. vLLM itself refuses to start when one sequence of
``--max-model-len`` does not fit a rank's KV cache, so a rank that holds none never fits.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from capserve.core.catalog.hardware import InstanceType
from capserve.core.catalog.models import ModelEntry
from capserve.core.planner.cache import kv_bytes_per_token, state_bytes_per_sequence
from capserve.core.planner.kernels import KernelVerdict
from capserve.core.planner.reserve import ReserveParts, reserve_parts
from capserve.core.planner.settings import GIB, PlannerSettings
from capserve.core.planner.shapes import Shape
from capserve.core.planner.weights import GpuWeights, ModelBytes, gpu_weights, pipeline_stages

UNBOUNDED = 1 << 62  # sequences a rank holds when nothing grows per token or per sequence


class Candidate(BaseModel):
    """One layout evaluated for one model on one instance type, with the verdict and why."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    layout: str = Field(description="Layout name, e.g. 'TP8xPP2' or 'TP8xDP2+EP16'.")
    nodes: int = Field(ge=1, description="Nodes one replica needs.")
    gpus_per_replica: int = Field(ge=1, description="GPUs of one replica (TP x PP x DP).")
    replicas: int = Field(ge=1, description="Replicas (independent vLLM engines) the planned nodes run.")
    tensor_parallel: int = Field(ge=1, description="--tensor-parallel-size.")
    pipeline_parallel: int = Field(ge=1, description="--pipeline-parallel-size.")
    data_parallel: int = Field(ge=1, description="--data-parallel-size.")
    data_parallel_local: int = Field(ge=1, description="--data-parallel-size-local (DP ranks per node).")
    expert_parallel: int = Field(ge=1, description="Expert-parallel group size (1: EP off).")
    enable_expert_parallel: bool = Field(description="--enable-expert-parallel.")
    runnable: bool = Field(description="vLLM can run this layout for this model on this GPU (heads divide, kernel).")
    fits: bool = Field(description="Weights and the requested KV fit on every GPU, with a usable kernel.")
    weight_bytes_per_gpu: int = Field(ge=0, description="Weights on the fullest GPU (its tightest stage).")
    dense_weight_bytes_per_gpu: int = Field(ge=0, description="Of which dense (non-expert) weights.")
    expert_weight_bytes_per_gpu: int = Field(ge=0, description="Of which routed-expert weights.")
    reserve: ReserveParts = Field(description="The reserve of that GPU, part by part.")
    reserve_bytes_per_gpu: int = Field(ge=0, description="The reserve's total.")
    kv_budget_bytes_per_gpu: int = Field(description="Left for KV/state on that GPU; negative when weights overflow.")
    kv_bytes_per_token_per_gpu: int = Field(ge=0, description="KV one token adds on that GPU.")
    state_bytes_per_sequence_per_gpu: int = Field(ge=0, description="Fixed per-sequence state on that GPU.")
    tokens_per_dp_rank: int | None = Field(
        description="Tokens one engine's KV cache holds (the longest a single sequence can grow); None: no "
        "per-token KV."
    )
    max_tokens_in_kv: int | None = Field(
        description="Tokens the KV cache of one replica holds across its DP ranks (None: no per-token KV)."
    )
    sequences_per_dp_rank: int = Field(ge=1, description="Sequences each DP rank must hold: ceil(concurrency / DP).")
    max_sequences_at_context: int = Field(ge=0, description="Sequences of the requested context one replica holds.")
    reason: str = Field(description="Why it fits or not, in bytes.")

    @property
    def headroom(self) -> int:
        """The kv_headroom objective's measure: tokens per engine, or KV bytes when nothing grows per token."""
        return self.tokens_per_dp_rank if self.tokens_per_dp_rank is not None else self.kv_budget_bytes_per_gpu


def gib(nbytes: int) -> str:
    return f"{nbytes / GIB:,.1f} GiB"


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class Evaluator:
    """Evaluates layouts of one model; holds the per-layer byte sums and a KV/state cache."""

    def __init__(self, model: ModelEntry, settings: PlannerSettings) -> None:
        self.model = model
        self.settings = settings
        self.bytes = ModelBytes(model)
        self._cache: dict[tuple[int, int, int], tuple[int, int]] = {}

    def _kv_and_state(self, tp: int, layers: range) -> tuple[int, int]:
        key = (tp, layers.start, layers.stop)
        if key not in self._cache:
            s = self.settings
            kv = kv_bytes_per_token(self.model, dtype_bytes=s.kv_cache_dtype_bytes, tp=tp, layers=layers)
            state = state_bytes_per_sequence(
                self.model,
                kv_dtype_bytes=s.kv_cache_dtype_bytes,
                state_dtype_bytes=s.state_dtype_bytes,
                conv_dtype_bytes=s.conv_state_dtype_bytes,
                tp=tp,
                layers=layers,
            )
            self._cache[key] = (kv, state)
        return self._cache[key]

    def invalid(self, shape: Shape) -> str | None:
        """Why vLLM cannot run this shape for this model, or None."""
        m = self.model
        tp = shape.tp
        heads = {
            "MLA heads": m.mla.num_heads if m.mla else None,
            "KDA heads": m.kda.num_heads if m.kda else None,
            "attention heads": m.gqa.num_heads if m.gqa else None,
        }
        for label, count in heads.items():
            if count is not None and count % tp:
                return f"{label} ({count}) not divisible by TP {tp}"
        if m.gqa is not None and m.gqa.num_kv_heads % tp and tp % m.gqa.num_kv_heads:
            return f"KV heads ({m.gqa.num_kv_heads}) and TP {tp}: neither divides the other"
        if shape.ep_size > m.moe.n_routed_experts:
            return f"EP {shape.ep_size} exceeds {m.moe.n_routed_experts} experts"
        return None

    def fullest_gpu(self, shape: Shape) -> list[tuple[range, GpuWeights]]:
        """Each pipeline stage's layers and the weights on its fullest GPU."""
        stages = pipeline_stages(self.model.num_layers, shape.pp)
        out = []
        for n, layers in enumerate(stages):
            stage = self.bytes.stage(layers, first=n == 0, last=n == len(stages) - 1)
            out.append((layers, gpu_weights(stage, tp=shape.tp, dp=shape.dp, expert_parallel=shape.expert_parallel)))
        return out

    def evaluate(
        self, shape: Shape, instance: InstanceType, context: int, concurrency: int, kernel: KernelVerdict
    ) -> Candidate:
        s = self.settings
        per_rank_needed = _ceil_div(concurrency, shape.dp)
        reserve = reserve_parts(
            self.model,
            instance.gpu,
            s,
            tp=shape.tp,
            gpus_per_replica=shape.gpus,
            spans_nodes=shape.nodes > 1,
            expert_parallel=shape.expert_parallel,
            sequences_per_rank=per_rank_needed,
        )
        usable = instance.gpu.hbm_bytes - reserve.total
        tightest: tuple[int, GpuWeights, int, int] | None = None  # budget, weights, kv/token, state/sequence
        seqs_per_rank, tokens_per_rank = UNBOUNDED, UNBOUNDED
        for layers, weights in self.fullest_gpu(shape):
            kv_tok, state = self._kv_and_state(shape.tp, layers)
            budget = usable - weights.total
            per_seq = context * kv_tok + state
            seqs_per_rank = min(seqs_per_rank, max(0, budget) // per_seq if per_seq else UNBOUNDED)
            if kv_tok:
                tokens_per_rank = min(tokens_per_rank, max(0, budget) // kv_tok)
            if tightest is None or budget < tightest[0]:
                tightest = (budget, weights, kv_tok, state)
        assert tightest is not None  # noqa: S101 - narrows the type for mypy
        budget, weights, kv_tok, state = tightest
        per_token = tokens_per_rank if tokens_per_rank != UNBOUNDED else None
        reason = self._refusal(shape, instance, kernel, reserve, usable, budget, weights)
        if reason is None and seqs_per_rank < per_rank_needed:
            need = (context * kv_tok + state) * per_rank_needed
            reason = (
                f"weights fit ({gib(weights.total)}/GPU) leaving {gib(budget)}/GPU for KV, but {per_rank_needed} x "
                f"{context:,} tokens per DP rank need {gib(need)}/GPU: short by {gib(need - budget)}/GPU "
                f"(holds {seqs_per_rank * shape.dp} sequence(s) at this context)"
            )
        fits = reason is None
        if reason is None:
            tokens = f"{per_token:,} tokens per DP rank" if per_token is not None else "no per-token KV"
            reason = (
                f"fits: {gib(weights.total)}/GPU weights (dense {gib(weights.dense)} + experts "
                f"{gib(weights.experts)}), {gib(budget)}/GPU for KV ({tokens}; {per_rank_needed} x {context:,} "
                "tokens needed per DP rank)"
            )
        replicas = shape.gpus_per_node // shape.gpus if shape.gpus < shape.gpus_per_node else 1
        if s.spare_gpus == "idle":
            replicas = 1
        return Candidate(
            layout=shape.name,
            nodes=shape.nodes,
            gpus_per_replica=shape.gpus,
            replicas=replicas,
            tensor_parallel=shape.tp,
            pipeline_parallel=shape.pp,
            data_parallel=shape.dp,
            data_parallel_local=shape.dp_per_node,
            expert_parallel=shape.ep_size,
            enable_expert_parallel=shape.expert_parallel,
            runnable=self.invalid(shape) is None and kernel.status != "unsupported",
            fits=fits,
            weight_bytes_per_gpu=weights.total,
            dense_weight_bytes_per_gpu=weights.dense,
            expert_weight_bytes_per_gpu=weights.experts,
            reserve=reserve,
            reserve_bytes_per_gpu=reserve.total,
            kv_budget_bytes_per_gpu=budget,
            kv_bytes_per_token_per_gpu=kv_tok,
            state_bytes_per_sequence_per_gpu=state,
            tokens_per_dp_rank=per_token,
            max_tokens_in_kv=None if per_token is None else per_token * shape.dp,
            sequences_per_dp_rank=per_rank_needed,
            max_sequences_at_context=min(seqs_per_rank, UNBOUNDED // shape.dp) * shape.dp,
            reason=reason,
        )

    def _refusal(
        self,
        shape: Shape,
        instance: InstanceType,
        kernel: KernelVerdict,
        reserve: ReserveParts,
        usable: int,
        budget: int,
        weights: GpuWeights,
    ) -> str | None:
        """Why the layout cannot run or its weights do not fit, or None."""
        invalid = self.invalid(shape)
        if invalid is not None:
            return invalid
        if kernel.status == "unsupported":
            return f"no kernel: {kernel.note}"
        if budget <= 0:
            gpu = instance.gpu
            return (
                f"weights need {gib(weights.total)}/GPU (dense {gib(weights.dense)} + experts "
                f"{gib(weights.experts)}) but only {gib(usable)}/GPU is usable ({gpu.name} {gib(gpu.hbm_bytes)} - "
                f"{gib(reserve.total)} reserve): short by {gib(-budget)}/GPU"
            )
        return None
