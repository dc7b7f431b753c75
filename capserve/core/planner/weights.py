"""Bytes of a model's weights: by tensor class, and per GPU for a parallel layout.

Storage formats:
- MXFP4 (OCP MX): E2M1 values packed two per byte plus one E8M0 scale byte per 32 values along the
  reduction (last) dimension: ``rows * (cols/2 + cols/32)`` = 4.25 bits per value (OCP MX spec;
  docs/planner.md §2).
- FP8 block (DeepSeek-V3 README_WEIGHTS): one byte per value plus one fp32 ``weight_scale_inv`` per
  128x128 block.
- BF16: two bytes per value.

Sharding follows vLLM's layers (docs/planner.md §2): column- and row-parallel projections split
across tensor-parallel ranks; the MLA down-projections (q_a, kv_a), the KDA low-rank gate inputs, the
router and K3's latent-MoE projections are replicated; routed experts are spread over all TP x DP
ranks of a stage, whole experts with EP and byte slices without (``gpu_weights``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from capserve.core.catalog.models import AttentionKind, ModelEntry

Shard = Literal["tp", "replicated", "experts"]
Format = Literal["mxfp4", "fp8", "bf16"]

MXFP4_BLOCK = 32  # values per E8M0 scale (OCP MX spec; vLLM OCP_MX_BLOCK_SIZE)
FP8_BLOCK = 128  # DeepSeek-V3 weight_block_size [128, 128]
FP32_BYTES = 4
BF16_BYTES = 2


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def mxfp4_bytes(rows: int, cols: int) -> int:
    """Packed E2M1 (two per byte) plus one E8M0 scale byte per 32 values of each row."""
    return rows * (_ceil_div(cols, 2) + _ceil_div(cols, MXFP4_BLOCK))


def fp8_block_bytes(rows: int, cols: int) -> int:
    """One byte per value plus an fp32 scale per 128x128 block."""
    return rows * cols + FP32_BYTES * _ceil_div(rows, FP8_BLOCK) * _ceil_div(cols, FP8_BLOCK)


def linear_bytes(rows: int, cols: int, fmt: Format) -> int:
    """Bytes of one [rows, cols] weight matrix stored as ``fmt``."""
    if fmt == "mxfp4":
        return mxfp4_bytes(rows, cols)
    if fmt == "fp8":
        return fp8_block_bytes(rows, cols)
    return BF16_BYTES * rows * cols


@dataclass(frozen=True)
class TensorGroup:
    """Tensors of one class in one place (a layer, or the model's ends) that shard the same way."""

    cls: str
    nbytes: int
    shard: Shard
    units: int = 1  # for experts: how many experts the bytes cover (EP places whole experts)


def _mla_groups(model: ModelEntry) -> list[TensorGroup]:
    a, h, fmt = model.mla, model.hidden_size, model.quantization.dense
    assert a is not None  # noqa: S101 - narrows the type for mypy
    qk = a.qk_nope_head_dim + a.qk_rope_head_dim
    repl = linear_bytes(a.kv_lora_rank + a.qk_rope_head_dim, h, fmt)  # kv_a_proj_with_mqa
    tp = linear_bytes(a.num_heads * (a.qk_nope_head_dim + a.v_head_dim), a.kv_lora_rank, fmt)  # kv_b_proj
    tp += linear_bytes(h, a.num_heads * a.v_head_dim, fmt)  # o_proj
    norms = BF16_BYTES * a.kv_lora_rank
    if a.q_lora_rank:
        repl += linear_bytes(a.q_lora_rank, h, fmt)  # q_a_proj
        tp += linear_bytes(a.num_heads * qk, a.q_lora_rank, fmt)  # q_b_proj
        norms += BF16_BYTES * a.q_lora_rank
    else:
        tp += linear_bytes(a.num_heads * qk, h, fmt)  # q_proj
    if a.output_gate:
        tp += linear_bytes(a.num_heads * a.v_head_dim, h, fmt)  # gated MLA output gate
    return [
        TensorGroup("mla_attention", tp, "tp"),
        TensorGroup("mla_attention", repl, "replicated"),
        TensorGroup("norms", norms, "replicated"),
    ]


def _kda_groups(model: ModelEntry) -> list[TensorGroup]:
    k, h, fmt = model.kda, model.hidden_size, model.quantization.dense
    assert k is not None  # noqa: S101 - narrows the type for mypy
    proj = k.num_heads * k.head_dim
    tp = 3 * linear_bytes(proj, h, fmt) + linear_bytes(h, proj, fmt)  # q, k, v, o
    tp += linear_bytes(proj, k.head_dim, "bf16")  # f_b_proj
    tp += linear_bytes(k.num_heads, h, "bf16")  # b_proj (beta)
    tp += 3 * BF16_BYTES * proj * k.short_conv_kernel_size  # q/k/v depthwise conv weights
    tp += FP32_BYTES * (k.num_heads + proj)  # A_log, dt_bias
    repl = linear_bytes(k.head_dim, h, "bf16")  # f_a_proj
    if k.full_rank_gate:
        tp += linear_bytes(proj, h, fmt)  # g_proj
    else:
        repl += linear_bytes(k.head_dim, h, "bf16")  # g_a_proj
        tp += linear_bytes(proj, k.head_dim, "bf16")  # g_b_proj
    return [
        TensorGroup("kda_attention", tp, "tp"),
        TensorGroup("kda_attention", repl, "replicated"),
        TensorGroup("norms", BF16_BYTES * k.head_dim, "replicated"),  # o_norm
    ]


def _gqa_groups(model: ModelEntry) -> list[TensorGroup]:
    g, h, fmt = model.gqa, model.hidden_size, model.quantization.dense
    assert g is not None  # noqa: S101 - narrows the type for mypy
    q, kv = g.num_heads * g.head_dim, g.num_kv_heads * g.head_dim
    nbytes = linear_bytes(q, h, fmt) + 2 * linear_bytes(kv, h, fmt) + linear_bytes(h, q, fmt)
    if g.bias:
        nbytes += BF16_BYTES * (q + 2 * kv + h)
    if g.sinks:
        nbytes += BF16_BYTES * g.num_heads
    return [TensorGroup("gqa_attention", nbytes, "tp")]


def _mlp_groups(model: ModelEntry, index: int) -> list[TensorGroup]:
    m, h, fmt = model.moe, model.hidden_size, model.quantization.dense
    if index < m.first_k_dense:
        i = m.dense_intermediate_size
        return [TensorGroup("dense_mlp", 2 * linear_bytes(i, h, fmt) + linear_bytes(h, i, fmt), "tp")]
    e, d, i = m.n_routed_experts, model.expert_hidden_size, m.moe_intermediate_size
    efmt = model.quantization.routed_experts
    per_expert = 2 * linear_bytes(i, d, efmt) + linear_bytes(d, i, efmt)  # w1 (gate), w3 (up), w2 (down)
    if m.expert_bias:
        per_expert += BF16_BYTES * (2 * i + d)
    router = linear_bytes(e, h, "bf16")
    router += BF16_BYTES * e if m.router_bias else 0
    router += FP32_BYTES * e if m.score_correction_bias else 0
    groups = [
        TensorGroup("routed_experts", per_expert * e, "experts", units=e),
        TensorGroup("moe_router", router, "replicated"),
    ]
    if m.expert_hidden_size is not None:
        latent = linear_bytes(d, h, "bf16") + linear_bytes(h, d, "bf16") + BF16_BYTES * d
        groups.append(TensorGroup("moe_latent_projections", latent, "replicated"))
    if m.n_shared_experts:
        s = m.n_shared_experts * i
        groups.append(TensorGroup("shared_experts", 2 * linear_bytes(s, h, fmt) + linear_bytes(h, s, fmt), "tp"))
    return groups


def layer_groups(model: ModelEntry, index: int) -> list[TensorGroup]:
    """Every weight of decoder layer ``index`` (0-based), grouped by class and sharding."""
    kind = model.layers[index]
    groups = [TensorGroup("norms", 2 * BF16_BYTES * model.hidden_size, "replicated")]
    if kind == AttentionKind.MLA:
        groups += _mla_groups(model)
    elif kind == AttentionKind.KDA:
        groups += _kda_groups(model)
    else:
        groups += _gqa_groups(model)
    return groups + _mlp_groups(model, index)


def first_stage_groups(model: ModelEntry) -> list[TensorGroup]:
    """Weights held by the first pipeline stage besides its layers."""
    groups = [TensorGroup("embed_tokens", linear_bytes(model.vocab_size, model.hidden_size, "bf16"), "tp")]
    if model.vision_tower_params:
        groups.append(TensorGroup("vision_tower", BF16_BYTES * model.vision_tower_params, "replicated"))
    return groups


def last_stage_groups(model: ModelEntry) -> list[TensorGroup]:
    """Weights held by the last pipeline stage besides its layers (final norm, lm_head)."""
    groups = [TensorGroup("norms", BF16_BYTES * model.hidden_size, "replicated")]
    if not model.tie_word_embeddings:
        groups.append(TensorGroup("lm_head", linear_bytes(model.vocab_size, model.hidden_size, "bf16"), "tp"))
    return groups


def all_groups(model: ModelEntry) -> list[TensorGroup]:
    groups = first_stage_groups(model) + last_stage_groups(model)
    for index in range(model.num_layers):
        groups += layer_groups(model, index)
    return groups


def weight_bytes_by_class(model: ModelEntry) -> dict[str, int]:
    """Bytes of the whole model per tensor class (as stored; sums to the checkpoint's weight bytes)."""
    out: dict[str, int] = {}
    for g in all_groups(model):
        out[g.cls] = out.get(g.cls, 0) + g.nbytes
    return dict(sorted(out.items()))


def pipeline_stages(num_layers: int, pp: int) -> list[range]:
    """Contiguous layer ranges per stage, split as vLLM splits them (``get_pp_indices``).

    Layers that do not divide evenly go one each to the stages before the last, counting backwards
    from the second-to-last (the last stage also holds the final norm and lm_head); docs/planner.md.
    """
    if not 1 <= pp <= num_layers:
        raise ValueError(f"pipeline size {pp} must be between 1 and the {num_layers} layers")
    sizes = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        sizes[-i] += 1
    stages, start = [], 0
    for size in sizes:
        stages.append(range(start, start + size))
        start += size
    return stages


def split_share(total: int, parts: int, index: int) -> int:
    """Part ``index`` of ``total`` bytes split ``parts`` ways as evenly as whole bytes allow (sums to total)."""
    base, rem = divmod(total, parts)
    return base + (1 if index < rem else 0)


@dataclass(frozen=True)
class StageBytes:
    """The weights of one pipeline stage, by how vLLM shards them."""

    replicated: int  # on every GPU of the stage (norms, router, MLA/KDA down-projections, latent projections)
    tensor_parallel: int  # split across the TP ranks (attention, shared experts, dense MLPs, embeddings)
    experts: int  # routed experts, split across TP x DP ranks (whole experts with EP, slices without)
    experts_per_layer: int  # routed experts per MoE layer (EP places whole experts)
    bytes_per_expert: int  # one expert summed over the stage's MoE layers

    @property
    def dense(self) -> int:
        return self.replicated + self.tensor_parallel


@dataclass(frozen=True)
class GpuWeights:
    """Weights on one GPU, dense and expert parts apart."""

    dense: int
    experts: int

    @property
    def total(self) -> int:
        return self.dense + self.experts


class ModelBytes:
    """A model's weights as per-layer sums (built once), so any stage's bytes cost O(1)."""

    def __init__(self, model: ModelEntry) -> None:
        self.model = model
        self.num_layers = model.num_layers
        self.experts_per_layer = model.moe.n_routed_experts
        rep, tp, exp, per_expert = [0], [0], [0], [0]
        for index in range(model.num_layers):
            r = t = e = pe = 0
            for g in layer_groups(model, index):
                if g.shard == "replicated":
                    r += g.nbytes
                elif g.shard == "tp":
                    t += g.nbytes
                else:
                    e += g.nbytes
                    pe += g.nbytes // g.units
            rep.append(rep[-1] + r)
            tp.append(tp[-1] + t)
            exp.append(exp[-1] + e)
            per_expert.append(per_expert[-1] + pe)
        self._prefix = (rep, tp, exp, per_expert)
        self._first = _totals(first_stage_groups(model))
        self._last = _totals(last_stage_groups(model))

    def stage(self, layers: range, *, first: bool, last: bool) -> StageBytes:
        """The bytes of decoder layers ``layers`` plus the model's ends a first or last stage holds."""
        rep, tp, exp, per_expert = (p[layers.stop] - p[layers.start] for p in self._prefix)
        for held, (r, t) in ((first, self._first), (last, self._last)):
            if held:
                rep, tp = rep + r, tp + t
        return StageBytes(rep, tp, exp, self.experts_per_layer, per_expert)


def _totals(groups: Sequence[TensorGroup]) -> tuple[int, int]:
    """(replicated, tensor-parallel) bytes of the model-end groups (no experts there)."""
    return (
        sum(g.nbytes for g in groups if g.shard == "replicated"),
        sum(g.nbytes for g in groups if g.shard != "replicated"),
    )


def gpu_weights(
    stage: StageBytes, *, tp: int, dp: int, expert_parallel: bool, tp_rank: int = 0, dp_rank: int = 0
) -> GpuWeights:
    """Bytes on the GPU at (``dp_rank``, ``tp_rank``) of one stage, as vLLM shards them.

    Dense weights split by TP only (each DP rank holds a full copy); routed experts are spread over
    all TP x DP ranks of the stage (vLLM ``FusedMoEParallelConfig``): whole experts in contiguous
    blocks by EP rank ``dp_rank * tp + tp_rank`` with ``--enable-expert-parallel``, else byte slices
    of every expert. Rank (0, 0) is always the fullest.
    """
    dense = stage.replicated + split_share(stage.tensor_parallel, tp, tp_rank)
    ranks, rank = tp * dp, dp_rank * tp + tp_rank
    if expert_parallel:
        experts = split_share(stage.experts_per_layer, ranks, rank) * stage.bytes_per_expert
    else:
        experts = split_share(stage.experts, ranks, rank)
    return GpuWeights(dense=dense, experts=experts)
