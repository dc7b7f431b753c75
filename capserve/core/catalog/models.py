"""The shape of a model entry: the geometry the planner and the weights stage both need.

Layer indices are 0-based everywhere in this package (config.json files that list 1-based layers,
like K3's ``linear_attn_config.full_attn_layers``, are converted on the way in).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

Provenance = Literal["third-party", "config.json", "capserve"]
ExpertQuant = Literal["mxfp4", "fp8", "bf16"]
DenseQuant = Literal["fp8", "bf16"]
ActivationQuant = Literal["bf16", "fp8", "mxfp8"]

_DIM = 1 << 20  # upper bound for any single dimension; far above any real model


class AttentionKind(StrEnum):
    """What a layer uses to mix tokens; decides its KV or state cost."""

    MLA = "mla"  # multi-head latent attention: one latent per token per layer
    KDA = "kda"  # Kimi Delta Attention: linear, fixed-size recurrent state per sequence
    GQA = "gqa"  # grouped-query attention over the whole context
    GQA_SLIDING = "gqa_sliding"  # grouped-query attention over a fixed window


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class MlaGeometry(_Frozen):
    """Multi-head latent attention (DeepSeek-V2/V3 family)."""

    num_heads: int = Field(ge=1, le=4096, description="num_attention_heads.")
    q_lora_rank: int = Field(ge=0, le=_DIM, description="q_lora_rank; 0 means a full-rank q_proj.")
    kv_lora_rank: int = Field(ge=1, le=_DIM, description="kv_lora_rank: the cached latent width.")
    qk_nope_head_dim: int = Field(ge=0, le=4096, description="qk_nope_head_dim.")
    qk_rope_head_dim: int = Field(ge=0, le=4096, description="qk_rope_head_dim: also cached per token.")
    v_head_dim: int = Field(ge=1, le=4096, description="v_head_dim.")
    output_gate: bool = Field(
        default=False, description="Gated MLA (K3 mla_use_output_gate): an extra [heads*v_head_dim, hidden] projection."
    )

    @property
    def cached_values_per_token(self) -> int:
        """Values cached per token per MLA layer: the latent plus the shared rope key."""
        return self.kv_lora_rank + self.qk_rope_head_dim


class KdaGeometry(_Frozen):
    """Kimi Delta Attention (linear attention) as in vLLM's KimiDeltaAttention layer."""

    num_heads: int = Field(ge=1, le=4096, description="linear_attn_config.num_heads.")
    head_dim: int = Field(ge=1, le=4096, description="linear_attn_config.head_dim (state is head_dim x head_dim).")
    short_conv_kernel_size: int = Field(ge=1, le=64, description="linear_attn_config.short_conv_kernel_size.")
    full_rank_gate: bool = Field(
        default=False,
        description="linear_attn_config.use_full_rank_gate: output gate g_proj [heads*head_dim, hidden] "
        "instead of the low-rank g_a/g_b pair.",
    )


class GqaGeometry(_Frozen):
    """Grouped-query attention (gpt-oss)."""

    num_heads: int = Field(ge=1, le=4096, description="num_attention_heads.")
    num_kv_heads: int = Field(ge=1, le=4096, description="num_key_value_heads.")
    head_dim: int = Field(ge=1, le=4096, description="head_dim.")
    sliding_window: int = Field(default=0, ge=0, le=_DIM, description="Window of GQA_SLIDING layers; 0 if none.")
    bias: bool = Field(default=False, description="q/k/v/o projections carry a bias.")
    sinks: bool = Field(default=False, description="Per-head attention sinks (gpt-oss).")


class MoeGeometry(_Frozen):
    """Mixture of experts plus the dense layers that precede it."""

    n_routed_experts: int = Field(ge=1, le=65_536, description="Routed experts per MoE layer.")
    experts_per_token: int = Field(ge=1, le=1024, description="Routed experts active per token.")
    n_shared_experts: int = Field(ge=0, le=64, description="Shared (always-on) experts per MoE layer.")
    moe_intermediate_size: int = Field(ge=1, le=_DIM, description="Intermediate width of one expert.")
    expert_hidden_size: int | None = Field(
        default=None,
        ge=1,
        le=_DIM,
        description="Latent MoE: width experts run at (K3 routed_expert_hidden_size), with a down/up "
        "projection around them. None: experts run at hidden_size.",
    )
    first_k_dense: int = Field(ge=0, le=4096, description="first_k_dense_replace: leading layers with a dense MLP.")
    dense_intermediate_size: int = Field(ge=0, le=_DIM, description="intermediate_size of those dense MLPs.")
    expert_bias: bool = Field(default=False, description="Experts carry biases (gpt-oss).")
    router_bias: bool = Field(default=False, description="The router has a bias (gpt-oss).")
    score_correction_bias: bool = Field(
        default=False, description="Router e_score_correction_bias [experts] in fp32 (DeepSeek-V3 family)."
    )


class Quantization(_Frozen):
    """How the checkpoint stores its weights."""

    routed_experts: ExpertQuant = Field(
        description="mxfp4: E2M1 two per byte + one E8M0 scale byte per 32; fp8: e4m3 with one fp32 "
        "scale per 128x128 block; bf16: 2 bytes."
    )
    dense: DenseQuant = Field(
        description="Attention, shared experts and dense MLP projections. Embeddings, lm_head, router "
        "and norms are always bf16/fp32."
    )
    activations: ActivationQuant = Field(
        default="bf16",
        description="What the routed-expert matmuls take as input: bf16 (weight-only quantization, gpt-oss), "
        "fp8 (DeepSeek-V3 block FP8, quantized on the fly) or mxfp8 (K3: MXFP4 weights trained with MXFP8 "
        "activations). Decides which kernels a GPU needs (docs/planner.md, 'Kernel support').",
    )


class Thinking(_Frozen):
    """A model that thinks before it answers; vLLM's reasoning parser streams the thinking apart from
    the answer (``delta.reasoning``), and it counts against ``max_tokens`` (docs/evaluation.md §6.4)."""

    reasoning_parser: str = Field(min_length=1, max_length=64, description="vLLM --reasoning-parser for it.")
    off_switch: str | None = Field(
        default=None,
        max_length=64,
        description="The chat_template_kwargs key that, set to false, makes it answer without thinking; None: "
        "it cannot be turned off.",
    )
    source: str = Field(min_length=1, max_length=1000, description="Where the behaviour is documented.")

    def off_request(self) -> dict[str, object]:
        """Request fields that turn the thinking off (ValueError when it cannot be)."""
        if self.off_switch is None:
            raise ValueError(f"thinking with --reasoning-parser {self.reasoning_parser} cannot be turned off")
        return {"chat_template_kwargs": {self.off_switch: False}}


class ModelEntry(_Frozen):
    """A servable model: its identity, where it comes from, and its geometry."""

    name: str = Field(min_length=1, max_length=128, description="Catalog id, e.g. 'kimi-k3'.")
    hf_repo: str = Field(min_length=3, max_length=256, pattern=r"^[^/\s]+/[^/\s]+$", description="Hub repo id.")
    provenance: Provenance = Field(
        description="'third-party': geometry from public third-party material, to be confirmed from the "
        "real config.json at run time; 'config.json': parsed from the model's own config.json; "
        "'capserve': defined by this project (sandbox models)."
    )
    source: str = Field(min_length=1, max_length=1000, description="Where the numbers come from.")
    hidden_size: int = Field(ge=1, le=_DIM, description="hidden_size.")
    vocab_size: int = Field(ge=1, le=10_000_000, description="vocab_size.")
    max_context: int = Field(ge=1, le=1 << 26, description="Longest context the model supports, in tokens.")
    tie_word_embeddings: bool = Field(default=False, description="lm_head shares the embedding matrix.")
    layers: tuple[AttentionKind, ...] = Field(
        min_length=1, max_length=4096, description="Token mixer of each decoder layer, in order (0-based)."
    )
    mla: MlaGeometry | None = Field(default=None, description="MLA geometry, if any layer is MLA.")
    kda: KdaGeometry | None = Field(default=None, description="KDA geometry, if any layer is KDA.")
    gqa: GqaGeometry | None = Field(default=None, description="GQA geometry, if any layer is GQA.")
    moe: MoeGeometry = Field(description="Expert and dense-MLP geometry.")
    quantization: Quantization = Field(description="Storage formats of the weights.")
    vision_tower_params: int = Field(
        default=0, ge=0, le=10**11, description="Parameters of the vision encoder (bf16), 0 for text-only."
    )
    thinking: Thinking | None = Field(
        default=None, description="How it thinks before answering; None: it answers directly."
    )

    @model_validator(mode="after")
    def _geometry_matches_layers(self) -> Self:
        needed = {
            AttentionKind.MLA: ("mla", self.mla),
            AttentionKind.KDA: ("kda", self.kda),
            AttentionKind.GQA: ("gqa", self.gqa),
            AttentionKind.GQA_SLIDING: ("gqa", self.gqa),
        }
        for kind in set(self.layers):
            field, value = needed[kind]
            if value is None:
                raise ValueError(f"layers use {kind.value} but {field} geometry is missing")
        if AttentionKind.GQA_SLIDING in self.layers and self.gqa is not None and self.gqa.sliding_window == 0:
            raise ValueError("layers use gqa_sliding but gqa.sliding_window is 0")
        if self.moe.first_k_dense > len(self.layers):
            raise ValueError(f"moe.first_k_dense={self.moe.first_k_dense} exceeds {len(self.layers)} layers")
        if self.moe.first_k_dense > 0 and self.moe.dense_intermediate_size == 0:
            raise ValueError("moe.first_k_dense > 0 needs moe.dense_intermediate_size")
        return self

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def layer_indices(self, kind: AttentionKind) -> tuple[int, ...]:
        """0-based indices of the layers using ``kind``."""
        return tuple(i for i, k in enumerate(self.layers) if k == kind)

    @property
    def mla_layers(self) -> tuple[int, ...]:
        return self.layer_indices(AttentionKind.MLA)

    @property
    def kda_layers(self) -> tuple[int, ...]:
        return self.layer_indices(AttentionKind.KDA)

    @property
    def moe_layers(self) -> tuple[int, ...]:
        """0-based indices of the layers whose MLP is a mixture of experts."""
        return tuple(range(self.moe.first_k_dense, self.num_layers))

    @property
    def expert_hidden_size(self) -> int:
        """Width the routed experts run at (the latent width for latent MoE)."""
        return self.moe.expert_hidden_size or self.hidden_size
