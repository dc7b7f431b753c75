"""KV-cache bytes per token and recurrent-state bytes per sequence.

- MLA caches one latent per token per layer: ``(kv_lora_rank + qk_rope_head_dim) x dtype`` bytes
  (DeepSeek-V2 paper §2.1.2; K3: 24 x 576 = 27,648 B/token bf16; docs/planner.md §3). vLLM keeps the whole latent on
  every tensor-parallel rank (there is a single latent "head"), which is why DP attention exists for MLA
  models (vLLM docs, "Data Parallel Deployment"): per GPU the MLA cost does not shrink with TP.
- GQA caches K and V: ``2 x kv_heads x head_dim x dtype`` per token per full-attention layer, split across
  TP ranks down to one KV head per rank (replicated beyond that). Sliding-window layers hold at most
  ``window`` tokens per sequence, so they are counted per sequence.
- KDA keeps a ``head_dim x head_dim`` fp32 state per head per layer, plus the short-convolution tail of
  ``kernel - 1`` positions of q, k and v (K3: 69 x 96 x 128^2 x 4 B = 414 MiB per sequence; docs/planner.md §3);
  heads split across TP ranks.
"""

from __future__ import annotations

from collections.abc import Iterable

from capserve.core.catalog.models import AttentionKind, ModelEntry


def _kv_heads_per_rank(kv_heads: int, tp: int) -> int:
    return max(1, kv_heads // tp)


def kv_bytes_per_token(model: ModelEntry, *, dtype_bytes: int, tp: int = 1, layers: Iterable[int] | None = None) -> int:
    """KV bytes one token adds on one GPU holding ``layers`` (default: all) at tensor-parallel size ``tp``."""
    total = 0
    for index in range(model.num_layers) if layers is None else layers:
        kind = model.layers[index]
        if kind == AttentionKind.MLA:
            assert model.mla is not None  # noqa: S101 - narrows the type for mypy
            total += model.mla.cached_values_per_token * dtype_bytes
        elif kind == AttentionKind.GQA:
            assert model.gqa is not None  # noqa: S101 - narrows the type for mypy
            total += 2 * _kv_heads_per_rank(model.gqa.num_kv_heads, tp) * model.gqa.head_dim * dtype_bytes
    return total


def kda_recurrent_bytes(
    model: ModelEntry, *, state_dtype_bytes: int, tp: int = 1, layers: Iterable[int] | None = None
) -> int:
    """The KDA recurrent state alone (no conv tail): heads/tp x head_dim^2 per KDA layer."""
    if model.kda is None:
        return 0
    indices = range(model.num_layers) if layers is None else layers
    count = sum(1 for i in indices if model.layers[i] == AttentionKind.KDA)
    k = model.kda
    return count * (k.num_heads // tp) * k.head_dim * k.head_dim * state_dtype_bytes


def state_bytes_per_sequence(
    model: ModelEntry,
    *,
    kv_dtype_bytes: int,
    state_dtype_bytes: int,
    conv_dtype_bytes: int,
    tp: int = 1,
    layers: Iterable[int] | None = None,
) -> int:
    """Fixed per-sequence bytes on one GPU: KDA state + conv tail, and sliding-window KV at full window."""
    indices = list(range(model.num_layers) if layers is None else layers)
    total = kda_recurrent_bytes(model, state_dtype_bytes=state_dtype_bytes, tp=tp, layers=indices)
    for index in indices:
        kind = model.layers[index]
        if kind == AttentionKind.KDA:
            assert model.kda is not None  # noqa: S101 - narrows the type for mypy
            k = model.kda
            total += (k.short_conv_kernel_size - 1) * 3 * (k.num_heads // tp) * k.head_dim * conv_dtype_bytes
        elif kind == AttentionKind.GQA_SLIDING:
            assert model.gqa is not None  # noqa: S101 - narrows the type for mypy
            g = model.gqa
            total += 2 * _kv_heads_per_rank(g.num_kv_heads, tp) * g.head_dim * g.sliding_window * kv_dtype_bytes
    return total
