"""vLLM's serving recipe of a catalog model, per GPU family: the arguments and environment it prescribes.

Source: vllm-project/recipes ``models/moonshotai/Kimi-K3.yaml`` (read at commit 8959cf6, file last changed
2026-08-20 in 6f19519 "Remove enforce eager in prefill of PD"); docs/kimi-k3.md §6 quotes it. Kept here:

- ``args``: what every GPU family runs: ``model.base_args`` without ``--gpu-memory-utilization`` (the plan
  decides it), plus the ``tool_calling`` and ``reasoning`` features (``features.*.args``): capserve's smoke
  check sends ``tool_choice: "auto"``, which vLLM refuses without ``--enable-auto-tool-choice``.
- ``families``: ``hardware_overrides.blackwell`` / ``hopper`` (their ``extra_args`` and ``extra_env``).
- ``multi_node_tp_pp``: ``strategy_overrides.multi_node_tp_pp`` (the 2-node TP8×PP2 profile).
- ``fp8_kv_args``: the recipe's "FP8 KV" note (``guide``): with ``--kv-cache-dtype fp8`` vLLM also needs
  ``--attention-config '{"use_prefill_query_quantization":true,...}'``. The Blackwell profile emits exactly
  this; the note is not family-specific, so capserve adds it wherever its plan chose an fp8 KV cache.

What the recipe sets that capserve's plan decides instead (``left_to_plan``): ``--gpu-memory-utilization``,
``--kv-cache-dtype`` (the plan's KV budget was computed with its own values) and
``VLLM_ENGINE_READY_TIMEOUT_S`` (the rollout derives it from the startup budget, at least the recipe's
3600 s for K3 cold). ``--max-model-len`` and ``--max-num-seqs`` in a family's override are the recipe's
validated limits: ``max_model_len`` / ``max_num_seqs_per_rank`` are ceilings the spec must stay under
(``capserve.core.plan_check.check_plan_against_recipe`` refuses more, before anything is bought).
Not carried over: the opt-in features (spec decoding, text-only, DCP), the AMD profile (no such GPU in the
catalog), the GB200/GB300 and ``pd_cluster`` strategies (no such layout here).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from pydantic import BaseModel, ConfigDict, Field

from capserve.core.catalog.hardware import GpuFamily


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RecipeOverride(_Frozen):
    """What the recipe adds for one GPU family or one layout."""

    args: tuple[str, ...] = Field(default=(), description="`vllm serve` arguments, in the recipe's order.")
    env: tuple[tuple[str, str], ...] = Field(default=(), description="Environment variables (name, value).")
    max_model_len: int | None = Field(default=None, ge=1, description="The recipe's --max-model-len: a ceiling.")
    max_num_seqs_per_rank: int | None = Field(
        default=None, ge=1, description="The recipe's --max-num-seqs (vLLM counts it per DP rank): a ceiling."
    )
    left_to_plan: tuple[str, ...] = Field(
        default=(), description="What the recipe sets here that capserve's plan decides instead, as written."
    )


class ServingRecipe(_Frozen):
    """vLLM's recipe for one catalog model."""

    model: str = Field(min_length=1, max_length=128, description="Catalog model id.")
    source: str = Field(min_length=1, max_length=1000, description="Where the recipe comes from.")
    args: tuple[str, ...] = Field(description="Arguments for every GPU family.")
    fp8_kv_args: tuple[str, ...] = Field(default=(), description="Added when the plan's KV cache is fp8.")
    families: Mapping[GpuFamily, RecipeOverride] = Field(description="Per GPU family (docs/planner.md).")
    multi_node_tp_pp: RecipeOverride = Field(
        default_factory=RecipeOverride, description="Added when one copy is tensor parallel within nodes and "
        "pipeline parallel across them."
    )


_K3_SOURCE = (
    "vllm-project/recipes models/moonshotai/Kimi-K3.yaml (commit 8959cf6; base_args, features.tool_calling, "
    "features.reasoning, hardware_overrides.blackwell/hopper, strategy_overrides.multi_node_tp_pp, guide 'FP8 KV')"
)

KIMI_K3 = ServingRecipe(
    model="kimi-k3",
    source=_K3_SOURCE,
    args=(
        "--trust-remote-code",
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "kimi_k3",
        "--reasoning-parser",
        "kimi_k3",
    ),
    fp8_kv_args=("--attention-config", '{"use_prefill_query_quantization":true,"mla_prefill_backend":"flashinfer"}'),
    families=MappingProxyType(
        {
            "blackwell": RecipeOverride(
                args=("--load-format", "fastsafetensors", "--no-enable-flashinfer-autotune", "--enable-prefix-caching"),
                env=(
                    ("VLLM_ALLREDUCE_USE_FLASHINFER", "1"),
                    ("VLLM_USE_V2_MODEL_RUNNER", "1"),
                    ("VLLM_USE_RUST_FRONTEND", "1"),
                ),
                max_model_len=1_048_576,
                left_to_plan=(
                    "--gpu-memory-utilization 0.95",
                    "--kv-cache-dtype fp8",
                    "VLLM_ENGINE_READY_TIMEOUT_S=3600",
                ),
            ),
            "hopper": RecipeOverride(
                args=(
                    "--moe-backend",
                    "marlin",
                    "--disable-custom-all-reduce",
                    "--no-enable-flashinfer-autotune",
                    "--max-num-batched-tokens",
                    "4096",
                    "--attention-backend",
                    "FLASHMLA",
                ),
                env=(
                    ("VLLM_USE_V2_MODEL_RUNNER", "1"),
                    ("VLLM_USE_RUST_FRONTEND", "1"),
                    ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"),
                ),
                max_model_len=32_768,
                max_num_seqs_per_rank=5,
                left_to_plan=("--gpu-memory-utilization 0.97", "VLLM_ENGINE_READY_TIMEOUT_S=3600"),
            ),
        }
    ),
    multi_node_tp_pp=RecipeOverride(
        args=("--max-num-batched-tokens", "8192"),
        env=(("NCCL_CUMEM_ENABLE", "1"), ("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", "1800")),
        left_to_plan=("--gpu-memory-utilization 0.90", "VLLM_ENGINE_READY_TIMEOUT_S=3600"),
    ),
)

RECIPES: Mapping[str, ServingRecipe] = MappingProxyType({KIMI_K3.model: KIMI_K3})


def recipe_for(model: str) -> ServingRecipe | None:
    """The catalog's vLLM recipe for ``model`` (a catalog id), or None when the catalog has none."""
    return RECIPES.get(model)
