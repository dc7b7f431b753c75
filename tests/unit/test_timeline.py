"""The time model of a Capacity Block: each phase from its figure, cold and warm, and the utilisation."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from capserve.core.catalog import get_instance_type, get_model
from capserve.core.drain import DRAIN_BEFORE_END_MINUTES, HARD_TEARDOWN_BEFORE_END_MINUTES
from capserve.core.rollout.probes import startup_budget_s
from capserve.core.timeline import (
    FIGURE_RANGES,
    BlockPlan,
    CompileShape,
    TimeFigures,
    compile_s,
    compile_shape,
    cudagraph_capture_sizes,
    graph_capture_s,
    node_join_s,
    predict_block,
    predict_range,
    s3_to_node_bytes_per_s,
    weight_read_bytes_per_s,
)

K3_BYTES = 1_560_000_000_000  # docs/kimi-k3.md: ~1.56 TB
# Kimi K3 on one p6-b300 as the recipe serves it (autotune off), 8 sequences per engine.
K3_SHAPE = compile_shape(get_model("kimi-k3"), max_num_seqs=8, gpu_family="blackwell", autotune_off=True)
K3 = BlockPlan(
    instance_type="p6-b300.48xlarge", nodes=1, model_bytes=K3_BYTES, node_bytes=K3_BYTES, shape=K3_SHAPE
)


def seconds(timeline: object, name: str) -> float:
    [phase] = [p for p in timeline.phases if p.name == name]  # type: ignore[attr-defined]
    return float(phase.seconds)


def test_the_load_reads_at_the_rate_of_where_the_weights_are() -> None:
    # docs/timeline.md §2: p6-b300's 8-disk NVMe array reads at 20 GB/s; an unknown instance at one measured disk.
    assert weight_read_bytes_per_s("p6-b300.48xlarge", "nvme") == 20e9
    assert weight_read_bytes_per_s(None, "nvme") == 1.43e9
    # FSx: the file system's throughput (1000 MB/s/TiB × 9.6 TiB), shared by the nodes loading at once.
    assert weight_read_bytes_per_s("p6-b300.48xlarge", "fsx", nodes=2) == pytest.approx(9.6e9 / 2)
    # Host → GPU copies (55 GB/s measured) cap every storage.
    fast = TimeFigures(fsx_storage_tib=1000)
    assert weight_read_bytes_per_s("p6-b300.48xlarge", "fsx", figures=fast) == 55e9


def test_the_copy_onto_a_node_runs_at_the_slowest_of_s3_the_network_and_the_disk() -> None:
    # 8 GB/s from S3 with parallel ranged GETs is below the array's 10 GB/s of writes and the 6,750 Gbps network.
    assert s3_to_node_bytes_per_s("p6-b300.48xlarge") == 8e9
    # Faster S3 reads: the array's writes decide.
    assert s3_to_node_bytes_per_s("p6-b300.48xlarge", TimeFigures(s3_get_bytes_per_s=50e9)) == 10e9
    assert get_instance_type("p6-b300.48xlarge").network_bandwidth_gbps == 16 * 400 + 350
    # p5.4xlarge has one disk: its 1.25 GB/s of writes decide.
    assert s3_to_node_bytes_per_s("p5.4xlarge", TimeFigures(s3_get_bytes_per_s=50e9)) == pytest.approx(1.25e9)


def test_compile_follows_the_architecture_not_the_weight_bytes() -> None:
    # The same architecture with ten times the bytes compiles in the same time (the old model charged 2.72 s per GB).
    small = K3.model_copy(update={"model_bytes": K3_BYTES // 10, "node_bytes": K3_BYTES // 10})
    assert seconds(predict_block(small, block_hours=24, warm=False), "compile/autotune") == pytest.approx(
        seconds(predict_block(K3, block_hours=24, warm=False), "compile/autotune")
    )
    # K3: 93 layers; KDA and MLA attention, a dense first layer and MoE after it: three kinds of layer.
    assert (K3_SHAPE.layers, K3_SHAPE.layer_kinds) == (93, 3)
    assert compile_s(K3_SHAPE, warm=False) == pytest.approx(93 * 1.5 + 3 * 60)
    assert compile_s(K3_SHAPE, warm=True) == pytest.approx(93 * 0.45)
    # More layers compile longer; FlashInfer's MoE autotune (PR 54794: ~16 min for K3 TP8) only when it is on.
    deeper = K3_SHAPE.model_copy(update={"layers": 186})
    assert compile_s(deeper, warm=False) - compile_s(K3_SHAPE, warm=False) == pytest.approx(93 * 1.5)
    tuned = K3_SHAPE.model_copy(update={"flashinfer_moe_autotune": True})
    assert compile_s(tuned, warm=False) - compile_s(K3_SHAPE, warm=False) == pytest.approx(946)
    assert compile_s(tuned, warm=True) == compile_s(K3_SHAPE, warm=True)  # its cache hits


def test_the_recipe_and_the_gpu_decide_whether_flashinfer_autotunes() -> None:
    k3 = get_model("kimi-k3")
    assert compile_shape(k3, max_num_seqs=8, gpu_family="blackwell", autotune_off=False).flashinfer_moe_autotune
    assert not compile_shape(k3, max_num_seqs=8, gpu_family="blackwell", autotune_off=True).flashinfer_moe_autotune
    assert not compile_shape(k3, max_num_seqs=8, gpu_family="hopper", autotune_off=False).flashinfer_moe_autotune


def test_graph_capture_follows_vllms_capture_sizes_and_the_layers() -> None:
    # vllm/config/vllm.py: 1, 2, 4, multiples of 8 below 256, multiples of 16 up to min(2 × max_num_seqs, 512).
    assert cudagraph_capture_sizes(1) == 2  # [1, 2]
    assert cudagraph_capture_sizes(8) == 5  # [1, 2, 4, 8, 16]
    assert cudagraph_capture_sizes(256) == 3 + 31 + 17
    assert cudagraph_capture_sizes(10_000) == 3 + 31 + 17
    assert graph_capture_s(K3_SHAPE) == pytest.approx(93 * 5 * 2 * 0.010)


def test_k3_cold_on_nvme_phase_by_phase() -> None:
    cold = predict_block(K3, block_hours=24, warm=False)
    assert seconds(cold, "weight load") == pytest.approx(K3_BYTES / 20e9)
    copy = K3_BYTES / 8e9
    assert seconds(cold, "S3 → node staging") == pytest.approx(copy)
    # The image is pulled beside the copy: its 60 s fit inside the copy's 195 s, so the block loses none of it.
    assert seconds(cold, "image pull") == 0.0
    # The control plane, system nodes, add-ons and Hub → S3 are done before the block: not paid GPU time.
    assert cold.before_block_s == pytest.approx(900 + 300 + 300 + K3_BYTES / 0.5e9)
    start = 120 + K3_BYTES / 20e9 + compile_s(K3_SHAPE, warm=False) + 30 + graph_capture_s(K3_SHAPE)
    in_block = 900 + copy + start + 600
    assert cold.to_ready_s == pytest.approx(in_block)
    # Serving runs from ready to the drain point (AWS's 30 minutes plus the time to stop serving and tear down).
    assert cold.serving_s == pytest.approx(24 * 3600 - DRAIN_BEFORE_END_MINUTES * 60 - in_block)
    assert cold.utilisation == pytest.approx(cold.serving_s / (24 * 3600))


def test_an_image_pull_longer_than_the_copy_costs_only_its_excess() -> None:
    slow_registry = TimeFigures(registry_bytes_per_s=0.04e9)  # 300 s for 12 GB, against a 195-s copy
    cold = predict_block(K3, block_hours=24, warm=False, figures=slow_registry)
    assert seconds(cold, "image pull") == pytest.approx(300 - K3_BYTES / 8e9)
    fsx = predict_block(K3.model_copy(update={"storage": "fsx"}), block_hours=24, warm=False)
    assert seconds(fsx, "image pull") == pytest.approx(60)  # no copy to hide it under


def test_a_warm_cache_and_fsx_each_shorten_the_way_to_serving() -> None:
    cold = predict_block(K3, block_hours=24, warm=False)
    warm = predict_block(K3, block_hours=24, warm=True)
    assert cold.to_ready_s - warm.to_ready_s == pytest.approx(compile_s(K3_SHAPE, warm=False) - 93 * 0.45)
    fsx = predict_block(K3.model_copy(update={"storage": "fsx"}), block_hours=24, warm=False)
    assert seconds(fsx, "S3 → node staging") == 0.0
    assert seconds(fsx, "weight load") == pytest.approx(K3_BYTES / 9.6e9)
    cached = predict_block(K3.model_copy(update={"image_cached": True}), block_hours=24, warm=False)
    assert seconds(cached, "image pull") == 0.0


def test_the_range_puts_every_ranged_figure_at_its_fast_and_slow_end() -> None:
    ends = predict_range(K3, block_hours=24, warm=False)
    central = predict_block(K3, block_hours=24, warm=False)
    assert ends["fast"].to_ready_s < central.to_ready_s < ends["slow"].to_ready_s
    assert seconds(ends["slow"], "EC2 launch and node join") == 1800.0
    assert seconds(ends["fast"], "EC2 launch and node join") == 480.0
    # Every ranged figure is a field of the model, and its fast end is never slower than its slow end.
    fields = TimeFigures.model_fields
    for name, (fast, slow) in FIGURE_RANGES.items():
        assert name in fields
        assert (fast >= slow) if name.endswith(("bytes_per_s", "factor")) else (fast <= slow), name


def test_a_block_shorter_than_the_way_to_serving_serves_nothing() -> None:
    short = predict_block(K3, block_hours=0.5, warm=False)
    assert short.serving_s == 0.0 and short.utilisation == 0.0


def test_the_drain_point_cannot_come_after_awss_termination() -> None:
    with pytest.raises(ValueError, match="30 minutes before the end"):
        predict_block(K3, block_hours=24, warm=False, drain_before_end_minutes=20)


def test_the_default_drain_is_awss_30_minutes_plus_stopping_and_the_teardown() -> None:
    # Hard teardown: 30 + (a pod's 60 s of grace + a scheduled run's 60 s start) = 32; the drain the same step
    # before it: 34 (it was 45, a guess with no basis).
    assert HARD_TEARDOWN_BEFORE_END_MINUTES == 32
    assert DRAIN_BEFORE_END_MINUTES == 34


def test_every_figure_is_bounded() -> None:
    with pytest.raises(ValidationError):
        TimeFigures(compile_s_per_layer_cold=-1)
    with pytest.raises(ValidationError):
        TimeFigures(nonsense=1)  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        CompileShape(layers=0)


def test_the_startup_budget_reads_at_the_instances_nvme_rate() -> None:
    cold_start = 120 + 78 + compile_s(K3_SHAPE, warm=False) + 30 + graph_capture_s(K3_SHAPE)
    on_b300 = startup_budget_s(K3_SHAPE, K3_BYTES, warm=False, instance_type="p6-b300.48xlarge")
    assert on_b300 == pytest.approx(max(1.5 * cold_start, 600), abs=1)
    # Without the instance type the load is at one measured disk's 1.43 GB/s (a longer, safe budget).
    unknown = startup_budget_s(K3_SHAPE, K3_BYTES, warm=False)
    assert unknown == pytest.approx(1.5 * (cold_start - 78 + K3_BYTES / 1.43e9), abs=1)
    # The floor and the override are kept.
    assert startup_budget_s(K3_SHAPE, 10**9, warm=True, instance_type="p6-b300.48xlarge") == 600
    assert startup_budget_s(K3_SHAPE, K3_BYTES, warm=False, override_minutes=30) == 1800


def test_hyperpod_deep_health_checks_cost_block_time_only_on_a_layout_across_nodes() -> None:
    two = K3.model_copy(update={"nodes": 2, "node_bytes": K3_BYTES // 2})
    checked = predict_block(two.model_copy(update={"deep_health_checks": True}), block_hours=24, warm=False)
    plain = predict_block(two, block_hours=24, warm=False)
    assert seconds(checked, "HyperPod deep health checks") == 3600.0
    assert checked.to_ready_s == pytest.approx(plain.to_ready_s + 3600.0)
    assert not any(p.name == "HyperPod deep health checks" for p in plain.phases)
    # Bring-up's predicted node join (the report's node_join) counts them the same way.
    assert node_join_s(deep_health_checks=True) == 900.0 + 3600.0
    assert node_join_s(deep_health_checks=False) == 900.0
