"""Planner arithmetic against hand counts and published numbers, refusals, and the plan's JSON contract."""

from __future__ import annotations

import json

import pytest

from capserve.core.catalog import get_instance_type, get_model
from capserve.core.errors import DoesNotFitError, SpecError
from capserve.core.planner.cache import kda_recurrent_bytes, kv_bytes_per_token, state_bytes_per_sequence
from capserve.core.planner.plan import plan_serving
from capserve.core.planner.settings import PlannerSettings
from capserve.core.planner.weights import (
    fp8_block_bytes,
    linear_bytes,
    mxfp4_bytes,
    pipeline_stages,
    weight_bytes_by_class,
)

GB, GIB, MIB = 10**9, 2**30, 2**20
K3 = get_model("kimi-k3")
B300 = get_instance_type("p6-b300.48xlarge")


# --- storage formats, counted by hand ---------------------------------------------------------------


def test_mxfp4_is_half_a_byte_plus_one_scale_byte_per_32() -> None:
    assert mxfp4_bytes(1, 32) == 16 + 1
    # K3 w1/w3 [3072, 3584]: 3072 x 1792 packed + 3072 x 112 scales (the checkpoint's weight_packed shapes)
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


# --- K3 against its published numbers ----------------------------------------------------------------


def test_k3_bytes_by_class_match_the_published_sizes() -> None:
    by_class = weight_bytes_by_class(K3)
    total = sum(by_class.values())
    experts = by_class["routed_experts"]
    assert experts == 3 * 5_849_088 * 896 * 92  # per expert x experts x MoE layers, exactly
    assert total / 1e12 == pytest.approx(1.56, rel=0.01)  # "~1.56 TB on disk" (Hub listing)
    assert experts / 1e12 == pytest.approx(1.45, rel=0.01)
    assert (total - experts) / 1e12 == pytest.approx(0.11, rel=0.1)


def test_k3_tp8_weights_per_gpu_match_the_observed_load() -> None:
    plan = plan_serving(K3, B300)
    # A public vLLM serving note for Kimi-K3 on 8 x B300 at TP 8 logs 192.6 GiB of weights per GPU;
    # we count 190.5 (padding and a few replicated buffers explain the rest): within 2 %.
    assert plan.weight_bytes_per_gpu / GIB == pytest.approx(190, rel=0.02)
    assert plan.weight_bytes_per_gpu / GIB < 192.6
    assert plan.dense_weight_bytes_per_gpu + plan.expert_weight_bytes_per_gpu == plan.weight_bytes_per_gpu
    assert plan.expert_weight_bytes_per_gpu == weight_bytes_by_class(K3)["routed_experts"] // 8


def test_mla_kv_bytes_per_token() -> None:
    # (kv_lora_rank + qk_rope_head_dim) x MLA layers x dtype: 24 x 576 x 2 = 27,648
    assert kv_bytes_per_token(K3, dtype_bytes=2) == (512 + 64) * 24 * 2 == 27_648
    assert kv_bytes_per_token(K3, dtype_bytes=1) == 13_824
    assert kv_bytes_per_token(get_model("kimi-k2"), dtype_bytes=2) == 61 * 576 * 2 == 70_272
    # MLA's latent is whole on every TP rank; only pipeline stages split it.
    assert kv_bytes_per_token(K3, dtype_bytes=1, tp=8) == 13_824
    assert kv_bytes_per_token(K3, dtype_bytes=1, tp=8, layers=range(0, 47)) == 11 * 576


def test_kda_state_per_sequence() -> None:
    recurrent = kda_recurrent_bytes(K3, state_dtype_bytes=4)
    assert recurrent == 69 * 96 * 128 * 128 * 4
    assert recurrent / MIB == pytest.approx(414, rel=0.001)  # 69 layers x 96 heads x 128^2 fp32
    total = state_bytes_per_sequence(K3, kv_dtype_bytes=1, state_dtype_bytes=4, conv_dtype_bytes=2)
    conv = 69 * 3 * 3 * 96 * 128 * 2  # (kernel - 1) positions of q, k, v in bf16
    assert total == recurrent + conv
    assert kda_recurrent_bytes(K3, state_dtype_bytes=4, tp=8) == recurrent // 8


def test_gqa_kv_and_sliding_window() -> None:
    oss = get_model("gpt-oss-120b")
    assert kv_bytes_per_token(oss, dtype_bytes=1) == 18 * 2 * 8 * 64  # full-attention layers only
    assert kv_bytes_per_token(oss, dtype_bytes=1, tp=8) == 18 * 2 * 1 * 64
    state = state_bytes_per_sequence(oss, kv_dtype_bytes=1, state_dtype_bytes=4, conv_dtype_bytes=2)
    assert state == 18 * 2 * 8 * 64 * 128  # sliding layers hold one window per sequence
    assert sum(weight_bytes_by_class(oss).values()) / GB == pytest.approx(65, rel=0.03)  # ~65 GB checkpoint


def test_pipeline_stages_split_as_vllm_does() -> None:
    # vLLM get_pp_indices: leftover layers go to the stages before the last, from the second-to-last back.
    # (The previous planner gave them to the first stages, [24, 23, 23, 23]: that was not vLLM's split.)
    assert [len(s) for s in pipeline_stages(93, 4)] == [23, 23, 24, 23]
    assert [len(s) for s in pipeline_stages(93, 2)] == [47, 46]
    assert [len(s) for s in pipeline_stages(61, 4)] == [15, 15, 16, 15]
    assert [i for s in pipeline_stages(93, 4) for i in s] == list(range(93))
    with pytest.raises(ValueError, match="between 1 and the 93 layers"):
        pipeline_stages(93, 94)


def test_kv_budget_is_what_the_reserve_and_the_weights_leave() -> None:
    plan = plan_serving(K3, B300, context_length=131_072, concurrency=4)
    parts = plan.reserve_parts_per_gpu
    assert plan.reserve_bytes_per_gpu == sum(parts.by_name().values()) == parts.total
    assert parts.utilization_headroom == B300.gpu.hbm_bytes - int(B300.gpu.hbm_bytes * 0.95)
    assert plan.kv_budget_bytes_per_gpu == B300.gpu.hbm_bytes - plan.reserve_bytes_per_gpu - plan.weight_bytes_per_gpu
    assert plan.max_tokens_in_kv == plan.kv_budget_bytes_per_gpu // 13_824
    per_seq = 131_072 * 13_824 + plan.state_bytes_per_sequence_per_gpu
    assert plan.max_sequences_at_context == plan.kv_budget_bytes_per_gpu // per_seq


# --- refusals -----------------------------------------------------------------------------------------


def test_k3_on_h100_with_a_node_cap_is_refused_with_what_would_fit() -> None:
    plan = plan_serving(K3, get_instance_type("p5.48xlarge"), settings=PlannerSettings(max_nodes=2))
    assert not plan.fits
    assert "short by" in plan.reason and "2 x p5.48xlarge" in plan.reason
    assert "4 x p5.48xlarge (TP8xPP4)" in plan.would_fit_instead
    assert "1 x p6-b300.48xlarge (TP8)" in plan.would_fit_instead
    assert plan.smallest_unit_gpus is None and plan.spare_gpus == "nothing fits"
    with pytest.raises(DoesNotFitError, match="Would fit instead: 4 x p5.48xlarge"):
        plan.require_fit()


def test_kv_that_cannot_fit_is_refused_with_a_shorter_context() -> None:
    plan = plan_serving(K3, B300, concurrency=64, settings=PlannerSettings(max_nodes=1))
    assert not plan.fits
    assert "weights fit" in plan.reason and "short by" in plan.reason
    assert any(a.startswith("context <= ") for a in plan.would_fit_instead)


@pytest.mark.parametrize(
    ("model", "instance", "kwargs", "message"),
    [
        ("kimi-k2", "p6-b300.48xlarge", {"context_length": 200_000},
         "context 200,000 exceeds kimi-k2's maximum of 131,072"),
        ("kimi-k3", "p6-b300.48xlarge", {"context_length": 0}, "context 0 must be at least 1"),
        ("kimi-k3", "p6-b300.48xlarge", {"concurrency": 0}, "concurrency 0 must be at least 1"),
        ("kimi-k3", "p5.4xlarge", {}, r"1 x H100 cannot hold even kimi-k3's dense .* 101\.8 GiB/GPU at TP 1"),
    ],
)  # fmt: skip
def test_bad_input_is_one_error_naming_the_value_and_the_limit(
    model: str, instance: str, kwargs: dict[str, int], message: str
) -> None:
    with pytest.raises(SpecError, match=message):
        plan_serving(get_model(model), get_instance_type(instance), **kwargs)  # type: ignore[arg-type]


def test_settings_are_bounded() -> None:
    with pytest.raises(ValueError, match="gpu_memory_utilization"):
        PlannerSettings(gpu_memory_utilization=1.5)
    with pytest.raises(ValueError, match="max_nodes"):
        PlannerSettings(max_nodes=0)
    with pytest.raises(ValueError, match="objective"):
        PlannerSettings(objective="cheapest")  # type: ignore[arg-type]


def test_to_json_keeps_its_keys_and_adds_the_new_ones() -> None:
    data = plan_serving(K3, B300).to_json()
    kept = {
        "model", "instance_type", "nodes", "gpus_per_node", "tensor_parallel", "pipeline_parallel",
        "data_parallel", "expert_parallel", "weight_bytes", "weight_bytes_per_gpu", "kv_bytes_per_token",
        "state_bytes_per_sequence", "max_tokens_in_kv", "fits", "reason", "layout", "candidates",
        "reserve_bytes_per_gpu", "kv_budget_bytes_per_gpu", "max_sequences_at_context", "alternatives",
    }  # fmt: skip
    added = {"smallest_unit_gpus", "reserve_parts_per_gpu", "parallel", "kernel_support", "would_fit_instead"}
    assert kept | added <= set(data)
    assert json.loads(json.dumps(data)) == data
    assert data["kv_bytes_per_token"] == 13_824 and data["weight_bytes"] == sum(data["weight_bytes_by_class"].values())
    assert data["reserve_bytes_per_gpu"] == sum(data["reserve_parts_per_gpu"].values())
    row = data["alternatives"][0]
    assert {"layout", "nodes", "fits", "weight_bytes_per_gpu", "max_tokens_in_kv", "reason"} <= set(row)
