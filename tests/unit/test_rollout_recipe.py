"""vLLM's K3 recipe from the catalog, per GPU family: composed with the plan and the spec, contradictions refused."""

from __future__ import annotations

from typing import Any

import pytest
from rollout_fixtures import config_for, k3_plan, spec, target_for

from capserve.core.errors import SpecError
from capserve.core.plan_check import check_plan_against_recipe
from capserve.core.rollout.workload import render_rollout
from capserve.core.spec import parse_spec

ATTENTION_CONFIG = '{"use_prefill_query_quantization":true,"mla_prefill_backend":"flashinfer"}'


def after(args: tuple[str, ...] | list[str], flag: str) -> str:
    return args[list(args).index(flag) + 1]


def leader_env(config: Any) -> dict[str, str]:
    template = render_rollout(config, target_for(config)).workload["spec"]["leaderWorkerTemplate"]
    (container,) = [c for c in template.get("leaderTemplate", template["workerTemplate"])["spec"]["containers"]
                    if c["name"] == "vllm"]
    return {e["name"]: e.get("value", "<ref>") for e in container["env"]}


def test_k3_on_blackwell_gets_the_recipes_tool_calling_fp8_attention_config_and_environment() -> None:
    config = config_for(k3_plan(), spec(extra_args=[]))
    args = render_rollout(config, target_for(config)).leader_args

    # --tool-call-parser alone makes vLLM answer the smoke check's tool_choice "auto" with a 400.
    assert "--enable-auto-tool-choice" in args and after(args, "--tool-call-parser") == "kimi_k3"
    assert after(args, "--reasoning-parser") == "kimi_k3" and "--trust-remote-code" in args
    assert after(args, "--kv-cache-dtype") == "fp8" and after(args, "--attention-config") == ATTENTION_CONFIG
    assert after(args, "--load-format") == "fastsafetensors" and "--no-enable-flashinfer-autotune" in args
    assert "--moe-backend" not in args  # the Hopper override only
    env = leader_env(config)
    assert {name: env[name] for name in ("VLLM_USE_V2_MODEL_RUNNER", "VLLM_USE_RUST_FRONTEND",
                                          "VLLM_ALLREDUCE_USE_FLASHINFER")} == dict.fromkeys(
        ("VLLM_USE_V2_MODEL_RUNNER", "VLLM_USE_RUST_FRONTEND", "VLLM_ALLREDUCE_USE_FLASHINFER"), "1")
    # The plan decides memory and the startup timeout, not the recipe's 0.95 and 3600.
    assert after(args, "--gpu-memory-utilization") == f"{config.engine.gpu_memory_utilization:g}"
    assert args.count("--gpu-memory-utilization") == 1


def test_hopper_gets_its_own_overrides_and_the_two_node_layouts() -> None:
    plan = k3_plan("p5en.48xlarge").model_copy(update={"context_length": 32768})
    config = config_for(plan, spec(extra_args=[], max_model_len=32768, max_num_seqs=5))
    args = render_rollout(config, target_for(config)).leader_args
    assert after(args, "--moe-backend") == "marlin" and "--disable-custom-all-reduce" in args
    assert after(args, "--attention-backend") == "FLASHMLA"
    # TP8xPP2 adds 8192 batched tokens, but the Hopper override's 4096 wins (the recipe's last-wins order).
    assert args.count("--max-num-batched-tokens") == 1 and after(args, "--max-num-batched-tokens") == "4096"
    env = leader_env(config)
    assert env["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True" and env["NCCL_CUMEM_ENABLE"] == "1"
    assert "VLLM_ALLREDUCE_USE_FLASHINFER" not in env


def test_a_flag_in_extra_args_replaces_the_recipes_and_recipe_false_drops_it() -> None:
    config = config_for(k3_plan(), spec(extra_args=["--load-format", "safetensors"]))
    args = render_rollout(config, target_for(config)).leader_args
    assert args.count("--load-format") == 1 and after(args, "--load-format") == "safetensors"

    bare = config_for(k3_plan(), spec(extra_args=[], recipe=False))
    assert bare.engine.extra_args == () and bare.engine.extra_env == ()


def test_hopper_refuses_more_context_or_sequences_than_the_recipe_validated_before_buying() -> None:
    long = k3_plan("p5en.48xlarge")  # 262144 tokens, 8 sequences
    with pytest.raises(SpecError, match=r"on hopper GPUs \(p5en.48xlarge: H200\) serves at most --max-model-len "
                                        r"32768.*set serving.max_model_len to 32768 or less"):
        check_plan_against_recipe(long, spec(max_model_len=262144))
    many = long.model_copy(update={"context_length": 32768})
    with pytest.raises(SpecError, match=r"at most --max-num-seqs 5 per data-parallel rank.*set serving.max_num_seqs "
                                        r"to 5 or less"):
        check_plan_against_recipe(many, spec(max_model_len=32768))
    check_plan_against_recipe(many, spec(max_model_len=32768, recipe=False))  # without the recipe: the plan's


def test_extra_env_reaches_the_pod_over_the_recipes_value() -> None:
    config = config_for(k3_plan(), spec(extra_env={"VLLM_USE_RUST_FRONTEND": "0", "VLLM_LOGGING_LEVEL": "DEBUG"}))
    env = leader_env(config)
    assert env["VLLM_USE_RUST_FRONTEND"] == "0" and env["VLLM_LOGGING_LEVEL"] == "DEBUG"


def test_extra_env_may_not_set_what_the_rollout_sets() -> None:
    with pytest.raises(SpecError, match=r"serving.extra_env sets \['NCCL_DEBUG'\], which the rollout sets itself"):
        check_plan_against_recipe(k3_plan(), spec(extra_env={"NCCL_DEBUG": "TRACE"}))


def serving_with_env(env: dict[str, str]) -> dict[str, Any]:
    return {
        "name": "k3-demo",
        "model": {"catalog": "kimi-k3"},
        "capacity": {"provider": "existing-reservation", "instance_type": "p6-b300.48xlarge",
                     "regions": ["us-east-2"], "reservation_id": "cr-0123456789abcdef0"},
        "weights": {"s3_bucket": "capserve-weights"},
        "serving": {"extra_env": env},
    }


@pytest.mark.parametrize(
    ("env", "problem"),
    [
        ({"HF_TOKEN": "x"}, "HF_TOKEN is named like a credential (TOKEN)"),
        ({"WANDB_API_KEY": "x"}, "WANDB_API_KEY is named like a credential (KEY)"),
        ({"HUB_LOGIN": "hf_" + "a1B2c3D4e5F6g7H8i9J0kLmN"}, "the value of HUB_LOGIN looks like a Hugging Face token"),
        ({"S3_ID": "AKIA" + "ABCDEFGHIJKLMNOP"}, "the value of S3_ID looks like an AWS access key id"),
        ({"X": "Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MGFiY2RlZmdo"}, "the value of X looks like a long opaque token"),
        ({"1BAD": "1"}, "'1BAD' is not an environment variable name"),
    ],
)
def test_extra_env_refuses_bad_names_and_credentials_without_repeating_them(env: dict[str, str], problem: str) -> None:
    with pytest.raises(SpecError) as refused:
        parse_spec(serving_with_env(env))
    message = str(refused.value)
    assert problem in message and "Kubernetes Secret" in message and "capserve/core/rollout/secret.py" in message
    assert all(value not in message for value in env.values() if len(value) > 3)


def test_only_pods_of_a_layout_across_nodes_log_nccl_at_info() -> None:
    single = config_for(k3_plan())  # TP8 on one p6-b300
    double = config_for(k3_plan("p6-b200.48xlarge"))  # TP8xPP2 on two p6-b200
    assert single.layout.nodes_per_replica == 1 and double.layout.nodes_per_replica == 2
    assert leader_env(single)["NCCL_DEBUG"] == "WARN" and leader_env(double)["NCCL_DEBUG"] == "INFO"
