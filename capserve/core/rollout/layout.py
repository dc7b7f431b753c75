"""How the rollout starts the planner's layout (``ServingPlan.parallel``, a ``ParallelLayout``).

The rollout renders the planner's layout itself (one model copy: ``nodes_per_replica`` nodes, TP/PP/DP/EP);
how many copies run is the spec's ``serving.replicas`` (``RolloutConfig.replicas``).

Launch shapes vLLM 0.32 starts from one LeaderWorkerSet (docs/serving.md §1):

- one node: TP × PP × DP all local, one ``vllm serve``;
- several nodes, no data parallelism: TP inside a node and PP across nodes (or TP across nodes),
  the multiprocessing backend with ``--nnodes``/``--node-rank``/``--master-addr``, workers ``--headless``;
- several nodes, data parallel (with expert parallelism for MoE): ``--data-parallel-size`` with its
  per-node local size, the leader's address, and ``--data-parallel-start-rank`` on headless workers.
"""

from __future__ import annotations

from typing import Literal

from capserve.core.planner.plan import ParallelLayout

LaunchMode = Literal["single-node", "multi-node-tp-pp", "multi-node-dp"]


def launch_mode(layout: ParallelLayout) -> LaunchMode:
    """Which of the launch shapes above starts one copy of ``layout``."""
    if layout.nodes_per_replica == 1:
        return "single-node"
    return "multi-node-dp" if layout.data_parallel > 1 else "multi-node-tp-pp"


def launch_blockers(layout: ParallelLayout, *, splits_experts: bool) -> list[str]:
    """Why one LeaderWorkerSet cannot start this layout correctly (empty: it can).

    Call it when planning, before anything is bought; the renderer refuses the same layouts.

    - DP and PP across nodes at once: one ``vllm serve`` per node cannot express both in 0.32.
    - Data-parallel start ranks and per-node expert folders: a LeaderWorkerSet has one template for
      the leader and one shared by every worker, so only the leader and *one* worker can be given
      their own rank (``--data-parallel-start-rank``) and pinned to the nodes holding their experts.
    """
    blockers = []
    nodes, name = layout.nodes_per_replica, layout.layout
    if nodes > 1 and layout.data_parallel > 1 and layout.pipeline_parallel > 1:
        blockers.append(
            f"{name} on {nodes} nodes combines data and pipeline parallelism across nodes, "
            "which one vLLM command per node cannot start: plan TP×PP or DP(+EP) instead"
        )
    if launch_mode(layout) == "multi-node-dp" and nodes > 2:
        blockers.append(
            f"{name} over {nodes} nodes: a LeaderWorkerSet gives each worker the same "
            "arguments, so only 2 nodes can carry distinct data-parallel start ranks; plan at most 2 nodes "
            "per copy for data parallelism, or TP×PP"
        )
    if splits_experts and nodes > 2:
        blockers.append(
            f"experts are split over {nodes} nodes, but a LeaderWorkerSet can pin only its leader and "
            "one worker template to the nodes holding their experts; stage full weights per node or use at "
            "most 2 nodes per copy"
        )
    return blockers
