"""Which routed experts each expert-parallel rank, and so each node, holds.

vLLM's default ``--expert-placement-strategy linear`` (``determine_expert_map`` in
``vllm/model_executor/layers/fused_moe``, read in vLLM 0.33 source, docs/weights.md §4.1): with
``base, rem = divmod(E, ep)``, rank r owns the contiguous block starting at ``r*base + min(r, rem)`` of
length ``base + (r < rem)``. ``round_robin`` is honoured only with grouped top-k and a DeepEP/NIXL backend
and silently falls back to linear otherwise; K3 has one expert group, so linear is what K3 gets.
EP ranks are numbered node-major (``ep_rank = dp_rank*tp + tp_rank`` with DP across nodes), so node n
holds ranks ``[n*g, (n+1)*g)`` for ``g = ep / nodes`` GPUs of the node in the EP group.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, model_validator

# K3 and DeepSeek-style per-expert tensors: "...block_sparse_moe.experts.17.w1.weight_packed".
# Shared experts are spelled "shared_experts." and do not match (no "." before "experts").
EXPERT_PATTERN = re.compile(r"\.experts\.(\d+)\.")


def expert_of(tensor_name: str) -> int | None:
    """The routed expert id a tensor belongs to, or None for a dense tensor (needed on every node)."""
    match = EXPERT_PATTERN.search(tensor_name)
    return int(match.group(1)) if match else None


def rank_experts(rank: int, *, num_experts: int, ep_size: int) -> range:
    """The experts EP rank ``rank`` owns under linear placement (possibly empty when ep > experts)."""
    if not 0 <= rank < ep_size:
        raise ValueError(f"rank {rank} is outside 0..{ep_size - 1}")
    base, rem = divmod(num_experts, ep_size)
    start = rank * base + min(rank, rem)
    return range(start, start + base + (1 if rank < rem else 0))


def expert_rank(expert: int, *, num_experts: int, ep_size: int) -> int:
    """The EP rank that owns ``expert`` (the inverse of ``rank_experts``)."""
    if not 0 <= expert < num_experts:
        raise ValueError(f"expert {expert} is outside 0..{num_experts - 1}")
    base, rem = divmod(num_experts, ep_size)
    cut = rem * (base + 1)  # the first `rem` ranks own one expert more
    return expert // (base + 1) if expert < cut else rem + (expert - cut) // base


class Layout(BaseModel):
    """How the model is spread: nodes, and the expert-parallel group spanning them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    nodes: int = Field(ge=1, le=64, description="Nodes serving one model replica.")
    expert_parallel: int = Field(
        ge=1, le=4096, description="Expert-parallel group size (GPUs); 1 means experts are not split."
    )

    @model_validator(mode="after")
    def _divisible(self) -> Layout:
        if self.expert_parallel > 1 and self.expert_parallel % self.nodes:
            raise ValueError(
                f"expert_parallel={self.expert_parallel} does not divide over {self.nodes} nodes: "
                "every node must hold the same number of EP ranks"
            )
        return self

    @property
    def ranks_per_node(self) -> int:
        return max(self.expert_parallel // self.nodes, 1)

    @property
    def splits_experts(self) -> bool:
        """True when nodes hold different experts (EP spans more than one node)."""
        return self.nodes > 1 and self.expert_parallel > 1

    @property
    def layout_id(self) -> str:
        """A deterministic name for this layout, used in S3 keys and cache keys."""
        return f"ep{self.expert_parallel}-nodes{self.nodes}"

    def node_of_rank(self, rank: int) -> int:
        return rank // self.ranks_per_node

    def node_experts(self, node: int, num_experts: int) -> range:
        """The contiguous block of experts node ``node`` holds (every expert when EP does not span nodes)."""
        if not 0 <= node < self.nodes:
            raise ValueError(f"node {node} is outside 0..{self.nodes - 1}")
        if not self.splits_experts:
            return range(num_experts)
        first = rank_experts(node * self.ranks_per_node, num_experts=num_experts, ep_size=self.expert_parallel)
        last = rank_experts((node + 1) * self.ranks_per_node - 1, num_experts=num_experts, ep_size=self.expert_parallel)
        return range(first.start, last.stop)

    def node_of_expert(self, expert: int, num_experts: int) -> int:
        if not self.splits_experts:
            return 0
        return self.node_of_rank(expert_rank(expert, num_experts=num_experts, ep_size=self.expert_parallel))
