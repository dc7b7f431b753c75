"""Build a ModelEntry from an already-loaded Hugging Face ``config.json`` (and write one back).

Pure: the tasks layer downloads and ``json.load``s the file; this module only reads the dict.
Three families are understood:

- K3 / Kimi Linear (``text_config`` nested under a multimodal wrapper, ``linear_attn_config`` with
  1-based ``full_attn_layers``), keys as read by vLLM's kimi_k3 model (docs/planner.md §10);
- DeepSeek-V3 / Kimi-K2 (flat, MLA in every layer, ``first_k_dense_replace``);
- gpt-oss (``layer_types`` sliding/full GQA, ``num_local_experts``).

A missing or mistyped key raises SpecError naming the key path, never a KeyError traceback.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from capserve.core.catalog.entries import hybrid_layers
from capserve.core.catalog.models import (
    ActivationQuant,
    AttentionKind,
    DenseQuant,
    ExpertQuant,
    GqaGeometry,
    KdaGeometry,
    MlaGeometry,
    ModelEntry,
    MoeGeometry,
    Provenance,
    Quantization,
    Thinking,
)
from capserve.core.catalog.thinking import THINKING_BY_MODEL_TYPE
from capserve.core.errors import SpecError

_MISSING: Any = object()


class _Keys:
    """Typed access to one level of config.json with errors that name the path."""

    def __init__(self, data: Mapping[str, Any], path: str) -> None:
        self.data = data
        self.path = path

    def _get(self, *keys: str, default: Any = _MISSING) -> Any:
        for key in keys:
            if key in self.data and self.data[key] is not None:
                return self.data[key]
        if default is _MISSING:
            raise SpecError(f"config.json: {self.path}{' or '.join(keys)} is missing")
        return default

    def get_int(self, *keys: str, default: Any = _MISSING) -> int:
        value = self._get(*keys, default=default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(f"config.json: {self.path}{keys[0]} must be an integer, got {value!r}")
        return value

    def get_opt_int(self, *keys: str) -> int | None:
        value = self._get(*keys, default=None)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(f"config.json: {self.path}{keys[0]} must be an integer, got {value!r}")
        return value

    def get_bool(self, *keys: str, default: bool = False) -> bool:
        value = self._get(*keys, default=default)
        if not isinstance(value, bool):
            raise SpecError(f"config.json: {self.path}{keys[0]} must be true or false, got {value!r}")
        return value

    def get_ints(self, key: str) -> list[int]:
        value = self._get(key)
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise SpecError(f"config.json: {self.path}{key} must be a list of integers")
        return value

    def sub(self, key: str) -> _Keys | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, Mapping):
            raise SpecError(f"config.json: {self.path}{key} must be an object")
        return _Keys(value, f"{self.path}{key}.")


def model_from_hf_config(
    config: Mapping[str, Any],
    *,
    name: str,
    hf_repo: str | None = None,
    provenance: Provenance = "config.json",
    source: str | None = None,
) -> ModelEntry:
    """Parse a config.json dict into a ModelEntry (``provenance="config.json"`` by default).

    ``hf_repo`` defaults to the config's ``_name_or_path``. Raises SpecError for a missing or
    malformed key, an unknown family or a quantization the planner does not model.
    """
    top = _Keys(config, "")
    text = top.sub("text_config") or top
    repo = hf_repo or config.get("_name_or_path")
    if not isinstance(repo, str) or "/" not in repo:
        raise SpecError("config.json has no usable _name_or_path: pass hf_repo='owner/name'")

    linear = text.sub("linear_attn_config")
    if linear is not None:
        fields = _kimi_linear(text, linear)
    elif "layer_types" in text.data or "num_local_experts" in text.data:
        fields = _gpt_oss(text)
    elif "kv_lora_rank" in text.data:
        fields = _deepseek(text)
    else:
        raise SpecError(
            "config.json: unknown model family (expected linear_attn_config, kv_lora_rank or layer_types); "
            f"model_type={text.data.get('model_type')!r}"
        )

    max_context = text.get_opt_int("max_position_embeddings", "model_max_length")
    if max_context is None:
        max_context = top.get_int("max_position_embeddings", "model_max_length")
    try:
        return ModelEntry(
            name=name,
            hf_repo=repo,
            provenance=provenance,
            source=source or f"config.json of {repo}",
            hidden_size=text.get_int("hidden_size"),
            vocab_size=text.get_int("vocab_size"),
            max_context=max_context,
            tie_word_embeddings=text.get_bool("tie_word_embeddings", default=False),
            quantization=_quantization(text, top),
            vision_tower_params=_vision_params(top.sub("vision_config")),
            thinking=_thinking(top, text),
            **fields,
        )
    except ValueError as exc:  # pydantic ValidationError is a ValueError
        raise SpecError(f"config.json of {repo} does not describe a valid model: {exc}") from exc


def _thinking(top: _Keys, text: _Keys) -> Thinking | None:
    """How the family thinks, by its model_type (the top-level one first: a multimodal config's text_config
    may name its language model's own type)."""
    for keys in (top, text):
        found = THINKING_BY_MODEL_TYPE.get(str(keys.data.get("model_type")))
        if found is not None:
            return found
    return None


def _mla(text: _Keys, *, output_gate: bool) -> MlaGeometry:
    return MlaGeometry(
        num_heads=text.get_int("num_attention_heads"),
        q_lora_rank=text.get_int("q_lora_rank", default=0),
        kv_lora_rank=text.get_int("kv_lora_rank"),
        qk_nope_head_dim=text.get_int("qk_nope_head_dim"),
        qk_rope_head_dim=text.get_int("qk_rope_head_dim"),
        v_head_dim=text.get_int("v_head_dim"),
        output_gate=output_gate,
    )


def _moe(text: _Keys, *, score_correction_bias: bool) -> MoeGeometry:
    return MoeGeometry(
        n_routed_experts=text.get_int("n_routed_experts", "num_experts"),
        experts_per_token=text.get_int("num_experts_per_tok", "num_experts_per_token"),
        n_shared_experts=text.get_int("n_shared_experts", "num_shared_experts", default=0),
        moe_intermediate_size=text.get_int("moe_intermediate_size"),
        expert_hidden_size=text.get_opt_int("routed_expert_hidden_size"),
        first_k_dense=text.get_int("first_k_dense_replace", default=0),
        dense_intermediate_size=text.get_int("intermediate_size", default=0),
        score_correction_bias=score_correction_bias,
    )


def _kimi_linear(text: _Keys, linear: _Keys) -> dict[str, Any]:
    num_layers = text.get_int("num_hidden_layers")
    full = linear.get_ints("full_attn_layers")  # 1-based in K3 / Kimi Linear configs
    try:
        layers = hybrid_layers(num_layers, full)
    except ValueError as exc:
        raise SpecError(f"config.json: {linear.path}full_attn_layers: {exc}") from exc
    if "kda_layers" in linear.data:
        kda = {i - 1 for i in linear.get_ints("kda_layers")}
        if kda != {i for i, k in enumerate(layers) if k == AttentionKind.KDA}:
            raise SpecError(f"config.json: {linear.path}kda_layers is not the complement of full_attn_layers")
    return {
        "layers": layers,
        "mla": _mla(text, output_gate=text.get_bool("mla_use_output_gate")),
        "kda": KdaGeometry(
            num_heads=linear.get_int("num_heads"),
            head_dim=linear.get_int("head_dim"),
            short_conv_kernel_size=linear.get_int("short_conv_kernel_size"),
            full_rank_gate=linear.get_bool("use_full_rank_gate"),
        ),
        "gqa": None,
        "moe": _moe(text, score_correction_bias=True),
    }


def _deepseek(text: _Keys) -> dict[str, Any]:
    return {
        "layers": (AttentionKind.MLA,) * text.get_int("num_hidden_layers"),
        "mla": _mla(text, output_gate=False),
        "kda": None,
        "gqa": None,
        # DeepSeek-V3 / K2 route with noaux_tc: the gate carries e_score_correction_bias.
        "moe": _moe(text, score_correction_bias=text.data.get("topk_method") == "noaux_tc"),
    }


def _gpt_oss(text: _Keys) -> dict[str, Any]:
    num_layers = text.get_int("num_hidden_layers")
    raw = text.data.get("layer_types")
    if raw is None:  # gpt-oss alternates sliding / full, starting with sliding
        raw = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(num_layers)]
    kinds = {"sliding_attention": AttentionKind.GQA_SLIDING, "full_attention": AttentionKind.GQA}
    if not isinstance(raw, list) or len(raw) != num_layers or any(t not in kinds for t in raw):
        raise SpecError(f"config.json: {text.path}layer_types must list {num_layers} of {sorted(kinds)}")
    hidden = text.get_int("hidden_size")
    heads = text.get_int("num_attention_heads")
    return {
        "layers": tuple(kinds[t] for t in raw),
        "mla": None,
        "kda": None,
        "gqa": GqaGeometry(
            num_heads=heads,
            num_kv_heads=text.get_int("num_key_value_heads"),
            head_dim=text.get_int("head_dim", default=hidden // heads),
            sliding_window=text.get_int("sliding_window", default=0),
            bias=text.get_bool("attention_bias", default=True),
            sinks=True,
        ),
        "moe": MoeGeometry(
            n_routed_experts=text.get_int("num_local_experts", "num_experts"),
            experts_per_token=text.get_int("num_experts_per_tok", "experts_per_token"),
            n_shared_experts=0,
            moe_intermediate_size=text.get_int("intermediate_size"),
            first_k_dense=0,
            dense_intermediate_size=0,
            expert_bias=True,
            router_bias=True,
        ),
    }


def _quantization(text: _Keys, top: _Keys) -> Quantization:
    qc = text.sub("quantization_config") or top.sub("quantization_config")
    if qc is None:
        return Quantization(routed_experts="bf16", dense="bf16")
    method = qc.data.get("quant_method")
    if method == "mxfp4":  # gpt-oss: experts MXFP4, attention/router/embeddings bf16
        return Quantization(routed_experts="mxfp4", dense="bf16")
    if method == "fp8":  # DeepSeek-V3 / K2 block FP8 for every linear layer, activations quantized on the fly
        return Quantization(routed_experts="fp8", dense="fp8", activations="fp8")
    if method == "compressed-tensors":
        groups = qc.sub("config_groups")
        members = [g for g in (groups.data.values() if groups else []) if isinstance(g, Mapping)]
        formats: set[tuple[ExpertQuant, DenseQuant, ActivationQuant]] = set()
        for member in members:
            w = member.get("weights") or {}
            bits, kind, group = w.get("num_bits"), w.get("type"), w.get("group_size")
            if bits == 4 and kind == "float" and group == 32:
                # MXFP4 per vLLM's compressed-tensors _is_mxfp4 (docs/planner.md §8); K3 keeps the rest in bf16.
                formats.add(("mxfp4", "bf16", _activations(member.get("input_activations"))))
            elif bits == 8 and kind == "float":
                formats.add(("fp8", "fp8", "fp8"))
            else:
                raise SpecError(
                    f"config.json: {qc.path}config_groups: {bits}-bit {kind} group {group} is not modelled "
                    "(supported: MXFP4, FP8)"
                )
        if len(formats) != 1:
            raise SpecError(f"config.json: {qc.path}config_groups must use exactly one supported format")
        experts, dense, activations = formats.pop()
        return Quantization(routed_experts=experts, dense=dense, activations=activations)
    raise SpecError(f"config.json: {qc.path}quant_method {method!r} is not modelled (mxfp4, fp8, compressed-tensors)")


def _activations(spec: Any) -> ActivationQuant:
    """What a compressed-tensors group quantizes its inputs to: none (bf16), MX (block 32) or plain FP8."""
    if not isinstance(spec, Mapping):
        return "bf16"
    if spec.get("num_bits") == 8 and spec.get("type") == "float":
        return "mxfp8" if spec.get("group_size") == 32 else "fp8"
    return "bf16"


def _vision_params(vision: _Keys | None) -> int:
    """Rough ViT parameter count: layers x (4 h^2 attention + 2 h i MLP); patch embed and merger ignored."""
    if vision is None:
        return 0
    layers = vision.get_int("num_hidden_layers", "depth")
    hidden = vision.get_int("hidden_size", "embed_dim")
    inter = vision.get_int("intermediate_size", default=4 * hidden)
    return layers * (4 * hidden * hidden + 2 * hidden * inter)


def model_to_hf_config(model: ModelEntry) -> dict[str, Any]:
    """Write the config.json keys ``model_from_hf_config`` reads, in the model's own family layout.

    Used to generate the sandbox checkpoint's config.json from the catalog (tiny-k3). The vision
    tower is not written (its geometry is not in the entry).
    """
    m = model.moe
    common: dict[str, Any] = {
        "hidden_size": model.hidden_size,
        "num_hidden_layers": model.num_layers,
        "vocab_size": model.vocab_size,
        "max_position_embeddings": model.max_context,
        "tie_word_embeddings": model.tie_word_embeddings,
        "_name_or_path": model.hf_repo,
    }
    if model.gqa is not None:
        g = model.gqa
        kinds = {AttentionKind.GQA_SLIDING: "sliding_attention", AttentionKind.GQA: "full_attention"}
        text = common | {
            "model_type": "gpt_oss",
            "architectures": ["GptOssForCausalLM"],
            "layer_types": [kinds[k] for k in model.layers],
            "num_attention_heads": g.num_heads,
            "num_key_value_heads": g.num_kv_heads,
            "head_dim": g.head_dim,
            "sliding_window": g.sliding_window,
            "attention_bias": g.bias,
            "num_local_experts": m.n_routed_experts,
            "num_experts_per_tok": m.experts_per_token,
            "intermediate_size": m.moe_intermediate_size,
        }
        if model.quantization.routed_experts == "mxfp4":
            text["quantization_config"] = {"quant_method": "mxfp4"}
        return text

    assert model.mla is not None  # noqa: S101 - the validator guarantees MLA or GQA geometry for these families
    a = model.mla
    moe_keys = {
        "n_routed_experts": m.n_routed_experts,
        "num_experts_per_tok": m.experts_per_token,
        "n_shared_experts": m.n_shared_experts,
        "moe_intermediate_size": m.moe_intermediate_size,
        "first_k_dense_replace": m.first_k_dense,
        "intermediate_size": m.dense_intermediate_size,
    }
    mla_keys = {
        "num_attention_heads": a.num_heads,
        "q_lora_rank": a.q_lora_rank or None,
        "kv_lora_rank": a.kv_lora_rank,
        "qk_nope_head_dim": a.qk_nope_head_dim,
        "qk_rope_head_dim": a.qk_rope_head_dim,
        "v_head_dim": a.v_head_dim,
    }
    text = common | mla_keys | moe_keys
    quant = _quantization_config(model.quantization)
    if quant is not None:
        text["quantization_config"] = quant
    if model.kda is None:
        return text | {
            "model_type": "deepseek_v3",
            "architectures": ["DeepseekV3ForCausalLM"],
            "topk_method": "noaux_tc" if m.score_correction_bias else "greedy",
        }

    k = model.kda
    if m.expert_hidden_size is not None:
        text["routed_expert_hidden_size"] = m.expert_hidden_size
    text |= {
        "model_type": "kimi_linear",
        "mla_use_output_gate": a.output_gate,
        "mla_use_nope": True,
        "linear_attn_config": {
            "full_attn_layers": [i + 1 for i in model.mla_layers],
            "kda_layers": [i + 1 for i in model.kda_layers],
            "num_heads": k.num_heads,
            "head_dim": k.head_dim,
            "short_conv_kernel_size": k.short_conv_kernel_size,
            "use_full_rank_gate": k.full_rank_gate,
        },
    }
    return {
        "architectures": ["KimiK3ForConditionalGeneration"],
        "model_type": "kimi_k3",
        "_name_or_path": model.hf_repo,
        "text_config": text,
    }


# MXFP8 inputs as compressed-tensors writes them: 8-bit float, one shared scale per 32 values.
_MXFP8_INPUTS = {"num_bits": 8, "type": "float", "group_size": 32, "strategy": "group", "dynamic": True}


def _quantization_config(q: Quantization) -> dict[str, Any] | None:
    if q.routed_experts == "mxfp4":
        return {
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
                    **({"input_activations": _MXFP8_INPUTS} if q.activations == "mxfp8" else {}),
                }
            },
        }
    if q.routed_experts == "fp8":
        return {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128], "activation_scheme": "dynamic"}
    return None
