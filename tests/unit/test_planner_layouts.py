"""The planner reproduces published deployments, each with its public source, and explains its choice."""

from __future__ import annotations

import pytest
from capserve_sandbox.hub.checkpoint import K3 as K3_CHECKPOINT
from capserve_sandbox.hub.checkpoint import virtual_tensors_by_file
from rollout_fixtures import config_for

from capserve.core.catalog import get_instance_type, get_model
from capserve.core.planner.plan import ServingPlan, plan_serving
from capserve.core.planner.settings import PlannerSettings
from capserve.core.rollout.layout import launch_blockers
from capserve.core.weights.listing import RepoFile, RepoListing
from capserve.core.weights.placement import Layout, expert_of
from capserve.core.weights.plan import plan_weights
from capserve.core.weights.safetensors import TensorEntry

GIB = 2**30
K3 = get_model("kimi-k3")


def listing_for(tensors_by_file: dict[str, list[TensorEntry]]) -> RepoListing:
    """A Hub listing for a virtual checkpoint: one safetensors file per entry, sizes from the tensors."""
    files = [
        RepoFile(path=path, size=8 + 64 + sum(t.nbytes for t in ts), sha256="b" * 64)
        for path, ts in sorted(tensors_by_file.items())
    ]
    return RepoListing(repo="moonshotai/Kimi-K3", revision_sha="a" * 40, files=tuple(files))


def fitting(plan: ServingPlan) -> dict[str, int]:
    """Layout name -> nodes, for every fitting layout the plan weighed (chosen included)."""
    return {c.layout: c.nodes for c in plan.candidates if c.fits}


def test_kimi_k3_on_one_p6_b300_is_tp8() -> None:
    # vllm-project/recipes models/moonshotai/Kimi-K3.yaml: strategy single_node_tp on 8 GPUs, and a
    # public serving note loading K3 at TP 8 on 8 x B300 (192.6 GiB of weights per GPU).
    plan = plan_serving(K3, get_instance_type("p6-b300.48xlarge"))
    assert plan.fits and (plan.nodes, plan.layout) == (1, "TP8")
    assert plan.context_length == 1_048_576  # the model's maximum by default
    assert plan.smallest_unit_gpus == 8
    assert (plan.parallel.nodes_per_replica, plan.parallel.expert_parallel) == (1, 1)
    assert plan.reason.startswith("chosen: fewest nodes (1), then most KV headroom")


@pytest.mark.parametrize("instance", ["p6-b200.48xlarge", "p5en.48xlarge"])
def test_kimi_k3_on_two_b200_or_h200_nodes_weighs_tp8xpp2_against_tp8xdp2_ep16(instance: str) -> None:
    # vLLM docs, "Parallelism and scaling": across nodes, TP = GPUs per node and PP = nodes (TP8xPP2);
    # vLLM docs, "Expert parallel deployment": DP attention with EP = TP x DP (TP8xDP2+EP16); the K3
    # recipe lists both (multi_node_tp, multi_node_dep). Neither fits one 8 x 179/141 GiB node.
    plan = plan_serving(K3, get_instance_type(instance))
    layouts = fitting(plan)
    assert layouts["TP8xPP2"] == 2 and layouts["TP8xDP2+EP16"] == 2
    assert not any(c.fits for c in plan.candidates if c.nodes == 1)
    assert all("short by" in c.reason for c in plan.candidates if c.nodes == 1 and c.runnable)
    # The default objective keeps the most KV per engine: PP halves the MLA cache each GPU holds.
    assert plan.layout == "TP8xPP2" and plan.objective == "kv_headroom"
    assert "most KV headroom" in plan.reason
    lost = next(a for a in plan.alternatives if a.layout == "TP8xDP2+EP16")
    assert lost.fits and "KV tokens per engine against" in lost.reason and "for TP8xPP2" in lost.reason
    # Dense TP8 + experts over 16 ranks: ~105.6 GiB per GPU, as an independent
    # tensor-by-tensor count of the K3 checkpoint gives.
    ep16 = next(c for c in plan.candidates if c.layout == "TP8xDP2+EP16")
    assert ep16.weight_bytes_per_gpu / GIB == pytest.approx(105.6, rel=0.01)


def test_the_throughput_objective_picks_expert_parallel_and_says_why() -> None:
    settings = PlannerSettings(objective="throughput")
    plan = plan_serving(K3, get_instance_type("p6-b200.48xlarge"), settings=settings)
    assert plan.nodes == 2 and plan.parallel.enable_expert_parallel and plan.expert_parallel == 16
    assert "throughput proxy" in plan.reason and "attention batch(es)" in plan.reason


def test_the_chosen_ep16_layout_yields_the_per_node_experts_vllm_loads() -> None:
    # vLLM places experts linearly by EP rank: with EP16 over two 8-GPU nodes, node 0 holds experts
    # 0-447 and node 1 448-895. The weight stage must stage exactly those from the plan's layout.
    plan = plan_serving(K3, get_instance_type("p6-b200.48xlarge"), settings=PlannerSettings(objective="throughput"))
    # The campaign builds the weight stage's layout from plan.nodes and plan.expert_parallel.
    placement = Layout(nodes=plan.nodes, expert_parallel=plan.expert_parallel)
    assert placement == Layout(nodes=2, expert_parallel=16)
    assert placement.node_experts(0, 896) == range(0, 448) and placement.node_experts(1, 896) == range(448, 896)

    tensors = virtual_tensors_by_file(K3_CHECKPOINT)
    weights = plan_weights(listing_for(tensors), tensors, placement)
    assert [(n.experts_start, n.experts_stop) for n in weights.node_plans] == [(0, 448), (448, 896)]
    # The planner's expert bytes per GPU x the node's 8 GPUs are exactly the expert tensors staged there.
    for node in (0, 1):
        held = placement.node_experts(node, 896)
        staged = sum(
            t.nbytes for ts in tensors.values() for t in ts if (e := expert_of(t.name)) is not None and e in held
        )
        assert staged == plan.expert_weight_bytes_per_gpu * plan.gpus_per_node


def test_deepseek_v3_on_one_p5en_is_tp8() -> None:
    # sgl-project/sglang benchmark/deepseek_v3/README.md: "A single H200 with 8 devices can run
    # DeepSeek V3" (--tp 8); vLLM serves it the same way.
    plan = plan_serving(get_model("deepseek-v3"), get_instance_type("p5en.48xlarge"))
    assert plan.fits and (plan.nodes, plan.layout) == (1, "TP8")


def test_deepseek_v3_on_h100_needs_two_p5_nodes() -> None:
    # sgl-project/sglang benchmark/deepseek_v3/README.md: two 8-GPU H20/H100 nodes at --tp 16; the
    # FP8 checkpoint (~690 GB) does not fit 8 x 80 GB.
    plan = plan_serving(get_model("deepseek-v3"), get_instance_type("p5.48xlarge"))
    assert plan.fits and plan.nodes == 2 and plan.nodes * plan.gpus_per_node == 16
    assert fitting(plan)["TP16"] == 2
    assert not any(c.fits for c in plan.candidates if c.nodes == 1)


def test_kimi_k2_at_128k_needs_16_h200s() -> None:
    # moonshotai/Kimi-K2-Instruct docs/deploy_guidance.md: "The smallest deployment unit for Kimi-K2
    # FP8 weights with 128k seqlen on mainstream H200 or H20 platform is a cluster with 16 GPUs with
    # either Tensor Parallel (TP) or data parallel + expert parallel (DP+EP)". Its commands keep vLLM's
    # default bf16 KV cache.
    settings = PlannerSettings(kv_cache_dtype_bytes=2)
    h200 = get_instance_type("p5en.48xlarge")
    plan = plan_serving(get_model("kimi-k2"), h200, context_length=131_072, settings=settings)
    assert plan.fits and plan.nodes * plan.gpus_per_node == 16
    layouts = fitting(plan)
    assert layouts["TP16"] == 2 and layouts["DP16+EP16"] == 2  # the guide's two layouts
    one_node = [c for c in plan.candidates if c.nodes == 1]
    assert one_node and not any(c.fits for c in one_node)
    tp8 = next(c for c in one_node if c.layout == "TP8")
    assert "weights fit" in tp8.reason and "131,072 tokens per DP rank need" in tp8.reason


def test_a_120b_mxfp4_moe_fits_one_80gb_gpu() -> None:
    # openai/gpt-oss-120b model card: "post-trained with MXFP4 quantization of the MoE weights, making
    # gpt-oss-120b run on a single 80GB GPU (like NVIDIA H100 ...)". p5.4xlarge is 1 x H100.
    oss = get_model("gpt-oss-120b")
    single = plan_serving(oss, get_instance_type("p5.4xlarge"))
    assert single.fits and (single.nodes, single.layout, single.smallest_unit_gpus) == (1, "TP1", 1)
    assert single.kernel_support == "supported"  # OpenAI's Triton MoE kernels run MXFP4 on Hopper
    assert single.spare_gpus.startswith("none")


def test_the_smallest_unit_is_reported_when_the_instance_has_more_gpus() -> None:
    oss = get_model("gpt-oss-120b")
    eight = plan_serving(oss, get_instance_type("p5.48xlarge"))
    assert eight.fits and eight.nodes == 1 and eight.smallest_unit_gpus == 1
    assert eight.smallest_unit_layout == "TP1"
    assert "the smallest unit is 1 GPU(s) (TP1)" in eight.spare_gpus
    # Told to prefer throughput, the node runs as many attention batches as it has GPUs.
    busy = plan_serving(oss, get_instance_type("p5.48xlarge"), settings=PlannerSettings(objective="throughput"))
    assert busy.parallel.serving_replicas * busy.parallel.data_parallel == 8


def test_spare_gpus_run_more_replicas_or_stay_idle() -> None:
    oss, p5 = get_model("gpt-oss-120b"), get_instance_type("p5.48xlarge")
    # A model this small at a short context fits TP1; with max_nodes 1 and 8 GPUs the node runs 8 of them
    # when the objective counts attention batches and replicas fill the node.
    settings = PlannerSettings(objective="throughput")
    plan = plan_serving(oss, p5, context_length=8192, settings=settings)
    tp1 = next(c for c in plan.candidates if c.layout == "TP1")
    assert tp1.fits and tp1.replicas == 8
    idle = plan_serving(oss, p5, context_length=8192, settings=settings.model_copy(update={"spare_gpus": "idle"}))
    assert next(c for c in idle.candidates if c.layout == "TP1").replicas == 1
    assert idle.parallel.serving_replicas == 1


def test_k3_on_hopper_is_flagged_unverified_not_silently_accepted() -> None:
    # K3 ships MXFP4 weights trained with MXFP8 activations; vLLM 0.32 has native kernels for that on
    # the SM100 family only and falls back to Marlin weight-only kernels on Hopper.
    plan = plan_serving(K3, get_instance_type("p5en.48xlarge"))
    assert plan.fits and plan.kernel_support == "unverified"
    assert "Marlin" in plan.kernel_note and "Kernel support unverified" in plan.reason
    assert plan_serving(K3, get_instance_type("p6-b200.48xlarge")).kernel_support == "supported"


def test_the_layout_object_carries_vllm_s_flags() -> None:
    plan = plan_serving(K3, get_instance_type("p6-b200.48xlarge"), settings=PlannerSettings(objective="throughput"))
    p = plan.parallel
    assert p.layout == plan.layout and p.nodes == plan.nodes == p.nodes_per_replica == 2
    assert p.tensor_parallel * p.pipeline_parallel * p.data_parallel == p.gpus_per_replica == 16
    assert p.data_parallel_local * p.tensor_parallel == p.gpus_per_node_used == 8
    assert p.expert_parallel == p.tensor_parallel * p.data_parallel
    tp8pp2 = plan_serving(K3, get_instance_type("p6-b200.48xlarge")).parallel
    assert (tp8pp2.tensor_parallel, tp8pp2.pipeline_parallel, tp8pp2.data_parallel_local) == (8, 2, 1)
    assert not tp8pp2.enable_expert_parallel and tp8pp2.expert_parallel == 1


@pytest.mark.parametrize("objective", ["kv_headroom", "throughput"])
def test_weight_and_rollout_stages_read_one_layout(objective: str) -> None:
    # One source of truth: the rollout's vLLM layout and the weight stage's expert placement both come
    # from plan.parallel, so --enable-expert-parallel with EP16 and the per-node experts cannot disagree.
    settings = PlannerSettings(objective=objective)  # type: ignore[arg-type]
    plan = plan_serving(K3, get_instance_type("p6-b200.48xlarge"), settings=settings)
    p = plan.parallel
    assert config_for(plan).layout == p  # the rollout renders the plan's own layout
    placement = Layout(nodes=p.nodes_per_replica, expert_parallel=p.expert_parallel)
    # Two nodes per replica: a LeaderWorkerSet can start either layout.
    assert launch_blockers(p, splits_experts=placement.splits_experts) == []
