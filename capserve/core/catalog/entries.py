"""The models capserve knows without reading anything, with where each number comes from."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType

from capserve.core.catalog.models import (
    AttentionKind,
    GqaGeometry,
    KdaGeometry,
    MlaGeometry,
    ModelEntry,
    MoeGeometry,
    Quantization,
)
from capserve.core.catalog.thinking import GPT_OSS_THINKING, K3_THINKING


def hybrid_layers(num_layers: int, full_attn_layers_1based: Iterable[int]) -> tuple[AttentionKind, ...]:
    """KDA everywhere except the listed (1-based, as in K3's config.json) MLA layers."""
    full = {i - 1 for i in full_attn_layers_1based}
    if any(i < 0 or i >= num_layers for i in full):
        raise ValueError(f"full_attn_layers {sorted(full)} out of range for {num_layers} layers (1-based)")
    return tuple(AttentionKind.MLA if i in full else AttentionKind.KDA for i in range(num_layers))


def k3_full_attn_layers(num_layers: int) -> tuple[int, ...]:
    """K3's pattern, 1-based: every 4th layer plus the last one (4, 8, ..., 92, 93 for 93 layers)."""
    every_fourth = list(range(4, num_layers + 1, 4))
    if every_fourth[-1:] != [num_layers]:
        every_fourth.append(num_layers)
    return tuple(every_fourth)


_K3_LAYERS = 93

KIMI_K3 = ModelEntry(
    name="kimi-k3",
    hf_repo="moonshotai/Kimi-K3",
    provenance="third-party",
    source=(
        "docs/planner.md §10: the config.json keys vLLM's vllm/models/kimi_k3 reads, as public mirrors of "
        "it agree (not yet read from the real config.json). Full-rank KDA output gate. Vision tower geometry "
        "not published there: counted only once read from config.json."
    ),
    hidden_size=7168,
    vocab_size=163_840,
    max_context=1_048_576,  # --max-model-len 1048576 in the vLLM Kimi-K3 recipe (docs/planner.md §10)
    layers=hybrid_layers(_K3_LAYERS, k3_full_attn_layers(_K3_LAYERS)),
    mla=MlaGeometry(
        num_heads=64,
        q_lora_rank=1536,
        kv_lora_rank=512,
        qk_nope_head_dim=128,
        qk_rope_head_dim=64,
        v_head_dim=128,
        output_gate=True,
    ),
    kda=KdaGeometry(num_heads=96, head_dim=128, short_conv_kernel_size=4, full_rank_gate=True),
    moe=MoeGeometry(
        n_routed_experts=896,
        experts_per_token=16,
        n_shared_experts=2,
        moe_intermediate_size=3072,
        expert_hidden_size=3584,
        first_k_dense=1,
        dense_intermediate_size=18_432,
        score_correction_bias=True,
    ),
    # MXFP4 weights with MXFP8 activations from quantization-aware training (vLLM K3 recipe and serving
    # note; docs/planner.md).
    quantization=Quantization(routed_experts="mxfp4", dense="bf16", activations="mxfp8"),
    thinking=K3_THINKING,
)

KIMI_K2 = ModelEntry(
    name="kimi-k2",
    hf_repo="moonshotai/Kimi-K2-Instruct",
    provenance="third-party",
    source=(
        "docs/planner.md §10: Kimi-K2 config.json (DeepseekV3ForCausalLM, model_type kimi_k2) as excerpted "
        "publicly; FP8 block-quantized checkpoint (weight_block_size 128x128)."
    ),
    hidden_size=7168,
    vocab_size=163_840,
    max_context=131_072,  # K2-Instruct max_position_embeddings (K2.5/K2.6: 262144)
    layers=(AttentionKind.MLA,) * 61,
    mla=MlaGeometry(
        num_heads=64, q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128
    ),
    moe=MoeGeometry(
        n_routed_experts=384,
        experts_per_token=8,
        n_shared_experts=1,
        moe_intermediate_size=2048,
        first_k_dense=1,
        dense_intermediate_size=18_432,
        score_correction_bias=True,
    ),
    quantization=Quantization(routed_experts="fp8", dense="fp8", activations="fp8"),
)

DEEPSEEK_V3 = ModelEntry(
    name="deepseek-v3",
    hf_repo="deepseek-ai/DeepSeek-V3",
    provenance="third-party",
    source=(
        "DeepSeek-V3 config.json (hidden 7168, 61 layers, 256 experts, 8 per token, first_k_dense_replace 3, "
        "128 heads, vocab 129280, max_position_embeddings 163840) and README_WEIGHTS.md (FP8 e4m3, 128x128 "
        "blocks). The MTP layer 61 (~14B, loaded only for speculative decoding) is not counted."
    ),
    hidden_size=7168,
    vocab_size=129_280,
    max_context=163_840,
    layers=(AttentionKind.MLA,) * 61,
    mla=MlaGeometry(
        num_heads=128, q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128
    ),
    moe=MoeGeometry(
        n_routed_experts=256,
        experts_per_token=8,
        n_shared_experts=1,
        moe_intermediate_size=2048,
        first_k_dense=3,
        dense_intermediate_size=18_432,
        score_correction_bias=True,
    ),
    quantization=Quantization(routed_experts="fp8", dense="fp8", activations="fp8"),
)

GPT_OSS_120B = ModelEntry(
    name="gpt-oss-120b",
    hf_repo="openai/gpt-oss-120b",
    provenance="third-party",
    source=(
        "openai/gpt-oss-120b config.json as mirrored publicly (transformers GptOssConfig defaults): 36 layers "
        "alternating sliding_attention (window 128) / full_attention, hidden 2880, 64 heads, 8 KV heads, "
        "head_dim 64, 128 experts, 4 per token, vocab 201088, quant_method mxfp4 for experts only "
        "(self_attn, router, embeddings, lm_head in bf16); docs/planner.md §10."
    ),
    hidden_size=2880,
    vocab_size=201_088,
    max_context=131_072,
    layers=tuple(AttentionKind.GQA_SLIDING if i % 2 == 0 else AttentionKind.GQA for i in range(36)),
    gqa=GqaGeometry(num_heads=64, num_kv_heads=8, head_dim=64, sliding_window=128, bias=True, sinks=True),
    moe=MoeGeometry(
        n_routed_experts=128,
        experts_per_token=4,
        n_shared_experts=0,
        moe_intermediate_size=2880,
        first_k_dense=0,
        dense_intermediate_size=0,
        expert_bias=True,
        router_bias=True,
    ),
    quantization=Quantization(routed_experts="mxfp4", dense="bf16"),
    thinking=GPT_OSS_THINKING,
)

_TINY_LAYERS = 6

# K3's structure at toy size: same tensor names and classes, the same MLA rule (every 4th layer plus
# the last: 1-based 4 and 6), a first dense layer, latent MoE, MXFP4 experts. Every matrix that is
# MXFP4 has a reduction dimension divisible by 32; every head count divides by 8 so TP8 is legal.
TINY_K3 = ModelEntry(
    name="tiny-k3",
    hf_repo="capserve-sandbox/tiny-k3",
    provenance="capserve",
    source="Defined here for the sandbox: K3-shaped, small dims; its config.json is generated from this entry.",
    hidden_size=256,
    vocab_size=1024,
    max_context=8192,
    layers=hybrid_layers(_TINY_LAYERS, k3_full_attn_layers(_TINY_LAYERS)),
    mla=MlaGeometry(
        num_heads=8,
        q_lora_rank=64,
        kv_lora_rank=64,
        qk_nope_head_dim=32,
        qk_rope_head_dim=16,
        v_head_dim=32,
        output_gate=True,
    ),
    kda=KdaGeometry(num_heads=8, head_dim=32, short_conv_kernel_size=4, full_rank_gate=True),
    moe=MoeGeometry(
        n_routed_experts=8,
        experts_per_token=2,
        n_shared_experts=2,
        moe_intermediate_size=64,
        expert_hidden_size=128,
        first_k_dense=1,
        dense_intermediate_size=512,
        score_correction_bias=True,
    ),
    quantization=Quantization(routed_experts="mxfp4", dense="bf16", activations="mxfp8"),
    thinking=K3_THINKING,  # the sandbox serves it as vLLM serves K3
)

MODELS: Mapping[str, ModelEntry] = MappingProxyType(
    {m.name: m for m in (KIMI_K3, KIMI_K2, DEEPSEEK_V3, GPT_OSS_120B, TINY_K3)}
)
