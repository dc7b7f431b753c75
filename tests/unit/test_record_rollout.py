"""The last good rollout in the campaign record: records written by earlier versions still load, unchanged.

Earlier versions wrote the rollout's configuration with the rollout's own layout form, and repeated the
configuration's model commit, image and served name beside it.
"""

from __future__ import annotations

import json
from typing import Any

from rollout_fixtures import SHA, config_for, k3_ep16_on_two_b200, spec

from capserve.core.record import CampaignRecord, stage_outputs
from capserve.core.stages import Stage
from capserve.core.timeline import CompileShape
from capserve.core.weights.result import WeightsResult

# A record's rollout config as written before the rollout took the planner's ParallelLayout: the layout
# had its own model, with the replica count inside it.
OLD_CONFIG: dict[str, Any] = {
    "image": "vllm/vllm-openai:kimi-k3", "image_digest": None, "model_repo": "moonshotai/Kimi-K3",
    "revision_sha": SHA, "instance_type": "p6-b200.48xlarge",
    "layout": {"nodes": 2, "gpus_per_node": 8, "tensor_parallel": 1, "pipeline_parallel": 1, "data_parallel": 16,
               "data_parallel_local": 8, "expert_parallel": 16, "enable_expert_parallel": True, "replicas": 2},
    "engine": {"served_model_name": "kimi-k3", "max_model_len": 262144, "max_num_seqs": 1, "kv_cache_dtype": "fp8",
               "gpu_memory_utilization": 0.95,
               "extra_args": ["--trust-remote-code", "--load-format", "fastsafetensors", "--enable-prefix-caching",
                              "--tool-call-parser", "kimi_k3", "--reasoning-parser", "kimi_k3"]},
    "endpoint_access": "port-forward", "compile_cache": True, "model_bytes": 1555806383232,
    "node_bytes": 777903191616, "splits_experts": True, "startup_budget_minutes": None,
}  # fmt: skip
# What that version named it: the workload's revision label and its compile caches' key. The key held the
# revision then; now it holds what changes the compiled graphs instead (RolloutConfig.cache_key), so a record of that
# version compiles once more under its new key, and every later revision of the same architecture shares it.
OLD_REVISION, OLD_CACHE_KEY, CACHE_KEY = "6c5f9c0bb7", "1524c45dddeb94f6", "69a0fcda4819484a"


def old_record(config: dict[str, Any]) -> dict[str, Any]:
    return {
        "schema_version": 2, "campaign_id": "k3-demo", "updated_at": "2026-11-30T10:00:00+00:00",
        "last_good_rollout": {
            "revision_sha": SHA, "image": "vllm/vllm-openai:kimi-k3", "served_model_name": "kimi-k3",
            "endpoint": None, "ready_at": "2026-11-30T10:00:00+00:00", "color": "blue", "config": config,
        },
    }  # fmt: skip


def test_an_old_record_loads_with_the_planner_layout_and_keeps_its_names() -> None:
    record = CampaignRecord.model_validate_json(json.dumps(old_record(OLD_CONFIG)))
    assert record.last_good_rollout is not None
    loaded = record.last_good_rollout.config
    assert loaded.replicas == 2 and loaded.layout.layout == "DP16+EP16"
    # The same configuration as this version derives from the plan, under the names already on the cluster and in S3.
    derived = config_for(k3_ep16_on_two_b200(), spec(replicas=2))
    # Written when the engine's max_num_seqs held one DP rank's share: the record keeps its own engine options; and
    # before the compile shape was kept: it has the time model's shape of an unknown architecture.
    assert loaded.compile_shape == CompileShape()
    assert loaded.model_copy(update={"engine": derived.engine, "compile_shape": derived.compile_shape}) == derived
    assert (loaded.revision, loaded.cache_key) == (OLD_REVISION, CACHE_KEY) and CACHE_KEY != OLD_CACHE_KEY


def test_a_record_round_trips_and_states_what_it_serves_once() -> None:
    record = CampaignRecord.model_validate_json(json.dumps(old_record(OLD_CONFIG)))
    assert record.last_good_rollout is not None
    written = json.loads(record.model_dump_json())["last_good_rollout"]
    assert set(written) == {"color", "config", "ready_at"}  # commit, image and served name only in the config
    served = record.last_good_rollout
    assert (served.name, served.config.revision_sha, served.config.engine.served_model_name) == (
        "vllm-blue", SHA, "kimi-k3"
    )
    assert CampaignRecord.model_validate_json(record.model_dump_json()) == record


def test_the_record_keeps_the_config_digest_a_reused_weights_result_keys_its_compile_caches_by() -> None:
    """The serve run rebuilds the weights result from the record; without the digest its rollout keyed the compile
    cache by the revision, and the first redeploy (which staged its weights) found no cache under its own key."""
    result = WeightsResult(
        repo="org/model", revision_sha=SHA, files=3, bytes_total=10, bytes_per_node=[10], bytes_naive_per_node=10,
        verified=True, layout_id="full", resharded=False, s3_uri="s3://b/p/", manifest_uri="s3://b/p/m.json",
        downloaded_bytes=10, uploaded_bytes=10, config_digest="c" * 64,
    )
    kept = stage_outputs(Stage.STAGE_WEIGHTS, result)
    rebuilt = WeightsResult.model_validate({**kept, "downloaded_bytes": 0, "uploaded_bytes": 0})
    assert rebuilt.config_digest == "c" * 64
