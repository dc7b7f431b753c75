"""Properties of the planner over generated models and hardware (hypothesis)."""

from __future__ import annotations

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from capserve.core.catalog import get_model
from capserve.core.catalog.entries import MODELS
from capserve.core.catalog.hardware import GPUS, GpuType, InstanceType, NetworkCard
from capserve.core.catalog.models import (
    AttentionKind,
    GqaGeometry,
    MlaGeometry,
    ModelEntry,
    MoeGeometry,
    Quantization,
)
from capserve.core.errors import SpecError
from capserve.core.planner.plan import plan_serving
from capserve.core.planner.settings import PlannerSettings
from capserve.core.planner.shapes import layout_shapes
from capserve.core.planner.weights import ModelBytes, gpu_weights, pipeline_stages, weight_bytes_by_class

PLANNABLE = [name for name in MODELS if name != "tiny-k3"]


def instance(gpu: GpuType, gpus_per_node: int) -> InstanceType:
    """A made-up instance type: ``gpus_per_node`` of ``gpu``, one EFA card."""
    return InstanceType(
        name=f"test.{gpus_per_node}x{gpu.name}",
        gpu=gpu,
        gpus_per_node=gpus_per_node,
        vcpus=16 * gpus_per_node,
        memory_bytes=2**38,
        local_nvme_bytes=0,
        network_cards=(NetworkCard(index=0, efa=True, bandwidth_gbps=100.0),),
    )


@st.composite
def models(draw: st.DrawFn) -> ModelEntry:
    """A small MoE model: MLA or GQA attention, any of the storage formats."""
    hidden = draw(st.integers(4, 64)) * 64
    layers = draw(st.integers(2, 24))
    heads = draw(st.sampled_from([8, 16, 32, 64]))
    experts = draw(st.integers(2, 96))
    first_dense = draw(st.integers(0, 2))
    experts_fmt = draw(st.sampled_from(["mxfp4", "fp8", "bf16"]))
    common = {
        "name": "generated",
        "hf_repo": "test/generated",
        "provenance": "capserve",
        "source": "hypothesis",
        "hidden_size": hidden,
        "vocab_size": draw(st.integers(1, 64)) * 1024,
        "max_context": 1 << 20,
        "moe": MoeGeometry(
            n_routed_experts=experts,
            experts_per_token=draw(st.integers(1, min(experts, 8))),
            n_shared_experts=draw(st.integers(0, 2)),
            moe_intermediate_size=draw(st.integers(1, 64)) * 32,
            first_k_dense=first_dense,
            dense_intermediate_size=draw(st.integers(1, 64)) * 64 if first_dense else 0,
        ),
        "quantization": Quantization(
            routed_experts=experts_fmt, dense="fp8" if experts_fmt == "fp8" else "bf16"
        ),
    }  # fmt: skip
    if draw(st.booleans()):
        mla = MlaGeometry(
            num_heads=heads,
            q_lora_rank=draw(st.sampled_from([0, 256, 1536])),
            kv_lora_rank=draw(st.sampled_from([128, 512])),
            qk_nope_head_dim=128,
            qk_rope_head_dim=64,
            v_head_dim=128,
        )
        return ModelEntry(layers=(AttentionKind.MLA,) * layers, mla=mla, **common)
    kinds = tuple(AttentionKind.GQA_SLIDING if i % 2 == 0 else AttentionKind.GQA for i in range(layers))
    kv_heads = draw(st.sampled_from([1, 2, 4, 8]))
    gqa = GqaGeometry(num_heads=heads, num_kv_heads=kv_heads, head_dim=64, sliding_window=128)
    return ModelEntry(layers=kinds, gqa=gqa, **common)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=models(), gpus_per_node=st.sampled_from([1, 2, 4, 8]), max_nodes=st.integers(1, 4))
def test_bytes_per_gpu_summed_over_gpus_are_the_model_times_each_part_s_replication(
    model: ModelEntry, gpus_per_node: int, max_nodes: int
) -> None:
    mb = ModelBytes(model)
    whole = mb.stage(range(model.num_layers), first=True, last=True)
    assert whole.dense + whole.experts == sum(weight_bytes_by_class(model).values())
    for shape in layout_shapes(gpus_per_node, max_nodes, moe=True):
        if shape.pp > model.num_layers:
            continue
        dense = experts = 0
        stages = pipeline_stages(model.num_layers, shape.pp)
        for n, layers in enumerate(stages):
            stage = mb.stage(layers, first=n == 0, last=n == len(stages) - 1)
            for dp_rank in range(shape.dp):
                for tp_rank in range(shape.tp):
                    on_gpu = gpu_weights(
                        stage,
                        tp=shape.tp,
                        dp=shape.dp,
                        expert_parallel=shape.expert_parallel,
                        tp_rank=tp_rank,
                        dp_rank=dp_rank,
                    )
                    dense, experts = dense + on_gpu.dense, experts + on_gpu.experts
        # Experts are held once per replica (split by EP or sliced by TP x DP); TP-split dense weights
        # once per DP rank; replicated dense weights on every GPU of a stage (TP x DP copies).
        assert experts == whole.experts, shape.name
        assert dense == shape.dp * whole.tensor_parallel + shape.tp * shape.dp * whole.replicated, shape.name


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(PLANNABLE),
    gpu=st.sampled_from(sorted(GPUS)),
    gpus_per_node=st.sampled_from([1, 2, 4, 8]),
    context_share=st.floats(0.001, 1.0),
    concurrency=st.integers(1, 64),
    max_nodes=st.integers(1, 4),
)
def test_more_gpus_never_make_a_fitting_model_stop_fitting(
    name: str, gpu: str, gpus_per_node: int, context_share: float, concurrency: int, max_nodes: int
) -> None:
    model = get_model(name)
    context = max(1, int(model.max_context * context_share))
    few = PlannerSettings(max_nodes=max_nodes, alternative_max_nodes=max_nodes)
    try:
        base = plan_serving(model, instance(GPUS[gpu], gpus_per_node), context_length=context,
                            concurrency=concurrency, settings=few)  # fmt: skip
    except SpecError:
        assume(False)  # GPUs that cannot hold even the dense part: nothing to compare
        return
    assume(base.fits)
    more_nodes = few.model_copy(update={"max_nodes": max_nodes + 2, "alternative_max_nodes": max_nodes + 2})
    wider = plan_serving(model, instance(GPUS[gpu], gpus_per_node), context_length=context,
                         concurrency=concurrency, settings=more_nodes)  # fmt: skip
    assert wider.fits and wider.nodes <= base.nodes
    if gpus_per_node < 8:
        bigger = plan_serving(model, instance(GPUS[gpu], gpus_per_node * 2), context_length=context,
                              concurrency=concurrency, settings=few)  # fmt: skip
        assert bigger.fits, bigger.reason
        assert bigger.nodes * bigger.gpus_per_node <= 2 * base.nodes * base.gpus_per_node
