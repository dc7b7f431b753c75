"""The time model of a Capacity Block: each phase from its figure, cold and warm, and the utilisation."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from capserve.core.catalog import get_instance_type
from capserve.core.rollout.probes import startup_budget_s
from capserve.core.timeline import (
    BlockPlan,
    TimeFigures,
    node_join_s,
    predict_block,
    s3_to_node_bytes_per_s,
    weight_read_bytes_per_s,
)

K3_BYTES = 1_560_000_000_000  # docs/kimi-k3.md: ~1.56 TB
K3 = BlockPlan(instance_type="p6-b300.48xlarge", nodes=1, model_bytes=K3_BYTES, node_bytes=K3_BYTES)


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


def test_staging_onto_a_node_is_the_slowest_of_streams_network_and_disk_writes() -> None:
    per_stream = 1 / (1 / 0.25e9 + 1 / 0.92e9)
    assert s3_to_node_bytes_per_s("p6-b300.48xlarge") == pytest.approx(8 * per_stream)
    many = TimeFigures(staging_streams=128)
    # 128 streams outrun the array's 10 GB/s of writes: the disk decides.
    assert s3_to_node_bytes_per_s("p6-b300.48xlarge", many) == 10e9
    assert get_instance_type("p6-b300.48xlarge").network_bandwidth_gbps == 16 * 400 + 350


def test_k3_cold_on_nvme_phase_by_phase() -> None:
    cold = predict_block(K3, block_hours=24, warm=False)
    assert seconds(cold, "weight load") == pytest.approx(K3_BYTES / 20e9)
    assert seconds(cold, "compile/autotune") == pytest.approx(1560 * 2.72)
    assert seconds(cold, "image pull") == pytest.approx(12e9 / 0.2e9)
    assert seconds(cold, "S3 → node staging") == pytest.approx(K3_BYTES / s3_to_node_bytes_per_s("p6-b300.48xlarge"))
    # The control plane, system nodes, add-ons and Hub → S3 are done before the block: not paid GPU time.
    assert cold.before_block_s == pytest.approx(900 + 300 + 300 + K3_BYTES / 0.5e9)
    in_block = 1800 + 60 + seconds(cold, "S3 → node staging") + 60 + K3_BYTES / 20e9 + 1560 * 2.72 + 120 + 1800
    assert cold.to_ready_s == pytest.approx(in_block)
    # Serving runs from ready to the drain point, 45 min before the end (AWS terminates at end − 30).
    assert cold.serving_s == pytest.approx(24 * 3600 - 45 * 60 - in_block)
    assert cold.utilisation == pytest.approx(cold.serving_s / (24 * 3600))


def test_a_warm_cache_and_fsx_each_shorten_the_way_to_serving() -> None:
    cold = predict_block(K3, block_hours=24, warm=False)
    warm = predict_block(K3, block_hours=24, warm=True)
    assert cold.to_ready_s - warm.to_ready_s == pytest.approx(1560 * (2.72 - 0.3) + 120 - 60)
    fsx = predict_block(K3.model_copy(update={"storage": "fsx"}), block_hours=24, warm=False)
    assert seconds(fsx, "S3 → node staging") == 0.0
    assert seconds(fsx, "weight load") == pytest.approx(K3_BYTES / 9.6e9)
    assert fsx.utilisation > cold.utilisation
    cached = predict_block(K3.model_copy(update={"image_cached": True}), block_hours=24, warm=False)
    assert seconds(cached, "image pull") == 0.0


def test_a_block_shorter_than_the_way_to_serving_serves_nothing() -> None:
    short = predict_block(K3, block_hours=2, warm=False)
    assert short.serving_s == 0.0 and short.utilisation == 0.0


def test_the_drain_point_cannot_come_after_awss_termination() -> None:
    with pytest.raises(ValueError, match="30 minutes before the end"):
        predict_block(K3, block_hours=24, warm=False, drain_before_end_minutes=20)


def test_every_figure_is_bounded() -> None:
    with pytest.raises(ValidationError):
        TimeFigures(compile_s_per_gb_cold=-1)
    with pytest.raises(ValidationError):
        TimeFigures(nonsense=1)  # type: ignore[call-arg]


def test_the_startup_budget_reads_at_the_instances_nvme_rate() -> None:
    # 1.5 × (60 s start + 1560 GB ÷ 20 GB/s + 1560 GB × 2.72 s/GB + 120 s capture) on p6-b300's NVMe array;
    # without the instance type, the load is at one measured disk's 1.43 GB/s (a longer, safe budget).
    on_b300 = startup_budget_s(K3_BYTES, K3_BYTES, warm=False, instance_type="p6-b300.48xlarge")
    assert on_b300 == pytest.approx(1.5 * (60 + 78 + 1560 * 2.72 + 120), abs=1)
    unknown = startup_budget_s(K3_BYTES, K3_BYTES, warm=False)
    assert unknown == pytest.approx(1.5 * (60 + K3_BYTES / 1.43e9 + 1560 * 2.72 + 120), abs=1)
    # The floor and the override are kept.
    assert startup_budget_s(10**9, 10**9, warm=True, instance_type="p6-b300.48xlarge") == 600
    assert startup_budget_s(K3_BYTES, K3_BYTES, warm=False, override_minutes=30) == 1800


def test_hyperpod_deep_health_checks_cost_block_time_only_on_a_layout_across_nodes() -> None:
    two = K3.model_copy(update={"nodes": 2, "node_bytes": K3_BYTES // 2})
    checked = predict_block(two.model_copy(update={"deep_health_checks": True}), block_hours=24, warm=False)
    plain = predict_block(two, block_hours=24, warm=False)
    assert seconds(checked, "HyperPod deep health checks") == 3600.0
    assert checked.to_ready_s == pytest.approx(plain.to_ready_s + 3600.0)
    assert not any(p.name == "HyperPod deep health checks" for p in plain.phases)
    # Bring-up's predicted node join (the report's node_join) counts them the same way.
    assert node_join_s(deep_health_checks=True) == 1800.0 + 3600.0
    assert node_join_s(deep_health_checks=False) == 1800.0
