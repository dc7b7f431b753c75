"""The reserve per GPU from named parts, vLLM's batch defaults, and kernel support per GPU family."""

from __future__ import annotations

import pytest

from capserve.core.catalog import get_instance_type, get_model
from capserve.core.catalog.hardware import GPUS, GpuType, InstanceType, NetworkCard
from capserve.core.catalog.models import AttentionKind, GqaGeometry, ModelEntry, MoeGeometry, Quantization
from capserve.core.planner.kernels import kernel_support
from capserve.core.planner.plan import plan_serving
from capserve.core.planner.reserve import activation_bytes, default_max_batched_tokens, reserve_parts
from capserve.core.planner.settings import PlannerSettings, ReserveOverrides

GIB = 2**30
K3 = get_model("kimi-k3")

# Llama-3-8B's geometry (meta-llama/Meta-Llama-3-8B config.json), written as a one-expert model whose
# every layer is dense, to compare the activation estimate with a published boot log.
LLAMA3_8B = ModelEntry(
    name="llama-3-8b",
    hf_repo="meta-llama/Meta-Llama-3-8B",
    provenance="capserve",
    source="config.json of meta-llama/Meta-Llama-3-8B",
    hidden_size=4096,
    vocab_size=128_256,
    max_context=8192,
    layers=(AttentionKind.GQA,) * 32,
    gqa=GqaGeometry(num_heads=32, num_kv_heads=8, head_dim=128),
    moe=MoeGeometry(
        n_routed_experts=1,
        experts_per_token=1,
        n_shared_experts=0,
        moe_intermediate_size=1,
        first_k_dense=32,
        dense_intermediate_size=14_336,
    ),
    quantization=Quantization(routed_experts="bf16", dense="bf16"),
)


def test_activation_estimate_matches_a_published_boot_log() -> None:
    # vLLM PR #10511 (memory profiling overhaul), `vllm serve meta-llama/Meta-Llama-3-8B` on an H100:
    # "PyTorch activation peak memory 1.26GiB" with 8192 batched tokens and 256 sequences.
    estimate = activation_bytes(LLAMA3_8B, tp=1, batched_tokens=8192, sequences=256)
    assert estimate / GIB == pytest.approx(1.26, rel=0.05)


def test_activation_shrinks_with_tp_and_grows_with_batched_tokens() -> None:
    one = activation_bytes(K3, tp=1, batched_tokens=8192, sequences=1)
    assert activation_bytes(K3, tp=8, batched_tokens=8192, sequences=1) < one
    assert activation_bytes(K3, tp=1, batched_tokens=16_384, sequences=1) > one


def test_vllm_batch_defaults_follow_device_memory() -> None:
    # vllm/engine/arg_utils.py get_batch_defaults: API server 16384 tokens from 160 GiB, 8192 from 70 GiB.
    assert default_max_batched_tokens(GPUS["B300"]) == default_max_batched_tokens(GPUS["B200"]) == 16_384
    assert default_max_batched_tokens(GPUS["H200"]) == default_max_batched_tokens(GPUS["H100"]) == 8_192


def test_reserve_parts_appear_only_where_they_apply() -> None:
    settings = PlannerSettings()
    h100 = GPUS["H100"]
    alone = reserve_parts(
        K3, h100, settings, tp=1, gpus_per_replica=1, spans_nodes=False, expert_parallel=False, sequences_per_rank=1
    )
    assert (alone.nccl, alone.efa, alone.all2all) == (0, 0, 0)
    assert alone.utilization_headroom == h100.hbm_bytes - int(h100.hbm_bytes * 0.95)
    assert alone.cuda_context > 0 and alone.cuda_graphs > 0 and alone.activations > 0
    wide = reserve_parts(
        K3, h100, settings, tp=8, gpus_per_replica=16, spans_nodes=True, expert_parallel=True, sequences_per_rank=1
    )
    assert wide.nccl > 0 and wide.efa > 0 and wide.all2all > 0
    assert wide.total == sum(wide.by_name().values())
    # Blackwell's defaults differ from Hopper's (and its vLLM default batches twice the tokens).
    b300 = reserve_parts(
        K3, GPUS["B300"], settings, tp=8, gpus_per_replica=8, spans_nodes=False, expert_parallel=False,
        sequences_per_rank=1,
    )  # fmt: skip
    h200 = reserve_parts(
        K3, GPUS["H200"], settings, tp=8, gpus_per_replica=8, spans_nodes=False, expert_parallel=False,
        sequences_per_rank=1,
    )  # fmt: skip
    assert b300.cuda_context > h200.cuda_context and b300.activations == 2 * h200.activations - 2 * 163_840 * 4 // 2


def test_overrides_replace_the_defaults_and_move_the_kv_budget() -> None:
    b300 = get_instance_type("p6-b300.48xlarge")
    base = plan_serving(K3, b300)
    custom = PlannerSettings(reserve=ReserveOverrides(cuda_graph_bytes=0, activation_bytes=10 * GIB))
    plan = plan_serving(K3, b300, settings=custom)
    assert plan.reserve_parts_per_gpu.cuda_graphs == 0 and plan.reserve_parts_per_gpu.activations == 10 * GIB
    moved = (base.reserve_parts_per_gpu.cuda_graphs + base.reserve_parts_per_gpu.activations) - 10 * GIB
    assert plan.kv_budget_bytes_per_gpu - base.kv_budget_bytes_per_gpu == moved
    lower = plan_serving(K3, b300, settings=PlannerSettings(gpu_memory_utilization=0.9))
    assert lower.reserve_parts_per_gpu.utilization_headroom > base.reserve_parts_per_gpu.utilization_headroom


def _gpu(name: str, sm: int, gib: int = 80) -> GpuType:
    return GpuType(name=name, hbm_bytes=gib * GIB, architecture=f"test sm_{sm}", sm=sm)


def test_kernel_support_by_format_and_architecture() -> None:
    oss, dsv3 = get_model("gpt-oss-120b"), get_model("deepseek-v3")
    assert kernel_support(K3, GPUS["B300"]).status == "supported"
    assert kernel_support(K3, GPUS["B200"]).status == "supported"
    assert kernel_support(K3, GPUS["H200"]).status == "unverified"  # MXFP8 activations: Marlin fallback
    assert kernel_support(oss, GPUS["H100"]).status == "supported"  # bf16 activations: Triton kernels
    assert kernel_support(dsv3, GPUS["H100"]).status == "supported"
    assert kernel_support(dsv3, _gpu("A100", 80)).status == "unverified"  # FP8 without FP8 tensor cores
    t4 = kernel_support(oss, _gpu("T4", 75, 16))
    assert t4.status == "unsupported" and "sm_80" in t4.note


def test_a_gpu_without_the_kernel_is_refused_with_the_reason() -> None:
    old = InstanceType(
        name="test.8xT4",
        gpu=_gpu("T4", 75, 256),  # memory is not the problem here
        gpus_per_node=8,
        vcpus=64,
        memory_bytes=2**38,
        local_nvme_bytes=0,
        network_cards=(NetworkCard(index=0, efa=False, bandwidth_gbps=50.0),),
    )
    plan = plan_serving(get_model("gpt-oss-120b"), old, context_length=8192)
    assert not plan.fits and plan.kernel_support == "unsupported"
    assert not any(c.fits or c.runnable for c in plan.candidates)
    assert next(c for c in plan.candidates if c.layout == "TP8").reason.startswith("no kernel: vLLM 0.32 needs sm_80")
    assert "no kernel" in plan.reason and "1 x p5.4xlarge (TP1)" in plan.would_fit_instead
