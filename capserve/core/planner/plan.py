"""Choose the smallest node count and parallel layout that holds a model and the KV it needs.

Candidate layouts per node count n (G GPUs per node):
- ``TP{G}`` on one node, ``TP{G}xPP{n}`` across nodes: tensor parallel inside a node, pipeline stages
  across nodes (the vLLM multi-node default, docs/kimi-k3.md §7; InferenceX runs K3 on 8xB200 this way);
- ``DP{nG}+EP{nG}``: attention replicated per GPU (data parallel), routed experts split across all GPUs.

At each n the first layout that fits wins, TP/TPxPP first unless ``prefer_expert_parallel`` (multi-node
EP over EFA is not validated upstream). A layout fits when, on its fullest GPU,
``hbm x gpu_memory_utilization - reserve - weights`` is positive and holds ``concurrency`` sequences of
``context_length`` tokens (KV per token plus fixed recurrent state per sequence).

``plan_serving`` never raises for a model that does not fit: it returns a plan with ``fits=False``,
a ``reason`` that says by how much, and ``alternatives`` that would fit. ``ServingPlan.require_fit()``
turns that into DoesNotFitError for callers (the campaign flow) that must stop.
"""

from __future__ import annotations

from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field

from capserve.core.catalog import INSTANCE_TYPES
from capserve.core.catalog.hardware import InstanceType
from capserve.core.catalog.models import ModelEntry
from capserve.core.errors import DoesNotFitError
from capserve.core.planner.cache import kv_bytes_per_token, state_bytes_per_sequence
from capserve.core.planner.settings import GIB, PlannerSettings
from capserve.core.planner.weights import (
    TensorGroup,
    all_groups,
    first_stage_groups,
    last_stage_groups,
    layer_groups,
    pipeline_stages,
    sharded_bytes,
    weight_bytes_by_class,
)

Family = Literal["tp", "dp_ep"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Layout(_Frozen):
    """How the GPUs of ``nodes`` nodes split the model."""

    family: Family = Field(description="'tp': TP inside a node, PP across nodes; 'dp_ep': DP attention + EP.")
    nodes: int = Field(ge=1, le=1024, description="Instances.")
    tensor_parallel: int = Field(ge=1, le=1024, description="TP size.")
    pipeline_parallel: int = Field(ge=1, le=1024, description="PP size (stages).")
    data_parallel: int = Field(ge=1, le=65_536, description="DP size (attention replicas).")
    expert_parallel: int = Field(ge=1, le=65_536, description="EP size (1: experts split by TP).")

    @property
    def name(self) -> str:
        if self.family == "dp_ep":
            return f"DP{self.data_parallel}+EP{self.expert_parallel}"
        if self.pipeline_parallel == 1:
            return f"TP{self.tensor_parallel}"
        return f"TP{self.tensor_parallel}xPP{self.pipeline_parallel}"


def candidate_layouts(nodes: int, gpus_per_node: int, *, prefer_expert_parallel: bool) -> list[Layout]:
    """The layouts tried at ``nodes`` nodes, in preference order."""
    tp = Layout(
        family="tp",
        nodes=nodes,
        tensor_parallel=gpus_per_node,
        pipeline_parallel=nodes,
        data_parallel=1,
        expert_parallel=1,
    )
    world = nodes * gpus_per_node
    dp_ep = Layout(
        family="dp_ep", nodes=nodes, tensor_parallel=1, pipeline_parallel=1, data_parallel=world, expert_parallel=world
    )
    return [dp_ep, tp] if prefer_expert_parallel else [tp, dp_ep]


class Candidate(_Frozen):
    """One layout evaluated against the memory of one GPU, with the verdict and why."""

    layout: str = Field(description="Layout name, e.g. 'TP8xPP2'.")
    nodes: int = Field(ge=1, description="Instances.")
    tensor_parallel: int = Field(ge=1, description="TP size.")
    pipeline_parallel: int = Field(ge=1, description="PP size.")
    data_parallel: int = Field(ge=1, description="DP size.")
    expert_parallel: int = Field(ge=1, description="EP size.")
    fits: bool = Field(description="Weights and the requested KV fit on every GPU.")
    weight_bytes_per_gpu: int = Field(ge=0, description="Weights on the fullest GPU (largest pipeline stage).")
    kv_budget_bytes_per_gpu: int = Field(description="Left for KV/state on that GPU; negative when weights overflow.")
    kv_bytes_per_token_per_gpu: int = Field(ge=0, description="KV one token adds on that GPU.")
    state_bytes_per_sequence_per_gpu: int = Field(ge=0, description="Fixed per-sequence state on that GPU.")
    max_tokens_in_kv: int | None = Field(
        description="Tokens the KV budget holds across all DP replicas "
        "(None: no per-token KV, e.g. pure linear attention)."
    )
    max_sequences_at_context: int = Field(ge=0, description="Sequences of the requested context that fit at once.")
    reason: str = Field(description="Why it fits or not, in bytes.")


def _gib(nbytes: int) -> str:
    return f"{nbytes / GIB:,.1f} GiB"


class _Evaluator:
    """Evaluates layouts for one model; caches the per-layer weight groups."""

    def __init__(self, model: ModelEntry, settings: PlannerSettings) -> None:
        self.model = model
        self.settings = settings
        self.layers = [layer_groups(model, i) for i in range(model.num_layers)]
        self.first = first_stage_groups(model)
        self.last = last_stage_groups(model)

    def _invalid(self, layout: Layout) -> str | None:
        m = self.model
        tp = layout.tensor_parallel
        heads = {
            "MLA heads": m.mla.num_heads if m.mla else None,
            "KDA heads": m.kda.num_heads if m.kda else None,
            "attention heads": m.gqa.num_heads if m.gqa else None,
        }
        for label, count in heads.items():
            if count is not None and count % tp:
                return f"{label} ({count}) not divisible by TP {tp}"
        if layout.pipeline_parallel > m.num_layers:
            return f"PP {layout.pipeline_parallel} exceeds {m.num_layers} layers"
        if layout.expert_parallel > m.moe.n_routed_experts:
            return f"EP {layout.expert_parallel} exceeds {m.moe.n_routed_experts} experts"
        return None

    def evaluate(self, layout: Layout, instance: InstanceType, context: int, concurrency: int) -> Candidate:
        s = self.settings
        tp, ep = layout.tensor_parallel, layout.expert_parallel
        ceiling = int(instance.gpu.hbm_bytes * s.gpu_memory_utilization) - s.reserve_bytes_per_gpu
        worst: tuple[int, int, int, int] | None = None  # (budget, weights, kv/token, state/seq) of the tightest stage
        stage_seqs: list[int] = []
        stage_tokens: list[int] = []
        stages = pipeline_stages(self.model.num_layers, layout.pipeline_parallel)
        for n, stage in enumerate(stages):
            groups: list[TensorGroup] = [g for i in stage for g in self.layers[i]]
            groups += self.first if n == 0 else []
            groups += self.last if n == len(stages) - 1 else []
            weights = sharded_bytes(groups, tp=tp, ep=ep)
            kv_tok = kv_bytes_per_token(self.model, dtype_bytes=s.kv_cache_dtype_bytes, tp=tp, layers=stage)
            state = state_bytes_per_sequence(
                self.model,
                kv_dtype_bytes=s.kv_cache_dtype_bytes,
                state_dtype_bytes=s.state_dtype_bytes,
                conv_dtype_bytes=s.conv_state_dtype_bytes,
                tp=tp,
                layers=stage,
            )
            budget = ceiling - weights
            per_seq = context * kv_tok + state
            seqs = max(0, budget) // per_seq if per_seq else (1 << 62)
            stage_seqs.append(seqs)
            if kv_tok:
                stage_tokens.append(max(0, budget) // kv_tok)
            if worst is None or budget < worst[0]:
                worst = (budget, weights, kv_tok, state)
        assert worst is not None
        budget, weights, kv_tok, state = worst
        replicas = layout.data_parallel
        max_seqs = min(stage_seqs) * replicas
        max_tokens = min(stage_tokens) * replicas if stage_tokens else None
        invalid = self._invalid(layout)
        if invalid is not None:
            fits, reason = False, invalid
        elif budget <= 0:
            fits = False
            reason = (
                f"weights need {_gib(weights)}/GPU but only {_gib(ceiling)}/GPU is usable "
                f"({instance.gpu.name} {_gib(instance.gpu.hbm_bytes)} x {s.gpu_memory_utilization} - "
                f"{_gib(s.reserve_bytes_per_gpu)} reserve): short by {_gib(-budget)}/GPU"
            )
        elif max_seqs < concurrency:
            need = (context * kv_tok + state) * _ceil_div(concurrency, replicas)
            fits = False
            reason = (
                f"weights fit ({_gib(weights)}/GPU) leaving {_gib(budget)}/GPU for KV, but {concurrency} x "
                f"{context:,} tokens need {_gib(need)}/GPU: short by {_gib(need - budget)}/GPU "
                f"(holds {max_seqs} sequence(s) at this context)"
            )
        else:
            fits = True
            tokens = f"{max_tokens:,} tokens" if max_tokens is not None else "no per-token KV"
            reason = (
                f"fits: {_gib(weights)}/GPU weights, {_gib(budget)}/GPU for KV ({tokens}, "
                f"{max_seqs} sequence(s) at {context:,} tokens)"
            )
        return Candidate(
            layout=layout.name,
            nodes=layout.nodes,
            tensor_parallel=tp,
            pipeline_parallel=layout.pipeline_parallel,
            data_parallel=layout.data_parallel,
            expert_parallel=ep,
            fits=fits,
            weight_bytes_per_gpu=weights,
            kv_budget_bytes_per_gpu=budget,
            kv_bytes_per_token_per_gpu=kv_tok,
            state_bytes_per_sequence_per_gpu=state,
            max_tokens_in_kv=max_tokens,
            max_sequences_at_context=max_seqs,
            reason=reason,
        )

    def search(
        self, instance: InstanceType, context: int, concurrency: int, node_range: range
    ) -> tuple[Candidate | None, list[Candidate]]:
        """First fitting candidate over ``node_range`` (and every candidate tried up to it)."""
        tried: list[Candidate] = []
        for nodes in node_range:
            layouts = candidate_layouts(
                nodes, instance.gpus_per_node, prefer_expert_parallel=self.settings.prefer_expert_parallel
            )
            batch = [self.evaluate(layout, instance, context, concurrency) for layout in layouts]
            tried += batch
            chosen = next((c for c in batch if c.fits), None)
            if chosen is not None:
                return chosen, tried
        return None, tried

    def max_context(self, candidate: Candidate, concurrency: int) -> int:
        """Longest context at which ``concurrency`` sequences fit in ``candidate``'s KV budget."""
        if candidate.kv_budget_bytes_per_gpu <= 0 or candidate.kv_bytes_per_token_per_gpu == 0:
            return 0
        per_rank = _ceil_div(concurrency, candidate.data_parallel)
        per_seq = candidate.kv_budget_bytes_per_gpu // per_rank - candidate.state_bytes_per_sequence_per_gpu
        return max(0, min(per_seq // candidate.kv_bytes_per_token_per_gpu, self.model.max_context))


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class ServingPlan(_Frozen):
    """The planner's answer for one model x instance type x (context, concurrency)."""

    model: str = Field(description="Catalog model name.")
    model_provenance: str = Field(description="Where the model geometry came from.")
    instance_type: str = Field(description="EC2 instance type.")
    gpu: str = Field(description="GPU model.")
    context_length: int = Field(ge=1, description="Tokens per sequence the plan must hold.")
    concurrency: int = Field(ge=1, description="Sequences of that length held at once.")
    fits: bool = Field(description="False: nothing within max_nodes fits; see reason and alternatives.")
    reason: str = Field(description="Why the chosen layout fits, or by how much the closest one does not.")
    layout: str = Field(description="Chosen layout (or the closest one when fits is False).")
    nodes: int = Field(ge=1, description="Instances.")
    gpus_per_node: int = Field(ge=1, description="GPUs per instance.")
    tensor_parallel: int = Field(ge=1, description="vLLM --tensor-parallel-size.")
    pipeline_parallel: int = Field(ge=1, description="vLLM --pipeline-parallel-size.")
    data_parallel: int = Field(ge=1, description="vLLM --data-parallel-size.")
    expert_parallel: int = Field(ge=1, description="Expert-parallel size (>1: --enable-expert-parallel).")
    weight_bytes: int = Field(ge=0, description="Weights of the whole model as stored.")
    weight_bytes_by_class: dict[str, int] = Field(description="weight_bytes split by tensor class.")
    weight_bytes_per_gpu: int = Field(ge=0, description="Weights on the fullest GPU.")
    hbm_bytes_per_gpu: int = Field(ge=1, description="GPU memory.")
    gpu_memory_utilization: float = Field(gt=0, le=1, description="Ceiling used.")
    reserve_bytes_per_gpu: int = Field(ge=0, description="Activation / CUDA-graph reserve used.")
    kv_budget_bytes_per_gpu: int = Field(description="Left for KV and state on the fullest GPU.")
    kv_cache_dtype_bytes: int = Field(ge=1, description="Bytes per cached value (1 = fp8).")
    kv_bytes_per_token: int = Field(ge=0, description="KV bytes per token for the whole model.")
    kv_bytes_per_token_per_gpu: int = Field(ge=0, description="KV bytes per token on the fullest GPU.")
    state_bytes_per_sequence: int = Field(ge=0, description="Recurrent/window state per sequence, whole model.")
    state_bytes_per_sequence_per_gpu: int = Field(ge=0, description="The same on the fullest GPU.")
    max_tokens_in_kv: int | None = Field(description="Tokens the KV cache holds across replicas (None: unbounded).")
    max_sequences_at_context: int = Field(ge=0, description="Sequences of context_length held at once.")
    candidates: tuple[Candidate, ...] = Field(description="Every layout tried, in order, with its verdict.")
    alternatives: tuple[str, ...] = Field(description="What would fit instead (only when fits is False).")

    def to_json(self) -> dict[str, Any]:
        """The plan as plain JSON types (the ``capserve plan --json`` object)."""
        return self.model_dump(mode="json")

    def require_fit(self) -> Self:
        """Return self, or raise DoesNotFitError with the reason and the alternatives."""
        if not self.fits:
            tail = f" Would fit instead: {'; '.join(self.alternatives)}." if self.alternatives else ""
            raise DoesNotFitError(self.reason + tail)
        return self


def plan_serving(
    model: ModelEntry,
    instance: InstanceType,
    *,
    context_length: int | None = None,
    concurrency: int = 1,
    settings: PlannerSettings | None = None,
) -> ServingPlan:
    """Plan ``model`` on ``instance``: smallest node count, then preferred layout, that fits.

    ``context_length`` defaults to the model's maximum. Returns ``fits=False`` (never raises) when
    nothing within ``settings.max_nodes`` fits; call ``require_fit()`` to turn that into DoesNotFitError.
    """
    settings = settings or PlannerSettings()
    context = context_length if context_length is not None else model.max_context
    if context < 1 or concurrency < 1:
        raise ValueError("context_length and concurrency must be at least 1")
    ev = _Evaluator(model, settings)
    chosen, tried = ev.search(instance, context, concurrency, range(1, settings.max_nodes + 1))
    alternatives: tuple[str, ...] = ()
    too_long = context > model.max_context
    if too_long or chosen is None:
        closest = max(tried[-2:], key=lambda c: c.kv_budget_bytes_per_gpu) if chosen is None else chosen
        alternatives = tuple(_alternatives(ev, model, instance, context, concurrency, settings, closest))
        scope = f"{settings.max_nodes} x {instance.name}"
        if too_long:
            reason = f"context {context:,} exceeds {model.name}'s maximum of {model.max_context:,} tokens"
        else:
            reason = (
                f"{model.name} does not fit on up to {scope} at {concurrency} x {context:,} tokens; "
                f"closest ({closest.layout} on {closest.nodes} node(s)): {closest.reason}"
            )
        return _plan(model, instance, settings, context, concurrency, closest, tried, False, reason, alternatives)
    return _plan(model, instance, settings, context, concurrency, chosen, tried, True, chosen.reason, ())


def _alternatives(
    ev: _Evaluator,
    model: ModelEntry,
    instance: InstanceType,
    context: int,
    concurrency: int,
    settings: PlannerSettings,
    closest: Candidate,
) -> list[str]:
    out: list[str] = []
    fit_context = min(context, model.max_context)
    if settings.alternative_max_nodes > settings.max_nodes:
        more, _ = ev.search(
            instance, fit_context, concurrency, range(settings.max_nodes + 1, settings.alternative_max_nodes + 1)
        )
        if more is not None:
            out.append(f"{more.nodes} x {instance.name} ({more.layout})")
    shorter = ev.max_context(closest, concurrency)
    if 0 < shorter < context:
        out.append(f"context <= {shorter:,} tokens on {closest.nodes} x {instance.name} ({closest.layout})")
    for other in INSTANCE_TYPES.values():
        if other.name == instance.name:
            continue
        found, _ = ev.search(other, fit_context, concurrency, range(1, settings.max_nodes + 1))
        if found is not None:
            out.append(f"{found.nodes} x {other.name} ({found.layout})")
    return out


def _plan(
    model: ModelEntry,
    instance: InstanceType,
    settings: PlannerSettings,
    context: int,
    concurrency: int,
    chosen: Candidate,
    tried: list[Candidate],
    fits: bool,
    reason: str,
    alternatives: tuple[str, ...],
) -> ServingPlan:
    by_class = weight_bytes_by_class(model)
    return ServingPlan(
        model=model.name,
        model_provenance=model.provenance,
        instance_type=instance.name,
        gpu=instance.gpu.name,
        context_length=context,
        concurrency=concurrency,
        fits=fits,
        reason=reason,
        layout=chosen.layout,
        nodes=chosen.nodes,
        gpus_per_node=instance.gpus_per_node,
        tensor_parallel=chosen.tensor_parallel,
        pipeline_parallel=chosen.pipeline_parallel,
        data_parallel=chosen.data_parallel,
        expert_parallel=chosen.expert_parallel,
        weight_bytes=sum(g.nbytes for g in all_groups(model)),
        weight_bytes_by_class=by_class,
        weight_bytes_per_gpu=chosen.weight_bytes_per_gpu,
        hbm_bytes_per_gpu=instance.gpu.hbm_bytes,
        gpu_memory_utilization=settings.gpu_memory_utilization,
        reserve_bytes_per_gpu=settings.reserve_bytes_per_gpu,
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
        candidates=tuple(tried),
        alternatives=alternatives,
    )


__all__ = ["Candidate", "Layout", "ServingPlan", "candidate_layouts", "plan_serving"]
