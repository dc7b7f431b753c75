"""The parallel layouts vLLM runs, enumerated for one instance type (docs/planner.md, 'Layouts').

One *replica* is one vLLM engine group: ``tp x pp x dp`` GPUs. vLLM numbers its ranks TP fastest,
then PP, then DP (``vllm/distributed/parallel_state.py``), and with ``--enable-expert-parallel`` the
expert-parallel group is all ``tp x dp`` ranks of a stage (EP rank = ``dp_rank x tp + tp_rank``).
The shapes tried, with G GPUs per node:

- ``TP{t}`` and ``TP{t}+EP{t}`` for every t dividing G (a replica inside one node; the node's other
  GPUs can run more replicas), and t = k x G across k nodes (vLLM runs TP across nodes with
  ``--nnodes``/Ray; it pays an all-reduce per layer over the network);
- ``TP{G}xPP{k}``: one pipeline stage per node, the layout vLLM's docs give for several nodes;
- ``TP{t}xDP{d}+EP{t*d}`` (``DP{d}+EP{d}`` when t = 1): attention split by TP inside each DP rank,
  experts spread over every rank, on part of a node or on whole nodes.

Not tried: PP inside one node (TP over NVLink does the same with no pipeline bubble), TP that does
not divide the node, and DP without EP for MoE models (vLLM then slices every expert over TP x DP,
which only adds all-reduces to what EP does).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Shape:
    """One replica's parallel layout: what ``vllm serve`` gets as -tp, -pp, -dp and -ep."""

    tp: int
    pp: int
    dp: int
    expert_parallel: bool
    gpus_per_node: int

    @property
    def gpus(self) -> int:
        """GPUs of one replica."""
        return self.tp * self.pp * self.dp

    @property
    def nodes(self) -> int:
        """Nodes one replica needs (a replica smaller than a node needs one)."""
        return -(-self.gpus // self.gpus_per_node)

    @property
    def ep_size(self) -> int:
        """Expert-parallel group size: TP x DP with EP on, 1 without."""
        return self.tp * self.dp if self.expert_parallel else 1

    @property
    def dp_per_node(self) -> int:
        """DP ranks on each node (``--data-parallel-size-local``)."""
        return max(1, self.dp // self.nodes)

    @property
    def name(self) -> str:
        ep = f"+EP{self.ep_size}" if self.expert_parallel else ""
        if self.dp > 1:
            return f"DP{self.dp}{ep}" if self.tp == 1 else f"TP{self.tp}xDP{self.dp}{ep}"
        if self.pp > 1:
            return f"TP{self.tp}xPP{self.pp}{ep}"
        return f"TP{self.tp}{ep}"


def layout_shapes(gpus_per_node: int, max_nodes: int, *, moe: bool, min_nodes: int = 1) -> list[Shape]:
    """Every shape whose replica needs between ``min_nodes`` and ``max_nodes`` nodes."""
    g = gpus_per_node
    divisors = [t for t in range(1, g + 1) if g % t == 0]
    shapes: list[Shape] = []

    def add(tp: int, pp: int, dp: int, ep: bool) -> None:
        shape = Shape(tp=tp, pp=pp, dp=dp, expert_parallel=ep, gpus_per_node=g)
        if min_nodes <= shape.nodes <= max_nodes:
            shapes.append(shape)

    for gpus in divisors:  # replicas inside one node
        for tp in (t for t in divisors if gpus % t == 0):
            dp = gpus // tp
            if dp == 1:
                add(tp, 1, 1, False)
                if moe and tp > 1:
                    add(tp, 1, 1, True)
            elif moe:
                add(tp, 1, dp, True)
    for nodes in range(2, max_nodes + 1):  # replicas over whole nodes
        gpus = nodes * g
        add(gpus, 1, 1, False)
        if moe:
            add(gpus, 1, 1, True)
        add(g, nodes, 1, False)
        if moe:
            for tp in divisors:
                add(tp, 1, gpus // tp, True)
    return shapes
