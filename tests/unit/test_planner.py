"""Planner arithmetic against hand counts and the facts in docs/kimi-k3.md, and the layout choice."""

from __future__ import annotations

import json

import pytest

from capserve.core.catalog import get_instance_type, get_model
from capserve.core.errors import DoesNotFitError
from capserve.core.planner import (
    PlannerSettings,
    fp8_block_bytes,
    kda_recurrent_bytes,
    kv_bytes_per_token,
    linear_bytes,
    mxfp4_bytes,
    pipeline_stages,
    plan_serving,
    state_bytes_per_sequence,
    weight_bytes_by_class,
)

GB, GIB, MIB = 10**9, 2**30, 2**20
K3 = get_model("kimi-k3")


# --- storage formats, counted by hand ---------------------------------------------------------------


def test_mxfp4_is_half_a_byte_plus_one_scale_byte_per_32() -> None:
    assert mxfp4_bytes(1, 32) == 16 + 1
    # K3 w1/w3 [3072, 3584]: 3072 x 1792 packed + 3072 x 112 scales (docs/kimi-k3.md §2 shapes)
    assert mxfp4_bytes(3072, 3584) == 3072 * 1792 + 3072 * 112 == 5_849_088
    # w2 [3584, 3072]: 3584 x 1536 + 3584 x 96
    assert mxfp4_bytes(3584, 3072) == 5_849_088
    per_expert = 3 * 5_849_088
    assert per_expert / MIB == pytest.approx(16.73, abs=0.005)  # "one expert = 16.73 MiB"
    assert linear_bytes(3072, 3584, "mxfp4") * 8 == 3072 * 3584 * 4.25  # 4.25 bits per value


def test_fp8_block_adds_one_fp32_scale_per_128_square() -> None:
    assert fp8_block_bytes(256, 256) == 256 * 256 + 4 * 2 * 2
    assert fp8_block_bytes(129, 1) == 129 + 4 * 2
    assert linear_bytes(10, 10, "bf16") == 200


# --- K3 against docs/kimi-k3.md --------------------------------------------------------------------------


def test_k3_bytes_by_class_match_facts() -> None:
    by_class = weight_bytes_by_class(K3)
    total = sum(by_class.values())
    experts = by_class["routed_experts"]
    assert experts == 3 * 5_849_088 * 896 * 92  # per expert x experts x MoE layers, exactly
    assert total / 1e12 == pytest.approx(1.56, rel=0.01)  # "~1.56 TB on disk"
    assert experts / 1e12 == pytest.approx(1.45, rel=0.01)  # "experts ~1.45 TB"
    assert (total - experts) / 1e12 == pytest.approx(0.11, rel=0.1)  # "dense ~0.11 TB"


def test_k3_tp8_weights_per_gpu_match_facts() -> None:
    plan = plan_serving(K3, get_instance_type("p6-b300.48xlarge"))
    # docs/kimi-k3.md §3: ~190 GiB per GPU computed, 192.6 GiB observed (padding, replicated pieces): within 2 %.
    assert plan.weight_bytes_per_gpu / GIB == pytest.approx(190, rel=0.02)
    assert plan.weight_bytes_per_gpu / GIB < 192.6


def test_mla_kv_bytes_per_token() -> None:
    # (kv_lora_rank + qk_rope_head_dim) x MLA layers x dtype: 24 x 576 x 2 = 27,648 (docs/kimi-k3.md §4)
    assert kv_bytes_per_token(K3, dtype_bytes=2) == (512 + 64) * 24 * 2 == 27_648
    assert kv_bytes_per_token(K3, dtype_bytes=1) == 13_824
    assert kv_bytes_per_token(get_model("kimi-k2"), dtype_bytes=2) == 61 * 576 * 2 == 70_272
    # MLA's latent is whole on every TP rank; only pipeline stages split it.
    assert kv_bytes_per_token(K3, dtype_bytes=1, tp=8) == 13_824
    assert kv_bytes_per_token(K3, dtype_bytes=1, tp=8, layers=range(0, 47)) == 11 * 576


def test_kda_state_per_sequence() -> None:
    recurrent = kda_recurrent_bytes(K3, state_dtype_bytes=4)
    assert recurrent == 69 * 96 * 128 * 128 * 4
    assert recurrent / MIB == pytest.approx(414, rel=0.001)  # docs/kimi-k3.md §4: ~414 MiB per sequence (fp32)
    total = state_bytes_per_sequence(K3, kv_dtype_bytes=1, state_dtype_bytes=4, conv_dtype_bytes=2)
    conv = 69 * 3 * 3 * 96 * 128 * 2  # (kernel - 1) positions of q, k, v in bf16
    assert total == recurrent + conv
    assert total / MIB == pytest.approx(414, rel=0.05)  # plus the small conv tail
    assert kda_recurrent_bytes(K3, state_dtype_bytes=4, tp=8) == recurrent // 8


def test_gqa_kv_and_sliding_window() -> None:
    oss = get_model("gpt-oss-120b")
    assert kv_bytes_per_token(oss, dtype_bytes=1) == 18 * 2 * 8 * 64  # full-attention layers only
    assert kv_bytes_per_token(oss, dtype_bytes=1, tp=8) == 18 * 2 * 1 * 64
    state = state_bytes_per_sequence(oss, kv_dtype_bytes=1, state_dtype_bytes=4, conv_dtype_bytes=2)
    assert state == 18 * 2 * 8 * 64 * 128  # sliding layers hold one window per sequence
    assert sum(weight_bytes_by_class(oss).values()) / GB == pytest.approx(65, rel=0.03)  # ~65 GB checkpoint


def test_pipeline_stages_cover_every_layer_once() -> None:
    stages = pipeline_stages(93, 4)
    assert [len(s) for s in stages] == [24, 23, 23, 23]
    assert [i for s in stages for i in s] == list(range(93))


# --- the three cases the issue requires -------------------------------------------------------------


@pytest.mark.parametrize(
    ("instance", "nodes", "layout"),
    [
        ("p6-b300.48xlarge", 1, "TP8"),
        ("p6-b200.48xlarge", 2, "TP8xPP2"),
        ("p5en.48xlarge", 2, "TP8xPP2"),
    ],
)
def test_k3_node_counts(instance: str, nodes: int, layout: str) -> None:
    plan = plan_serving(K3, get_instance_type(instance))
    assert plan.fits, plan.reason
    assert (plan.nodes, plan.layout) == (nodes, layout)
    assert plan.tensor_parallel == 8 and plan.pipeline_parallel == nodes
    assert plan.context_length == 1_048_576  # the model's maximum by default
    assert plan.max_sequences_at_context >= 1
    if nodes > 1:  # one node was tried and refused for the weights
        one_node = [c for c in plan.candidates if c.nodes == 1]
        assert one_node and not any(c.fits for c in one_node)
        assert all("short by" in c.reason for c in one_node)


def test_kv_budget_is_what_the_ceiling_leaves() -> None:
    settings = PlannerSettings()
    b300 = get_instance_type("p6-b300.48xlarge")
    plan = plan_serving(K3, b300, context_length=131_072, concurrency=4, settings=settings)
    ceiling = int(b300.gpu.hbm_bytes * 0.95) - settings.reserve_bytes_per_gpu
    assert plan.kv_budget_bytes_per_gpu == ceiling - plan.weight_bytes_per_gpu
    assert plan.max_tokens_in_kv == plan.kv_budget_bytes_per_gpu // 13_824
    per_seq = 131_072 * 13_824 + plan.state_bytes_per_sequence_per_gpu
    assert plan.max_sequences_at_context == plan.kv_budget_bytes_per_gpu // per_seq


# --- refusals -----------------------------------------------------------------------------------------


def test_k3_on_h100_with_a_node_cap_is_refused_with_alternatives() -> None:
    plan = plan_serving(K3, get_instance_type("p5.48xlarge"), settings=PlannerSettings(max_nodes=2))
    assert not plan.fits
    assert "short by" in plan.reason and "2 x p5.48xlarge" in plan.reason
    assert "4 x p5.48xlarge (TP8xPP4)" in plan.alternatives
    assert "1 x p6-b300.48xlarge (TP8)" in plan.alternatives
    with pytest.raises(DoesNotFitError, match="Would fit instead: 4 x p5.48xlarge"):
        plan.require_fit()


def test_kv_that_cannot_fit_is_refused_with_a_shorter_context() -> None:
    plan = plan_serving(
        K3, get_instance_type("p6-b300.48xlarge"), concurrency=64, settings=PlannerSettings(max_nodes=1)
    )
    assert not plan.fits
    assert "weights fit" in plan.reason and "short by" in plan.reason
    assert any(a.startswith("context <= ") for a in plan.alternatives)


def test_context_beyond_the_model_maximum_is_refused() -> None:
    plan = plan_serving(get_model("kimi-k2"), get_instance_type("p6-b300.48xlarge"), context_length=200_000)
    assert not plan.fits and "exceeds" in plan.reason


def test_expert_parallel_preference_changes_the_layout() -> None:
    dsv3, b300 = get_model("deepseek-v3"), get_instance_type("p6-b300.48xlarge")
    assert plan_serving(dsv3, b300).layout == "TP8"
    ep = plan_serving(dsv3, b300, settings=PlannerSettings(prefer_expert_parallel=True))
    assert ep.fits and ep.layout == "DP8+EP8" and ep.expert_parallel == 8 and ep.tensor_parallel == 1


def test_settings_are_bounded() -> None:
    with pytest.raises(ValueError):
        PlannerSettings(gpu_memory_utilization=1.5)
    with pytest.raises(ValueError):
        PlannerSettings(max_nodes=0)


def test_to_json_has_the_contract_keys() -> None:
    plan = plan_serving(K3, get_instance_type("p6-b300.48xlarge"))
    data = plan.to_json()
    required = {
        "model", "instance_type", "nodes", "gpus_per_node", "tensor_parallel", "pipeline_parallel",
        "data_parallel", "expert_parallel", "weight_bytes", "weight_bytes_per_gpu", "kv_bytes_per_token",
        "state_bytes_per_sequence", "max_tokens_in_kv", "fits", "reason",
    }  # fmt: skip
    assert required <= set(data)
    assert json.loads(json.dumps(data)) == data
    assert data["kv_bytes_per_token"] == 13_824 and data["weight_bytes"] == sum(data["weight_bytes_by_class"].values())
