"""A K3-shaped checkpoint generator: K3's tensor names, classes and MXFP4 expert layout at any size.

The tiny default (``TINY_K3``) mirrors the catalog's ``tiny-k3`` entry and is a few MB; with K3's own
geometry (``K3``) the same code lists K3's ~497k tensors without writing a byte (for plans and benches).
Tensor names follow weights.md §1.1 (``language_model.model.layers.L.block_sparse_moe.experts.E.w1
.weight_packed`` ...); shards are layer-ordered like an HF upload, so every shard mixes experts of every
EP rank — which is what makes a per-node re-shard worth it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from math import prod
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from capserve.core.weights.safetensors import DTYPE_BYTES, TensorEntry, encode_header
from capserve.sandbox.hub import mxfp4

Spec = tuple[str, str, tuple[int, ...]]  # (name, dtype, shape)
PREFIX = "language_model."


class CheckpointGeometry(BaseModel):
    """The geometry of a K3-shaped checkpoint (keys as in K3's config.json ``text_config``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    repo: str = Field(min_length=3, max_length=200, description="Repo id written as _name_or_path.")
    hidden_size: int = Field(ge=32, le=65536, description="Model width.")
    vocab_size: int = Field(ge=32, le=1 << 20, description="Vocabulary.")
    max_position_embeddings: int = Field(ge=256, le=1 << 24, description="Maximum context.")
    num_layers: int = Field(ge=1, le=512, description="Decoder layers.")
    full_attn_layers: tuple[int, ...] = Field(description="1-based MLA layers; the others are KDA.")
    mla_heads: int = Field(ge=1, le=1024, description="MLA attention heads.")
    q_lora_rank: int = Field(ge=1, le=65536, description="MLA query LoRA rank.")
    kv_lora_rank: int = Field(ge=1, le=65536, description="MLA KV LoRA rank.")
    qk_nope_head_dim: int = Field(ge=1, le=1024, description="MLA non-rotary head dim.")
    qk_rope_head_dim: int = Field(ge=1, le=1024, description="MLA rotary head dim.")
    v_head_dim: int = Field(ge=1, le=1024, description="MLA value head dim.")
    kda_heads: int = Field(ge=1, le=1024, description="KDA heads.")
    kda_head_dim: int = Field(ge=1, le=1024, description="KDA head dim.")
    short_conv_kernel_size: int = Field(ge=1, le=16, description="KDA short convolution width.")
    num_experts: int = Field(ge=1, le=65536, description="Routed experts per MoE layer.")
    experts_per_token: int = Field(ge=1, le=256, description="Routed experts per token.")
    shared_experts: int = Field(ge=0, le=16, description="Shared experts per MoE layer.")
    moe_intermediate_size: int = Field(ge=32, le=65536, description="Expert intermediate size (multiple of 32).")
    expert_hidden_size: int = Field(ge=32, le=65536, description="Latent width experts run at (multiple of 32).")
    first_k_dense: int = Field(ge=0, le=512, description="Leading dense-MLP layers.")
    dense_intermediate_size: int = Field(ge=1, le=1 << 20, description="Dense MLP intermediate size.")
    shard_bytes: int = Field(ge=1024, le=50 * 1024**3, description="Target tensor bytes per shard file.")
    seed: int = Field(0, ge=0, description="RNG seed: the same geometry and seed give the same bytes.")

    def config_json(self) -> dict[str, object]:
        """K3-style config.json: a multimodal wrapper with ``text_config`` (model_type kimi_linear)."""
        full = sorted(self.full_attn_layers)
        return {
            "architectures": ["KimiK3ForConditionalGeneration"],
            "model_type": "kimi_k3",
            "_name_or_path": self.repo,
            "quantization_config": {
                "quant_method": "compressed-tensors",
                "format": "mxfp4-pack-quantized",
                "config_groups": {
                    "group_0": {
                        "targets": ["Linear"],
                        "weights": {
                            "num_bits": 4,
                            "type": "float",
                            "group_size": 32,
                            "strategy": "group",
                            "symmetric": True,
                        },
                    }
                },
                "ignore": ["re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp.*", "lm_head"],
            },
            "text_config": {
                "model_type": "kimi_linear",
                "architectures": ["KimiLinearForCausalLM"],
                "hidden_size": self.hidden_size,
                "vocab_size": self.vocab_size,
                "max_position_embeddings": self.max_position_embeddings,
                "num_hidden_layers": self.num_layers,
                "tie_word_embeddings": False,
                "num_attention_heads": self.mla_heads,
                "q_lora_rank": self.q_lora_rank,
                "kv_lora_rank": self.kv_lora_rank,
                "qk_nope_head_dim": self.qk_nope_head_dim,
                "qk_rope_head_dim": self.qk_rope_head_dim,
                "v_head_dim": self.v_head_dim,
                "mla_use_nope": True,
                "mla_use_output_gate": True,
                "linear_attn_config": {
                    "full_attn_layers": full,
                    "kda_layers": [i for i in range(1, self.num_layers + 1) if i not in full],
                    "num_heads": self.kda_heads,
                    "head_dim": self.kda_head_dim,
                    "short_conv_kernel_size": self.short_conv_kernel_size,
                    "use_full_rank_gate": True,
                },
                "num_experts": self.num_experts,
                "num_experts_per_token": self.experts_per_token,
                "num_shared_experts": self.shared_experts,
                "moe_intermediate_size": self.moe_intermediate_size,
                "routed_expert_hidden_size": self.expert_hidden_size,
                "first_k_dense_replace": self.first_k_dense,
                "intermediate_size": self.dense_intermediate_size,
                "moe_router_activation_func": "sigmoid",
            },
        }


# Mirrors the catalog's tiny-k3 entry (capserve/core/catalog/entries.py); a test checks they agree.
TINY_K3 = CheckpointGeometry(
    repo="capserve-sandbox/tiny-k3",
    hidden_size=256,
    vocab_size=1024,
    max_position_embeddings=8192,
    num_layers=6,
    full_attn_layers=(4, 6),
    mla_heads=8,
    q_lora_rank=64,
    kv_lora_rank=64,
    qk_nope_head_dim=32,
    qk_rope_head_dim=16,
    v_head_dim=32,
    kda_heads=8,
    kda_head_dim=32,
    short_conv_kernel_size=4,
    num_experts=8,
    experts_per_token=2,
    shared_experts=2,
    moe_intermediate_size=64,
    expert_hidden_size=128,
    first_k_dense=1,
    dense_intermediate_size=512,
    shard_bytes=1024 * 1024,
)

# K3 as reported by third-party mirrors of its config.json (weights.md §1.1; unverified against the real file).
K3 = CheckpointGeometry(
    repo="moonshotai/Kimi-K3",
    hidden_size=7168,
    vocab_size=163840,
    max_position_embeddings=1 << 20,
    num_layers=93,
    full_attn_layers=(*range(4, 93, 4), 93),
    mla_heads=64,
    q_lora_rank=1536,
    kv_lora_rank=512,
    qk_nope_head_dim=128,
    qk_rope_head_dim=64,
    v_head_dim=128,
    kda_heads=96,
    kda_head_dim=128,
    short_conv_kernel_size=4,
    num_experts=896,
    experts_per_token=16,
    shared_experts=2,
    moe_intermediate_size=3072,
    expert_hidden_size=3584,
    first_k_dense=1,
    dense_intermediate_size=18432,
    shard_bytes=5 * 10**9,
)


def tensor_specs(g: CheckpointGeometry) -> Iterator[Spec]:
    """Every tensor of the checkpoint in file order (layer-major)."""
    h, lat, inter = g.hidden_size, g.expert_hidden_size, g.moe_intermediate_size
    yield f"{PREFIX}model.embed_tokens.weight", "BF16", (g.vocab_size, h)
    full = set(g.full_attn_layers)
    for layer in range(g.num_layers):
        p = f"{PREFIX}model.layers.{layer}."
        yield p + "input_layernorm.weight", "BF16", (h,)
        yield p + "post_attention_layernorm.weight", "BF16", (h,)
        a = p + "self_attn."
        if layer + 1 in full:
            heads = g.mla_heads
            yield a + "q_a_proj.weight", "BF16", (g.q_lora_rank, h)
            yield a + "q_a_layernorm.weight", "BF16", (g.q_lora_rank,)
            yield a + "q_b_proj.weight", "BF16", (heads * (g.qk_nope_head_dim + g.qk_rope_head_dim), g.q_lora_rank)
            yield a + "kv_a_proj_with_mqa.weight", "BF16", (g.kv_lora_rank + g.qk_rope_head_dim, h)
            yield a + "kv_a_layernorm.weight", "BF16", (g.kv_lora_rank,)
            yield a + "kv_b_proj.weight", "BF16", (heads * (g.qk_nope_head_dim + g.v_head_dim), g.kv_lora_rank)
            yield a + "g_proj.weight", "BF16", (heads * g.v_head_dim, h)
            yield a + "o_proj.weight", "BF16", (h, heads * g.v_head_dim)
        else:
            width, d = g.kda_heads * g.kda_head_dim, g.kda_head_dim
            for proj in ("q_proj", "k_proj", "v_proj"):
                yield a + f"{proj}.weight", "BF16", (width, h)
            for conv in ("q_conv1d", "k_conv1d", "v_conv1d"):
                yield a + f"{conv}.weight", "BF16", (width, 1, g.short_conv_kernel_size)
            yield a + "A_log", "F32", (g.kda_heads,)
            yield a + "dt_bias", "F32", (width,)
            yield a + "f_a_proj.weight", "BF16", (d, h)
            yield a + "f_b_proj.weight", "BF16", (width, d)
            yield a + "b_proj.weight", "BF16", (g.kda_heads, h)
            yield a + "g_a_proj.weight", "BF16", (d, h)
            yield a + "g_b_proj.weight", "BF16", (width, d)
            yield a + "o_norm.weight", "BF16", (d,)
            yield a + "o_proj.weight", "BF16", (h, width)
        if layer < g.first_k_dense:
            yield p + "mlp.gate_proj.weight", "BF16", (g.dense_intermediate_size, h)
            yield p + "mlp.up_proj.weight", "BF16", (g.dense_intermediate_size, h)
            yield p + "mlp.down_proj.weight", "BF16", (h, g.dense_intermediate_size)
            continue
        m = p + "block_sparse_moe."
        yield m + "gate.weight", "BF16", (g.num_experts, h)
        yield m + "gate.e_score_correction_bias", "F32", (g.num_experts,)
        yield m + "routed_expert_down_proj.weight", "BF16", (lat, h)
        yield m + "routed_expert_up_proj.weight", "BF16", (h, lat)
        yield m + "routed_expert_norm.weight", "BF16", (lat,)
        if g.shared_experts:
            shared = g.shared_experts * inter
            yield m + "shared_experts.gate_proj.weight", "BF16", (shared, h)
            yield m + "shared_experts.up_proj.weight", "BF16", (shared, h)
            yield m + "shared_experts.down_proj.weight", "BF16", (h, shared)
        for e in range(g.num_experts):
            # compressed-tensors MXFP4: packed [out, in/2] + E8M0 scales [out, in/32] (weights.md §1.1)
            for w, (rows, cols) in (("w1", (inter, lat)), ("w2", (lat, inter)), ("w3", (inter, lat))):
                yield m + f"experts.{e}.{w}.weight_packed", "U8", (rows, cols // 2)
                yield m + f"experts.{e}.{w}.weight_scale", "U8", (rows, cols // 32)
    yield f"{PREFIX}model.norm.weight", "BF16", (h,)
    yield f"{PREFIX}lm_head.weight", "BF16", (g.vocab_size, h)


def shard(g: CheckpointGeometry) -> list[list[Spec]]:
    """Tensors split into layer-ordered shards of about ``shard_bytes`` each."""
    shards: list[list[Spec]] = [[]]
    size = 0
    for spec in tensor_specs(g):
        nbytes = prod(spec[2]) * DTYPE_BYTES[spec[1]]
        if shards[-1] and size + nbytes > g.shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(spec)
        size += nbytes
    return shards


def shard_name(i: int, n: int) -> str:
    return f"model-{i + 1:05d}-of-{n:05d}.safetensors"


def virtual_tensors_by_file(g: CheckpointGeometry) -> dict[str, list[TensorEntry]]:
    """Header entries of every shard without writing anything (what the Hub's header metadata would give)."""
    shards = shard(g)
    out: dict[str, list[TensorEntry]] = {}
    for i, specs in enumerate(shards):
        entries, offset = [], 0
        for name, dtype, shape in specs:
            nbytes = prod(shape) * DTYPE_BYTES[dtype]
            entries.append(TensorEntry(name, dtype, shape, offset, offset + nbytes))
            offset += nbytes
        out[shard_name(i, len(shards))] = entries
    return out


def write_checkpoint(g: CheckpointGeometry, out: Path) -> Path:
    """Write config.json, tokenizer_config.json, the shards and the index into ``out``; return it."""
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(g.seed)
    shards = shard(g)
    weight_map: dict[str, str] = {}
    total = 0
    scales: dict[str, bytes] = {}
    for i, specs in enumerate(shards):
        name = shard_name(i, len(shards))
        header, entries = encode_header(specs, metadata={"format": "pt"})
        with open(out / name, "wb") as fh:
            fh.write(header)
            for tname, dtype, shape in specs:
                fh.write(_tensor_bytes(tname, dtype, shape, rng, scales))
                weight_map[tname] = name
        total += sum(e.nbytes for e in entries)
    (out / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=1)
    )
    (out / "config.json").write_text(json.dumps(g.config_json(), indent=1))
    (out / "tokenizer_config.json").write_text(json.dumps({"model_max_length": g.max_position_embeddings}))
    return out


def _tensor_bytes(
    name: str, dtype: str, shape: tuple[int, ...], rng: np.random.Generator, scales: dict[str, bytes]
) -> bytes:
    if name.endswith(".weight_packed"):
        rows, half = shape
        packed, scale = mxfp4.quantize(rng.standard_normal((rows, half * 2), dtype=np.float32) * 0.02)
        scales[name.removesuffix("_packed") + "_scale"] = scale.tobytes()
        return packed.tobytes()
    if name.endswith(".weight_scale"):
        return scales.pop(name)
    if dtype == "F32":
        return np.zeros(shape, np.float32).tobytes()
    values = rng.standard_normal(shape, dtype=np.float32) * 0.02
    if name.endswith("norm.weight"):
        values = np.ones(shape, np.float32)
    # bf16 = the upper 16 bits of an IEEE float32 (truncation is fine for random test data).
    return (values.view(np.uint32) >> 16).astype(np.uint16).tobytes()
