"""Expert → rank → node assignment follows vLLM's linear placement (contiguous blocks)."""

from __future__ import annotations

import pytest

from capserve.core.weights.placement import Layout, expert_of, expert_rank, rank_experts


def vllm_linear(num_experts: int, ep: int, rank: int) -> list[int]:
    # vLLM determine_expert_map, linear: base = E // ep, rem = E % ep (docs/weights.md §4.1), written independently.
    base, rem = divmod(num_experts, ep)
    start = rank * base + min(rank, rem)
    return list(range(start, start + base + (rank < rem)))


@pytest.mark.parametrize(("experts", "ep"), [(896, 8), (896, 16), (896, 24), (896, 32), (384, 16), (100, 7), (8, 16),
                                             (8, 2), (32, 4)])
def test_rank_blocks_match_vllm_and_invert(experts: int, ep: int) -> None:
    seen = []
    for rank in range(ep):
        block = list(rank_experts(rank, num_experts=experts, ep_size=ep))
        assert block == vllm_linear(experts, ep, rank)
        assert all(expert_rank(e, num_experts=experts, ep_size=ep) == rank for e in block)
        seen += block
    assert seen == list(range(experts))


def test_k3_ep16_on_two_nodes_splits_experts_in_half() -> None:
    layout = Layout(nodes=2, expert_parallel=16)
    assert layout.node_experts(0, 896) == range(0, 448)
    assert layout.node_experts(1, 896) == range(448, 896)
    assert layout.node_of_expert(447, 896) == 0 and layout.node_of_expert(448, 896) == 1


@pytest.mark.parametrize(("nodes", "ep", "experts"), [(4, 32, 896), (2, 16, 384), (3, 12, 100), (4, 4, 10)])
def test_nodes_hold_contiguous_disjoint_blocks(nodes: int, ep: int, experts: int) -> None:
    layout = Layout(nodes=nodes, expert_parallel=ep)
    blocks = [layout.node_experts(n, experts) for n in range(nodes)]
    assert [e for b in blocks for e in b] == list(range(experts))
    for node, block in enumerate(blocks):
        assert all(layout.node_of_expert(e, experts) == node for e in block)


def test_single_node_or_no_ep_holds_every_expert() -> None:
    assert Layout(nodes=1, expert_parallel=8).node_experts(0, 896) == range(896)
    assert Layout(nodes=2, expert_parallel=1).node_experts(1, 896) == range(896)


def test_ep_must_divide_over_nodes() -> None:
    with pytest.raises(ValueError, match="does not divide"):
        Layout(nodes=3, expert_parallel=16)


def test_expert_names() -> None:
    assert expert_of("language_model.model.layers.3.block_sparse_moe.experts.17.w1.weight_packed") == 17
    assert expert_of("language_model.model.layers.3.block_sparse_moe.shared_experts.up_proj.weight") is None
    assert expert_of("language_model.model.layers.3.block_sparse_moe.gate.weight") is None
