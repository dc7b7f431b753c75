"""Catalog data, lookups, and config.json parsing."""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path
from typing import Any

import botocore.loaders
import moto
import pytest
from pydantic import ValidationError

from capserve.core.catalog import get_instance_type, get_model
from capserve.core.catalog.entries import MODELS
from capserve.core.catalog.hardware import GPUS, INSTANCE_TYPES
from capserve.core.catalog.hf_config import model_from_hf_config, model_to_hf_config
from capserve.core.catalog.models import AttentionKind
from capserve.core.errors import SpecError, UnknownCatalogEntryError

GB = 10**9
GIB = 2**30


def test_required_entries_exist() -> None:
    assert set(MODELS) == {"kimi-k3", "kimi-k2", "deepseek-v3", "gpt-oss-120b", "tiny-k3"}
    assert set(INSTANCE_TYPES) == {
        "p6-b300.48xlarge",
        "p6-b200.48xlarge",
        "p5en.48xlarge",
        "p5e.48xlarge",
        "p5.48xlarge",
        "p5.4xlarge",
    }
    assert {"B300", "B200", "H200", "H100"} <= set(GPUS)


def test_unknown_names_list_the_known_ones() -> None:
    with pytest.raises(UnknownCatalogEntryError) as model_err:
        get_model("kimi-k9")
    assert model_err.value.kind == "model"
    assert "kimi-k3" in model_err.value.known and "kimi-k3" in str(model_err.value)
    with pytest.raises(UnknownCatalogEntryError) as type_err:
        get_instance_type("p7.huge")
    assert "p6-b300.48xlarge" in str(type_err.value)


def test_sagemaker_spelling_of_instance_type_is_accepted() -> None:
    assert get_instance_type("ml.p6-b300.48xlarge") is INSTANCE_TYPES["p6-b300.48xlarge"]


def test_gpu_memory_matches_the_published_sizes() -> None:
    # NVIDIA's published sizes: B300 288 GB (~268 GiB), H200 141 GB; H100 80 GB.
    assert GPUS["B300"].hbm_bytes == pytest.approx(288 * GB, rel=0.002)
    assert GPUS["B300"].hbm_bytes / GIB == pytest.approx(268.6, abs=0.1)
    assert GPUS["H200"].hbm_bytes / GIB == pytest.approx(141, abs=0.1)
    assert GPUS["H100"].hbm_bytes / GIB == pytest.approx(80, abs=0.1)
    assert GPUS["B200"].hbm_bytes / GIB == pytest.approx(179, abs=0.1)


def test_p6_b300_card_zero_is_ena_only() -> None:
    b300 = get_instance_type("p6-b300.48xlarge")
    assert b300.gpus_per_node == 8 and b300.gpu.name == "B300"
    assert len(b300.network_cards) == 17
    assert b300.efa_card_indices == tuple(range(1, 17))
    assert b300.memory_bytes == 4096 * GIB
    assert get_instance_type("p5en.48xlarge").efa_card_indices == tuple(range(16))


def test_k3_geometry_follows_facts() -> None:
    k3 = get_model("kimi-k3")
    assert k3.provenance == "third-party"
    assert k3.num_layers == 93
    # 1-based 4, 8, ..., 92 and 93 -> 0-based 3, 7, ..., 91 and 92
    assert k3.mla_layers == (*range(3, 92, 4), 92)
    assert len(k3.mla_layers) == 24 and len(k3.kda_layers) == 69
    assert k3.moe_layers == tuple(range(1, 93))
    assert k3.expert_hidden_size == 3584
    assert k3.quantization.routed_experts == "mxfp4" and k3.quantization.dense == "bf16"


def test_tiny_k3_is_k3_shaped() -> None:
    tiny, k3 = get_model("tiny-k3"), get_model("kimi-k3")
    assert tiny.hf_repo == "capserve-sandbox/tiny-k3"
    assert tiny.moe.n_routed_experts == 8 and tiny.moe.experts_per_token == 2
    assert tiny.mla_layers == (3, 5)  # every 4th layer plus the last, as in K3
    assert tiny.layers[0] == AttentionKind.KDA and tiny.moe.first_k_dense == k3.moe.first_k_dense
    assert tiny.quantization == k3.quantization
    assert tiny.mla is not None and tiny.kda is not None
    assert tiny.mla.output_gate and tiny.kda.full_rank_gate
    assert tiny.expert_hidden_size % 32 == 0 and tiny.moe.moe_intermediate_size % 32 == 0  # MXFP4 blocks


@pytest.mark.parametrize("name", sorted(MODELS))
def test_config_json_round_trip(name: str) -> None:
    model = MODELS[name]
    parsed = model_from_hf_config(
        model_to_hf_config(model), name=name, provenance=model.provenance, source=model.source
    )
    assert parsed == model


def _k3_style_config() -> dict[str, Any]:
    return model_to_hf_config(get_model("tiny-k3"))


def test_parsing_a_k3_style_config_marks_it_read_from_config_json() -> None:
    config = _k3_style_config()
    config["text_config"]["linear_attn_config"]["full_attn_layers"] = [2, 6]
    del config["text_config"]["linear_attn_config"]["kda_layers"]
    model = model_from_hf_config(config, name="my-k3")
    assert model.provenance == "config.json"
    assert model.hf_repo == "capserve-sandbox/tiny-k3"
    assert model.mla_layers == (1, 5)  # converted from 1-based


def test_missing_key_names_its_path() -> None:
    config = _k3_style_config()
    del config["text_config"]["hidden_size"]
    with pytest.raises(SpecError, match=r"text_config\.hidden_size"):
        model_from_hf_config(config, name="x")


def test_inconsistent_kda_layers_are_refused() -> None:
    config = _k3_style_config()
    config["text_config"]["linear_attn_config"]["kda_layers"] = [1]
    with pytest.raises(SpecError, match="kda_layers"):
        model_from_hf_config(config, name="x")


def test_out_of_range_full_attn_layer_is_refused() -> None:
    config = _k3_style_config()
    config["text_config"]["linear_attn_config"]["full_attn_layers"] = [0]
    with pytest.raises(SpecError, match="full_attn_layers"):
        model_from_hf_config(config, name="x")


def test_unmodelled_quantization_is_refused() -> None:
    config = _k3_style_config()
    int4 = copy.deepcopy(config)
    int4["text_config"]["quantization_config"]["config_groups"]["group_0"]["weights"] = {
        "num_bits": 4,
        "type": "int",
        "group_size": 32,
    }
    with pytest.raises(SpecError, match="not modelled"):
        model_from_hf_config(int4, name="x")
    awq = copy.deepcopy(config)
    awq["text_config"]["quantization_config"] = {"quant_method": "awq"}
    with pytest.raises(SpecError, match="awq"):
        model_from_hf_config(awq, name="x")


def test_deepseek_config_reads_fp8_and_dense_layers() -> None:
    config = {
        "_name_or_path": "deepseek-ai/DeepSeek-V3",
        "model_type": "deepseek_v3",
        "hidden_size": 7168,
        "num_hidden_layers": 61,
        "vocab_size": 129280,
        "max_position_embeddings": 163840,
        "num_attention_heads": 128,
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "n_routed_experts": 256,
        "num_experts_per_tok": 8,
        "n_shared_experts": 1,
        "moe_intermediate_size": 2048,
        "first_k_dense_replace": 3,
        "intermediate_size": 18432,
        "topk_method": "noaux_tc",
        "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]},
    }
    model = model_from_hf_config(config, name="deepseek-v3")
    catalog = get_model("deepseek-v3")
    assert model.model_dump(exclude={"provenance", "source"}) == catalog.model_dump(exclude={"provenance", "source"})


def test_unknown_family_is_refused() -> None:
    with pytest.raises(SpecError, match="unknown model family"):
        model_from_hf_config({"model_type": "llama", "hidden_size": 8}, name="x", hf_repo="a/b")


def test_entries_are_strict_and_frozen() -> None:
    k3 = get_model("kimi-k3")
    with pytest.raises(ValidationError):
        type(k3).model_validate(k3.model_dump() | {"surprise": 1})
    with pytest.raises(ValidationError):
        k3.hidden_size = 1  # type: ignore[misc]
    broken = k3.model_dump() | {"kda": None}
    with pytest.raises(ValidationError, match="kda geometry is missing"):
        type(k3).model_validate(broken)


def _moto_instance_types() -> dict[str, Any]:
    path = Path(moto.__file__).parent / "ec2" / "resources" / "instance_types.json.gz"
    with gzip.open(path, "rt", encoding="utf-8") as f:
        data: dict[str, Any] = json.load(f)
    return data


@pytest.mark.parametrize("name", sorted(INSTANCE_TYPES))
def test_instance_types_match_describe_instance_types(name: str) -> None:
    # moto 5.2.5 ships a DescribeInstanceTypes snapshot: every number in the catalog must agree with it.
    snapshot = _moto_instance_types()[name]
    entry = INSTANCE_TYPES[name]
    (gpu,) = snapshot["GpuInfo"]["Gpus"]
    assert (gpu["Name"], gpu["Count"]) == (entry.gpu.name, entry.gpus_per_node)
    assert gpu["MemoryInfo"]["SizeInMiB"] * 2**20 == entry.gpu.hbm_bytes
    assert snapshot["VCpuInfo"]["DefaultVCpus"] == entry.vcpus
    assert snapshot["MemoryInfo"]["SizeInMiB"] * 2**20 == entry.memory_bytes
    assert snapshot["InstanceStorageInfo"]["TotalSizeInGB"] * GB == entry.local_nvme_bytes
    assert len(snapshot["NetworkInfo"]["NetworkCards"]) == len(entry.network_cards)


def test_the_catalog_has_every_size_aws_sells_for_its_gpus() -> None:
    # botocore's EC2 model lists every instance type; for the catalog's GPUs the only size below 8 GPUs
    # is p5.4xlarge (1 x H100). H200 (p5e, p5en), B200 (p6-b200) and B300 (p6-b300) come as 48xlarge only.
    ec2 = botocore.loaders.Loader().load_service_model("ec2", "service-2")
    sold = set(ec2["shapes"]["InstanceType"]["enum"])
    families = ("p5.", "p5e.", "p5en.", "p6-b200.", "p6-b300.")
    assert {t for t in sold if t.startswith(families)} == set(INSTANCE_TYPES)
    sagemaker = botocore.loaders.Loader().load_service_model("sagemaker", "service-2")
    plans = set(sagemaker["shapes"]["ReservedCapacityInstanceType"]["enum"])
    assert {f"ml.{name}" for name in INSTANCE_TYPES} <= plans  # all can be bought as training plans


def test_single_gpu_p5_is_one_h100_with_one_efa_card() -> None:
    small = get_instance_type("p5.4xlarge")
    assert (small.gpus_per_node, small.gpu.name, small.vcpus) == (1, "H100", 16)
    assert small.efa_card_indices == (0,)
    assert small.gpu is get_instance_type("p5.48xlarge").gpu


def test_gpu_families_key_the_planner_defaults() -> None:
    assert (GPUS["B300"].sm, GPUS["B300"].family) == (103, "blackwell")
    assert (GPUS["B200"].sm, GPUS["B200"].family) == (100, "blackwell")
    assert GPUS["H200"].family == GPUS["H100"].family == "hopper"


def test_activation_formats_are_read_from_config_json() -> None:
    assert get_model("kimi-k3").quantization.activations == "mxfp8"
    assert get_model("deepseek-v3").quantization.activations == "fp8"
    assert get_model("gpt-oss-120b").quantization.activations == "bf16"
    config = _k3_style_config()
    del config["text_config"]["quantization_config"]["config_groups"]["group_0"]["input_activations"]
    assert model_from_hf_config(config, name="x").quantization.activations == "bf16"
    group = config["text_config"]["quantization_config"]["config_groups"]["group_0"]
    group["input_activations"] = {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True}
    assert model_from_hf_config(config, name="x").quantization.activations == "fp8"
