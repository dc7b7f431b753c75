"""Plan a model on an instance type: every layout vLLM runs, the fewest nodes, the objective's best.

``plan_serving`` evaluates every layout of ``shapes.layout_shapes`` on 1 to ``max_nodes`` nodes,
chooses the fitting one on the fewest nodes by the settings' objective (``ranking``), and keeps the
others as ranked alternatives with the reason each lost or does not fit. It refuses bad input with
one SpecError naming the value and its limit (a context above the model's maximum, a concurrency
below 1, an instance whose GPUs cannot hold even the model's dense part), and otherwise never
raises: a model that does not fit gets ``fits=False``, the reason and what would fit instead.
``ServingPlan.require_fit()`` turns that into DoesNotFitError for callers that must stop.

``ServingPlan.parallel`` is the one source of truth for the layout: the weight stage (per-node
experts) and the rollout stage (vLLM arguments) read TP/PP/DP/EP from it.
"""

from __future__ import annotations

from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from capserve.core.catalog.hardware import INSTANCE_TYPES, InstanceType
from capserve.core.catalog.models import ModelEntry
from capserve.core.catalog.recipes import recipe_for
from capserve.core.errors import DoesNotFitError, SpecError
from capserve.core.planner.cache import kv_bytes_per_token, state_bytes_per_sequence
from capserve.core.planner.evaluate import Candidate, Evaluator, gib
from capserve.core.planner.kernels import KernelStatus, KernelVerdict, kernel_support
from capserve.core.planner.ranking import Alternative, alternatives, rank, rank_key, why_chosen
from capserve.core.planner.reserve import ReserveParts, reserve_parts
from capserve.core.planner.settings import Objective, PlannerSettings
from capserve.core.planner.shapes import layout_shapes
from capserve.core.planner.weights import gpu_weights, weight_bytes_by_class
from capserve.core.timeline import BlockPlan, CompileShape, Storage, compile_shape


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ParallelLayout(_Frozen):
    """The chosen layout as the weight and rollout stages consume it (vLLM's flags, per replica).

    Validated here, so that a layout built by hand (a test, a stored rollout) is refused as vLLM would.
    """

    layout: str = Field(description="Layout name, e.g. 'TP8xDP2+EP16'.")
    nodes: int = Field(ge=1, le=1024, description="Nodes the plan uses.")
    gpus_per_node: int = Field(ge=1, le=64, description="GPUs each node has.")
    gpus_per_node_used: int = Field(ge=1, le=64, description="GPUs per node the replicas use.")
    tensor_parallel: int = Field(ge=1, le=4096, description="--tensor-parallel-size.")
    pipeline_parallel: int = Field(ge=1, le=1024, description="--pipeline-parallel-size (one stage per node).")
    data_parallel: int = Field(ge=1, le=65_536, description="--data-parallel-size.")
    data_parallel_local: int = Field(ge=1, le=64, description="--data-parallel-size-local: DP ranks per node.")
    expert_parallel: int = Field(ge=1, le=65_536, description="Expert-parallel group size: TP x DP with EP on, else 1.")
    enable_expert_parallel: bool = Field(description="Pass --enable-expert-parallel (on every node).")
    serving_replicas: int = Field(ge=1, le=64, description="Independent vLLM engines (full model copies) on the nodes.")
    gpus_per_replica: int = Field(ge=1, le=65_536, description="GPUs of one replica (TP x PP x DP).")
    nodes_per_replica: int = Field(ge=1, le=1024, description="Nodes one replica spans.")
    sequences_per_dp_rank: int = Field(
        ge=1, le=1 << 20, description="Sequences each DP rank must hold (--max-num-seqs is per DP rank)."
    )

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        """Refuse a layout vLLM would refuse, or one that needs more GPUs per node than the node has."""
        nodes, world = self.nodes_per_replica, self.tensor_parallel * self.pipeline_parallel * self.data_parallel
        if world % nodes:
            raise ValueError(f"TP×PP×DP = {world} GPUs do not split evenly over {nodes} nodes")
        if world // nodes > self.gpus_per_node:
            raise ValueError(
                f"TP×PP×DP = {world} GPUs over {nodes} node(s) needs {world // nodes} per node; "
                f"the instance has {self.gpus_per_node}"
            )
        if self.data_parallel % self.data_parallel_local or self.data_parallel // self.data_parallel_local != (
            nodes if self.data_parallel > 1 else 1
        ):
            raise ValueError(
                f"data_parallel {self.data_parallel} with {self.data_parallel_local} local rank(s) per node "
                f"does not match {nodes} node(s)"
            )
        if self.enable_expert_parallel != (self.expert_parallel > 1):
            raise ValueError("enable_expert_parallel must be set exactly when expert_parallel > 1")
        if self.enable_expert_parallel and self.expert_parallel != self.tensor_parallel * self.data_parallel:
            raise ValueError(
                f"with --enable-expert-parallel vLLM makes EP = TP × DP = "
                f"{self.tensor_parallel * self.data_parallel}, not {self.expert_parallel}"
            )
        return self


class ServingPlan(_Frozen):
    """The planner's answer for one model x instance type x (context, concurrency)."""

    model: str = Field(description="Catalog model name.")
    model_provenance: str = Field(description="Where the model geometry came from.")
    instance_type: str = Field(description="EC2 instance type.")
    gpu: str = Field(description="GPU model.")
    context_length: int = Field(ge=1, description="Tokens per sequence the plan must hold.")
    concurrency: int = Field(ge=1, description="Sequences of that length one replica holds at once.")
    objective: Objective = Field(description="How layouts on the fewest nodes were ranked.")
    fits: bool = Field(description="False: nothing within max_nodes fits; see reason and would_fit_instead.")
    reason: str = Field(description="Why the chosen layout won, or by how much the closest one does not fit.")
    layout: str = Field(description="Chosen layout (or the closest one when fits is False).")
    parallel: ParallelLayout = Field(description="The chosen layout as vLLM flags: the one source of truth.")
    nodes: int = Field(ge=1, description="Instances.")
    gpus_per_node: int = Field(ge=1, description="GPUs per instance.")
    tensor_parallel: int = Field(ge=1, description="vLLM --tensor-parallel-size.")
    pipeline_parallel: int = Field(ge=1, description="vLLM --pipeline-parallel-size.")
    data_parallel: int = Field(ge=1, description="vLLM --data-parallel-size.")
    expert_parallel: int = Field(ge=1, description="Expert-parallel size (>1: --enable-expert-parallel).")
    smallest_unit_gpus: int | None = Field(
        description="Fewest GPUs of any fitting layout, even when the instance has more (None: nothing fits)."
    )
    smallest_unit_layout: str | None = Field(description="That layout.")
    spare_gpus: str = Field(description="What the planned GPUs beyond one replica do: more replicas, or nothing.")
    kernel_support: KernelStatus = Field(description="supported, unverified (fallback kernel) or unsupported.")
    kernel_note: str = Field(description="The kernel path vLLM takes on this GPU, or why it has none.")
    weight_bytes: int = Field(ge=0, description="Weights of the whole model as stored.")
    weight_bytes_by_class: dict[str, int] = Field(description="weight_bytes split by tensor class.")
    weight_bytes_per_gpu: int = Field(ge=0, description="Weights on the fullest GPU.")
    dense_weight_bytes_per_gpu: int = Field(ge=0, description="Of which dense (non-expert) weights.")
    expert_weight_bytes_per_gpu: int = Field(ge=0, description="Of which routed-expert weights.")
    hbm_bytes_per_gpu: int = Field(ge=1, description="GPU memory.")
    gpu_memory_utilization: float = Field(gt=0, le=1, description="vLLM's ceiling (its headroom is a reserve part).")
    reserve_bytes_per_gpu: int = Field(ge=0, description="All of the fullest GPU that is neither weights nor KV.")
    reserve_parts_per_gpu: ReserveParts = Field(description="reserve_bytes_per_gpu part by part.")
    kv_budget_bytes_per_gpu: int = Field(description="Left for KV and state on the fullest GPU.")
    kv_cache_dtype_bytes: int = Field(ge=1, description="Bytes per cached value (1 = fp8).")
    kv_bytes_per_token: int = Field(ge=0, description="KV bytes per token for the whole model.")
    kv_bytes_per_token_per_gpu: int = Field(ge=0, description="KV bytes per token on the fullest GPU.")
    state_bytes_per_sequence: int = Field(ge=0, description="Recurrent/window state per sequence, whole model.")
    state_bytes_per_sequence_per_gpu: int = Field(ge=0, description="The same on the fullest GPU.")
    max_tokens_in_kv: int | None = Field(description="Tokens one replica's KV cache holds (None: unbounded).")
    max_sequences_at_context: int = Field(ge=0, description="Sequences of context_length one replica holds.")
    alternatives: tuple[Alternative, ...] = Field(description="Every other layout weighed, ranked, with why.")
    would_fit_instead: tuple[str, ...] = Field(description="What would fit instead (only when fits is False).")
    candidates: tuple[Candidate, ...] = Field(description="Every layout evaluated, in full detail.")
    compile_shape: CompileShape = Field(
        default_factory=CompileShape,
        description="What vLLM's compile and CUDA-graph capture depend on: the chosen layout of this architecture, "
        "served with the catalog's recipe (docs/timeline.md §4).",
    )

    def to_json(self) -> dict[str, Any]:
        """The plan as plain JSON types (the ``capserve plan --json`` object)."""
        return self.model_dump(mode="json")

    def require_fit(self) -> Self:
        """Return self, or raise DoesNotFitError with the reason and what would fit instead."""
        if not self.fits:
            tail = f" Would fit instead: {'; '.join(self.would_fit_instead)}." if self.would_fit_instead else ""
            raise DoesNotFitError(self.reason + tail)
        return self

    @property
    def node_bytes(self) -> int:
        """Bytes the fullest node stages and loads: its GPUs' weights (what the time model and the probes budget)."""
        return self.weight_bytes_per_gpu * self.gpus_per_node

    def block_plan(self, storage: Storage, *, image_cached: bool = False,
                   deep_health_checks: bool = False) -> BlockPlan:
        """What the time model needs of this plan (``capserve plan``'s timelines and the cost forecast's)."""
        return BlockPlan(
            instance_type=self.instance_type,
            nodes=self.nodes,
            model_bytes=self.weight_bytes,
            node_bytes=self.node_bytes,
            shape=self.compile_shape,
            storage=storage,
            image_cached=image_cached,
            deep_health_checks=deep_health_checks,
        )


def plan_serving(
    model: ModelEntry,
    instance: InstanceType,
    *,
    context_length: int | None = None,
    concurrency: int = 1,
    settings: PlannerSettings | None = None,
) -> ServingPlan:
    """Plan ``model`` on ``instance`` (``context_length`` defaults to the model's maximum).

    Raises SpecError for bad input; returns ``fits=False`` (never raises) when nothing within
    ``settings.max_nodes`` fits.
    """
    settings = settings or PlannerSettings()
    context = model.max_context if context_length is None else context_length
    ev = Evaluator(model, settings)
    _check_input(ev, instance, context, concurrency)
    kernel = kernel_support(model, instance.gpu)
    tried = _evaluate_all(ev, instance, context, concurrency, kernel, 1, settings.max_nodes)
    ranked = rank(tried, settings.objective)
    fitting = [c for c in ranked if c.fits]
    if fitting:
        best = fitting[0]
        reason = why_chosen(best, settings.objective)
        if kernel.status == "unverified":
            reason += f" Kernel support unverified: {kernel.note}."
        would_fit: tuple[str, ...] = ()
    else:
        runnable = [c for c in tried if c.runnable] or tried
        best = max(runnable, key=lambda c: (c.kv_budget_bytes_per_gpu, -c.nodes))
        reason = (
            f"{model.name} does not fit on up to {settings.max_nodes} x {instance.name} at {concurrency} x "
            f"{context:,} tokens; closest ({best.layout} on {best.nodes} node(s)): {best.reason}"
        )
        would_fit = tuple(_would_fit_instead(ev, model, instance, context, concurrency, settings, best))
    smallest = min(fitting, key=lambda c: (c.gpus_per_replica, rank_key(c, settings.objective)), default=None)
    return _plan(model, instance, settings, context, concurrency, kernel, best, ranked, reason, would_fit, smallest)


def _check_input(ev: Evaluator, instance: InstanceType, context: int, concurrency: int) -> None:
    """One clear error for input no layout can satisfy, naming the value and its limit."""
    model, settings = ev.model, ev.settings
    if context < 1:
        raise SpecError(f"context {context:,} must be at least 1 token")
    if context > model.max_context:
        raise SpecError(
            f"context {context:,} exceeds {model.name}'s maximum of {model.max_context:,} tokens "
            "(max_position_embeddings): ask for at most that"
        )
    if concurrency < 1:
        raise SpecError(f"concurrency {concurrency} must be at least 1 sequence")
    g = instance.gpus_per_node
    whole = ev.bytes.stage(range(model.num_layers), first=True, last=True)
    dense = gpu_weights(whole, tp=g, dp=1, expert_parallel=False).dense
    reserve = reserve_parts(
        model, instance.gpu, settings, tp=g, gpus_per_replica=g, spans_nodes=False, expert_parallel=False,
        sequences_per_rank=1,
    )  # fmt: skip
    usable = instance.gpu.hbm_bytes - reserve.total
    if dense > usable:
        raise SpecError(
            f"{instance.name}'s {g} x {instance.gpu.name} cannot hold even {model.name}'s dense (non-expert) "
            f"weights: {gib(dense)}/GPU at TP {g} against {gib(usable)}/GPU usable after the reserve; "
            "choose an instance type with more GPUs per node or more memory per GPU"
        )


def _evaluate_all(
    ev: Evaluator,
    instance: InstanceType,
    context: int,
    concurrency: int,
    kernel: KernelVerdict,
    min_nodes: int,
    max_nodes: int,
) -> list[Candidate]:
    moe = ev.model.moe.n_routed_experts > 1
    shapes = layout_shapes(instance.gpus_per_node, max_nodes, moe=moe, min_nodes=min_nodes)
    # A stage needs at least one layer: deeper pipelines are not layouts of this model.
    runnable = (shape for shape in shapes if shape.pp <= ev.model.num_layers)
    return [ev.evaluate(shape, instance, context, concurrency, kernel) for shape in runnable]


def _best_fit(
    ev: Evaluator, instance: InstanceType, context: int, concurrency: int, min_nodes: int, max_nodes: int
) -> Candidate | None:
    """The objective's best fitting layout on the fewest nodes in ``min_nodes..max_nodes``, if any."""
    kernel = kernel_support(ev.model, instance.gpu)
    for nodes in range(min_nodes, max_nodes + 1):
        tried = _evaluate_all(ev, instance, context, concurrency, kernel, nodes, nodes)
        fitting = [c for c in tried if c.fits]
        if fitting:
            return min(fitting, key=lambda c: rank_key(c, ev.settings.objective))
    return None


def _would_fit_instead(
    ev: Evaluator,
    model: ModelEntry,
    instance: InstanceType,
    context: int,
    concurrency: int,
    settings: PlannerSettings,
    closest: Candidate,
) -> list[str]:
    out: list[str] = []
    if settings.alternative_max_nodes > settings.max_nodes:
        more = _best_fit(ev, instance, context, concurrency, settings.max_nodes + 1, settings.alternative_max_nodes)
        if more is not None:
            out.append(f"{more.nodes} x {instance.name} ({more.layout})")
    shorter = _max_context(model, closest, concurrency)
    if 0 < shorter < context and closest.runnable:
        out.append(f"context <= {shorter:,} tokens on {closest.nodes} x {instance.name} ({closest.layout})")
    for other in INSTANCE_TYPES.values():
        if other.name == instance.name:
            continue
        found = _best_fit(ev, other, context, concurrency, 1, settings.max_nodes)
        if found is not None:
            out.append(f"{found.nodes} x {other.name} ({found.layout})")
    return out


def _max_context(model: ModelEntry, c: Candidate, concurrency: int) -> int:
    """Longest context at which ``concurrency`` sequences fit in ``c``'s KV budget."""
    if c.kv_budget_bytes_per_gpu <= 0 or c.kv_bytes_per_token_per_gpu == 0:
        return 0
    per_rank = -(-concurrency // c.data_parallel)
    per_seq = c.kv_budget_bytes_per_gpu // per_rank - c.state_bytes_per_sequence_per_gpu
    return max(0, min(per_seq // c.kv_bytes_per_token_per_gpu, model.max_context))


def _parallel(chosen: Candidate, instance: InstanceType) -> ParallelLayout:
    used = instance.gpus_per_node if chosen.nodes > 1 else chosen.gpus_per_replica * chosen.replicas
    return ParallelLayout(
        layout=chosen.layout,
        nodes=chosen.nodes,
        gpus_per_node=instance.gpus_per_node,
        gpus_per_node_used=used,
        tensor_parallel=chosen.tensor_parallel,
        pipeline_parallel=chosen.pipeline_parallel,
        data_parallel=chosen.data_parallel,
        data_parallel_local=chosen.data_parallel_local,
        expert_parallel=chosen.expert_parallel,
        enable_expert_parallel=chosen.enable_expert_parallel,
        serving_replicas=chosen.replicas,
        gpus_per_replica=chosen.gpus_per_replica,
        nodes_per_replica=chosen.nodes,
        sequences_per_dp_rank=chosen.sequences_per_dp_rank,
    )


def _compile_shape(model: ModelEntry, instance: InstanceType, chosen: Candidate) -> CompileShape:
    """The chosen layout's compile shape, served as a campaign serves it: with the catalog's recipe, whose
    arguments for this GPU family may turn FlashInfer's MoE autotune off."""
    recipe = recipe_for(model.name)
    family = instance.gpu.family
    override = recipe.families.get(family) if recipe is not None else None
    args = (*(recipe.args if recipe is not None else ()), *(override.args if override is not None else ()))
    return compile_shape(
        model,
        max_num_seqs=chosen.sequences_per_dp_rank,
        gpu_family=family,
        autotune_off="--no-enable-flashinfer-autotune" in args,
    )


def _spare_gpus(chosen: Candidate, smallest: Candidate | None, instance: InstanceType, objective: Objective) -> str:
    total = chosen.nodes * instance.gpus_per_node
    spare = total - chosen.gpus_per_replica
    if spare == 0:
        text = f"none: one replica ({chosen.layout}) uses all {total} GPU(s)"
    elif chosen.replicas > 1:
        text = f"{spare} GPU(s) beyond one replica run {chosen.replicas - 1} more {chosen.layout} replica(s)"
    else:
        text = f"{spare} GPU(s) beyond one replica stay idle"
    if smallest is not None and smallest.gpus_per_replica < chosen.gpus_per_replica:
        text += (
            f"; the smallest unit is {smallest.gpus_per_replica} GPU(s) ({smallest.layout}), "
            f"{chosen.layout} won on {objective}"
        )
    return text


def _plan(
    model: ModelEntry,
    instance: InstanceType,
    settings: PlannerSettings,
    context: int,
    concurrency: int,
    kernel: KernelVerdict,
    chosen: Candidate,
    ranked: list[Candidate],
    reason: str,
    would_fit: tuple[str, ...],
    smallest: Candidate | None,
) -> ServingPlan:
    by_class = weight_bytes_by_class(model)
    fits = chosen.fits
    return ServingPlan(
        model=model.name,
        model_provenance=model.provenance,
        instance_type=instance.name,
        gpu=instance.gpu.name,
        context_length=context,
        concurrency=concurrency,
        objective=settings.objective,
        fits=fits,
        reason=reason,
        layout=chosen.layout,
        parallel=_parallel(chosen, instance),
        nodes=chosen.nodes,
        gpus_per_node=instance.gpus_per_node,
        tensor_parallel=chosen.tensor_parallel,
        pipeline_parallel=chosen.pipeline_parallel,
        data_parallel=chosen.data_parallel,
        expert_parallel=chosen.expert_parallel,
        smallest_unit_gpus=None if smallest is None else smallest.gpus_per_replica,
        smallest_unit_layout=None if smallest is None else smallest.layout,
        spare_gpus=_spare_gpus(chosen, smallest, instance, settings.objective) if fits else "nothing fits",
        kernel_support=kernel.status,
        kernel_note=kernel.note,
        weight_bytes=sum(by_class.values()),
        weight_bytes_by_class=by_class,
        weight_bytes_per_gpu=chosen.weight_bytes_per_gpu,
        dense_weight_bytes_per_gpu=chosen.dense_weight_bytes_per_gpu,
        expert_weight_bytes_per_gpu=chosen.expert_weight_bytes_per_gpu,
        hbm_bytes_per_gpu=instance.gpu.hbm_bytes,
        gpu_memory_utilization=settings.gpu_memory_utilization,
        reserve_bytes_per_gpu=chosen.reserve_bytes_per_gpu,
        reserve_parts_per_gpu=chosen.reserve,
        kv_budget_bytes_per_gpu=chosen.kv_budget_bytes_per_gpu,
        kv_cache_dtype_bytes=settings.kv_cache_dtype_bytes,
        kv_bytes_per_token=kv_bytes_per_token(model, dtype_bytes=settings.kv_cache_dtype_bytes),
        kv_bytes_per_token_per_gpu=chosen.kv_bytes_per_token_per_gpu,
        state_bytes_per_sequence=state_bytes_per_sequence(
            model,
            kv_dtype_bytes=settings.kv_cache_dtype_bytes,
            state_dtype_bytes=settings.state_dtype_bytes,
            conv_dtype_bytes=settings.conv_state_dtype_bytes,
        ),
        state_bytes_per_sequence_per_gpu=chosen.state_bytes_per_sequence_per_gpu,
        max_tokens_in_kv=chosen.max_tokens_in_kv,
        max_sequences_at_context=chosen.max_sequences_at_context,
        alternatives=tuple(alternatives(ranked, chosen, settings.objective)),
        would_fit_instead=would_fit,
        compile_shape=_compile_shape(model, instance, chosen),
        candidates=tuple(ranked),
    )


__all__ = ["ParallelLayout", "ServingPlan", "plan_serving"]
