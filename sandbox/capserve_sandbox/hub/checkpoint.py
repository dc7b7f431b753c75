"""A K3-shaped checkpoint generator: K3's tensor names, classes and MXFP4 expert layout at any size.

The geometry is a catalog ModelEntry: the tiny default (``TINY_K3``) is the catalog's ``tiny-k3`` and is a few
MB; with ``kimi-k3`` (``K3``) the same code lists K3's ~497k tensors without writing a byte (for plans and benches).
Tensor names follow docs/kimi-k3.md §2 (``language_model.model.layers.L.block_sparse_moe.experts.E.w1
.weight_packed`` ...); shards are layer-ordered like an HF upload, so every shard mixes experts of every
EP rank — which is what makes a per-node re-shard worth it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from math import prod
from pathlib import Path
from typing import Any, Self

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from capserve.core.catalog import get_model
from capserve.core.catalog.hf_config import model_to_hf_config
from capserve.core.catalog.models import ModelEntry
from capserve.core.weights.safetensors import DTYPE_BYTES, TensorEntry, encode_header
from capserve_sandbox.hub import mxfp4

Spec = tuple[str, str, tuple[int, ...]]  # (name, dtype, shape)
PREFIX = "language_model."


class CheckpointGeometry(BaseModel):
    """A K3-shaped checkpoint to generate: a catalog ModelEntry (the geometry) plus how to write it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: ModelEntry = Field(description="The geometry; config.json is model_to_hf_config(model).")
    repo: str = Field(min_length=3, max_length=200, description="Repo id written as _name_or_path.")
    # Not model geometry: how the generator lays the bytes out.
    shard_bytes: int = Field(ge=1024, le=50 * 1024**3, description="Target tensor bytes per shard file.")
    seed: int = Field(0, ge=0, description="RNG seed: the same geometry and seed give the same bytes.")

    @classmethod
    def from_model(
        cls, model: ModelEntry, *, repo: str | None = None, shard_bytes: int, seed: int = 0
    ) -> CheckpointGeometry:
        """The checkpoint of catalog entry ``model``, served as ``repo`` (default: its hf_repo)."""
        return cls(model=model, repo=repo or model.hf_repo, shard_bytes=shard_bytes, seed=seed)

    @model_validator(mode="after")
    def _k3_shaped(self) -> Self:
        """tensor_specs writes K3's tensor set only: refuse entries it would misrepresent."""
        m = self.model
        problems = [
            text
            for bad, text in (
                (m.mla is None or m.kda is None or m.gqa is not None, "needs MLA + KDA layers and no GQA"),
                (m.mla is not None and (m.mla.q_lora_rank == 0 or not m.mla.output_gate),
                 "needs MLA with a q LoRA and an output gate"),
                (m.quantization.routed_experts != "mxfp4" or m.quantization.dense != "bf16",
                 "writes MXFP4 experts and bf16 elsewhere"),
                (m.moe.expert_bias or m.moe.router_bias or not m.moe.score_correction_bias,
                 "writes a bias-free router with e_score_correction_bias and bias-free experts"),
                (m.tie_word_embeddings, "writes an untied lm_head"),
                (m.moe.moe_intermediate_size % 32 or m.expert_hidden_size % 32,
                 "MXFP4 needs expert dims that are multiples of 32"),
            )
            if bad
        ]
        if problems:
            raise ValueError(f"{m.name} is not K3-shaped: the generator " + "; ".join(problems))
        return self

    @property
    def num_experts(self) -> int:
        return self.model.moe.n_routed_experts

    def config_json(self) -> dict[str, Any]:
        """K3-style config.json, written from the catalog entry (``_name_or_path`` = ``repo``)."""
        return model_to_hf_config(self.model.model_copy(update={"hf_repo": self.repo}))


TINY_K3 = CheckpointGeometry.from_model(get_model("tiny-k3"), shard_bytes=1024 * 1024)
K3 = CheckpointGeometry.from_model(get_model("kimi-k3"), shard_bytes=5 * 10**9)


def tensor_specs(g: CheckpointGeometry) -> Iterator[Spec]:
    """Every tensor of the checkpoint in file order (layer-major)."""
    m = g.model
    assert m.mla is not None and m.kda is not None  # noqa: S101 - CheckpointGeometry checks the entry is K3-shaped
    mla, kda, moe = m.mla, m.kda, m.moe
    h, lat, inter = m.hidden_size, m.expert_hidden_size, moe.moe_intermediate_size
    yield f"{PREFIX}model.embed_tokens.weight", "BF16", (m.vocab_size, h)
    full = set(m.mla_layers)
    for layer in range(m.num_layers):
        p = f"{PREFIX}model.layers.{layer}."
        yield p + "input_layernorm.weight", "BF16", (h,)
        yield p + "post_attention_layernorm.weight", "BF16", (h,)
        a = p + "self_attn."
        if layer in full:
            heads, q_rank, kv_rank = mla.num_heads, mla.q_lora_rank, mla.kv_lora_rank
            yield a + "q_a_proj.weight", "BF16", (q_rank, h)
            yield a + "q_a_layernorm.weight", "BF16", (q_rank,)
            yield a + "q_b_proj.weight", "BF16", (heads * (mla.qk_nope_head_dim + mla.qk_rope_head_dim), q_rank)
            yield a + "kv_a_proj_with_mqa.weight", "BF16", (kv_rank + mla.qk_rope_head_dim, h)
            yield a + "kv_a_layernorm.weight", "BF16", (kv_rank,)
            yield a + "kv_b_proj.weight", "BF16", (heads * (mla.qk_nope_head_dim + mla.v_head_dim), kv_rank)
            yield a + "g_proj.weight", "BF16", (heads * mla.v_head_dim, h)
            yield a + "o_proj.weight", "BF16", (h, heads * mla.v_head_dim)
        else:
            width, d = kda.num_heads * kda.head_dim, kda.head_dim
            for proj in ("q_proj", "k_proj", "v_proj"):
                yield a + f"{proj}.weight", "BF16", (width, h)
            for conv in ("q_conv1d", "k_conv1d", "v_conv1d"):
                yield a + f"{conv}.weight", "BF16", (width, 1, kda.short_conv_kernel_size)
            yield a + "A_log", "F32", (kda.num_heads,)
            yield a + "dt_bias", "F32", (width,)
            yield a + "f_a_proj.weight", "BF16", (d, h)
            yield a + "f_b_proj.weight", "BF16", (width, d)
            yield a + "b_proj.weight", "BF16", (kda.num_heads, h)
            yield a + "g_a_proj.weight", "BF16", (d, h)
            yield a + "g_b_proj.weight", "BF16", (width, d)
            yield a + "o_norm.weight", "BF16", (d,)
            yield a + "o_proj.weight", "BF16", (h, width)
        if layer < moe.first_k_dense:
            yield p + "mlp.gate_proj.weight", "BF16", (moe.dense_intermediate_size, h)
            yield p + "mlp.up_proj.weight", "BF16", (moe.dense_intermediate_size, h)
            yield p + "mlp.down_proj.weight", "BF16", (h, moe.dense_intermediate_size)
            continue
        b = p + "block_sparse_moe."
        yield b + "gate.weight", "BF16", (moe.n_routed_experts, h)
        yield b + "gate.e_score_correction_bias", "F32", (moe.n_routed_experts,)
        yield b + "routed_expert_down_proj.weight", "BF16", (lat, h)
        yield b + "routed_expert_up_proj.weight", "BF16", (h, lat)
        yield b + "routed_expert_norm.weight", "BF16", (lat,)
        if moe.n_shared_experts:
            shared = moe.n_shared_experts * inter
            yield b + "shared_experts.gate_proj.weight", "BF16", (shared, h)
            yield b + "shared_experts.up_proj.weight", "BF16", (shared, h)
            yield b + "shared_experts.down_proj.weight", "BF16", (h, shared)
        for e in range(moe.n_routed_experts):
            # compressed-tensors MXFP4: packed [out, in/2] + E8M0 scales [out, in/32] (docs/kimi-k3.md §2)
            for w, (rows, cols) in (("w1", (inter, lat)), ("w2", (lat, inter)), ("w3", (inter, lat))):
                yield b + f"experts.{e}.{w}.weight_packed", "U8", (rows, cols // 2)
                yield b + f"experts.{e}.{w}.weight_scale", "U8", (rows, cols // 32)
    yield f"{PREFIX}model.norm.weight", "BF16", (h,)
    yield f"{PREFIX}lm_head.weight", "BF16", (m.vocab_size, h)


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
    (out / "tokenizer_config.json").write_text(json.dumps({"model_max_length": g.model.max_context}))
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
