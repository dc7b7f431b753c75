"""What the campaign checks about a plan before it spends anything, and how a plan reads to a person."""

from __future__ import annotations

from capserve.core.catalog import get_instance_type
from capserve.core.catalog.recipes import recipe_for
from capserve.core.errors import DoesNotFitError, SpecError
from capserve.core.planner.plan import ServingPlan
from capserve.core.rollout.args import vllm_args
from capserve.core.rollout.config import engine_options
from capserve.core.spec import CampaignSpec

_GIB = 1024**3


def check_plan_against_capacity(plan: ServingPlan, spec: CampaignSpec) -> None:
    """Refuse a spec whose reservation is too small for the plan: better now than after the purchase."""
    needed = plan.nodes * spec.serving.replicas
    if needed > spec.capacity.instance_count:
        raise DoesNotFitError(
            f"{plan.model} needs {plan.nodes} × {plan.instance_type} per replica ({plan.layout}); "
            f"{spec.serving.replicas} replica(s) need {needed}, but capacity.instance_count is "
            f"{spec.capacity.instance_count}: set capacity.instance_count to {needed} or lower serving.replicas"
        )


def check_plan_against_recipe(plan: ServingPlan, spec: CampaignSpec) -> None:
    """Refuse, before anything is bought, a spec that contradicts the model's vLLM recipe or its own arguments.

    - The recipe's ``--max-model-len`` / ``--max-num-seqs`` for the GPU family are the limits it was validated
      at (catalog/recipes.py): the plan may not ask more (K3 on Hopper: 32768 tokens, 5 sequences per rank).
    - The composed arguments and environment must not contradict the plan (``merge_extra_args``,
      ``compose_env``): the same SpecError the rollout would raise after the purchase, raised now.
    """
    recipe = recipe_for(plan.model) if spec.serving.recipe else None
    instance = get_instance_type(plan.instance_type)
    override = recipe.families.get(instance.gpu.family) if recipe is not None else None
    if recipe is not None and override is not None:
        gpus = f"{instance.gpu.family} GPUs ({instance.name}: {instance.gpu.name})"
        where = f"the vLLM recipe for {recipe.model} on {gpus}"
        off = "or set serving.recipe: false to serve without the recipe"
        if override.max_model_len is not None and plan.context_length > override.max_model_len:
            raise SpecError(
                f"{where} serves at most --max-model-len {override.max_model_len}, but the plan serves "
                f"{plan.context_length} tokens per sequence: set serving.max_model_len to {override.max_model_len} "
                f"or less, {off} (source: {recipe.source})"
            )
        per_rank = plan.parallel.sequences_per_dp_rank  # what vllm_args passes as --max-num-seqs
        if override.max_num_seqs_per_rank is not None and per_rank > override.max_num_seqs_per_rank:
            ceiling = override.max_num_seqs_per_rank * plan.parallel.data_parallel
            raise SpecError(
                f"{where} runs at most --max-num-seqs {override.max_num_seqs_per_rank} per data-parallel rank, but "
                f"the plan holds {per_rank} per rank: set serving.max_num_seqs to {ceiling} or less, {off} "
                f"(source: {recipe.source})"
            )
    engine = engine_options(plan, spec)  # raises SpecError for serving.extra_env names the rollout sets
    vllm_args(plan.parallel, engine, role="leader", model_path="/weights")  # and for extra_args against the plan


def plan_summary_rows(plan: ServingPlan) -> list[tuple[str, str]]:
    """The plan as (what, value) rows, for the report, the UI artifact and the CLI."""
    kv_tokens = "unbounded" if plan.max_tokens_in_kv is None else f"{plan.max_tokens_in_kv:,}"
    return [
        ("model", f"{plan.model} ({plan.model_provenance})"),
        ("instance type", f"{plan.instance_type} ({plan.gpus_per_node} × {plan.gpu})"),
        ("nodes", str(plan.nodes)),
        ("layout", plan.layout),
        ("parallelism", _parallelism(plan)),
        ("weights", f"{plan.weight_bytes / 1e12:.3f} TB ({plan.weight_bytes / _GIB:,.1f} GiB)"),
        ("weights per GPU", f"{plan.weight_bytes_per_gpu / _GIB:,.1f} GiB of {plan.hbm_bytes_per_gpu / _GIB:,.1f} GiB"),
        ("reserve per GPU", _reserve(plan)),
        ("smallest unit", _smallest(plan)),
        ("kernels", f"{plan.kernel_support}: {plan.kernel_note}"),
        ("KV per token", f"{plan.kv_bytes_per_token:,} B"),
        ("state per sequence", f"{plan.state_bytes_per_sequence / 2**20:,.1f} MiB"),
        ("tokens in KV cache", kv_tokens),
        ("sequences at context", f"{plan.max_sequences_at_context:,} × {plan.context_length:,} tokens"),
        ("fits", "yes" if plan.fits else "no"),
        ("why", plan.reason),
    ]


def _reserve(plan: ServingPlan) -> str:
    named = plan.reserve_parts_per_gpu.by_name().items()
    parts = ", ".join(f"{name.replace('_', ' ')} {nbytes / _GIB:,.1f}" for name, nbytes in named if nbytes)
    return f"{plan.reserve_bytes_per_gpu / _GIB:,.1f} GiB ({parts})"


def _smallest(plan: ServingPlan) -> str:
    if plan.smallest_unit_gpus is None:
        return "nothing fits"
    return f"{plan.smallest_unit_gpus} GPU(s) ({plan.smallest_unit_layout}); spare GPUs: {plan.spare_gpus}"


def _parallelism(plan: ServingPlan) -> str:
    tp, pp, dp, ep = plan.tensor_parallel, plan.pipeline_parallel, plan.data_parallel, plan.expert_parallel
    return f"TP {tp} · PP {pp} · DP {dp} · EP {ep}"


def plan_markdown(plan: ServingPlan) -> str:
    rows = ["| what | value |", "|---|---|"]
    rows += [f"| {what} | {value.replace('|', '/')} |" for what, value in plan_summary_rows(plan)]
    return "\n".join(rows)
