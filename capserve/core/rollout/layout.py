"""The serving layout the rollout renders: how many nodes, and how vLLM splits the model over their GPUs.

``layout_from_plan`` is the one place that reads the planner's layout (``ServingPlan.parallel``).

Launch shapes vLLM 0.32 starts from one LeaderWorkerSet (docs/serving.md §1):

- one node: TP × PP × DP all local, one ``vllm serve``;
- several nodes, no data parallelism: TP inside a node and PP across nodes (or TP across nodes),
  the multiprocessing backend with ``--nnodes``/``--node-rank``/``--master-addr``, workers ``--headless``;
- several nodes, data parallel (with expert parallelism for MoE): ``--data-parallel-size`` with its
  per-node local size, the leader's address, and ``--data-parallel-start-rank`` on headless workers.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from capserve.core.planner import ServingPlan

LaunchMode = Literal["single-node", "multi-node-tp-pp", "multi-node-dp"]


class ServingLayout(BaseModel):
    """One model copy's shape, and how many copies (replicas, one LWS group each) are served."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    nodes: int = Field(ge=1, le=64, description="Nodes per model copy (the LeaderWorkerSet group size).")
    gpus_per_node: int = Field(ge=1, le=64, description="GPUs each node has (all are requested).")
    tensor_parallel: int = Field(ge=1, le=1024, description="vLLM --tensor-parallel-size.")
    pipeline_parallel: int = Field(ge=1, le=1024, description="vLLM --pipeline-parallel-size.")
    data_parallel: int = Field(ge=1, le=65_536, description="vLLM --data-parallel-size (engine copies).")
    data_parallel_local: int = Field(ge=1, le=1024, description="Data-parallel ranks on each node.")
    expert_parallel: int = Field(ge=1, le=65_536, description="Expert-parallel group size (1: experts split by TP).")
    enable_expert_parallel: bool = Field(description="Pass --enable-expert-parallel (EP = TP × DP).")
    replicas: int = Field(1, ge=1, le=64, description="Independent model copies (LWS groups).")

    @model_validator(mode="after")
    def _consistent(self) -> ServingLayout:
        world = self.tensor_parallel * self.pipeline_parallel * self.data_parallel
        if world % self.nodes:
            raise ValueError(f"TP×PP×DP = {world} GPUs do not split evenly over {self.nodes} nodes")
        if world // self.nodes > self.gpus_per_node:
            raise ValueError(
                f"TP×PP×DP = {world} GPUs over {self.nodes} node(s) needs {world // self.nodes} per node; "
                f"the instance has {self.gpus_per_node}"
            )
        if self.data_parallel % self.data_parallel_local or self.data_parallel // self.data_parallel_local != (
            self.nodes if self.data_parallel > 1 else 1
        ):
            raise ValueError(
                f"data_parallel {self.data_parallel} with {self.data_parallel_local} local rank(s) per node "
                f"does not match {self.nodes} node(s)"
            )
        if self.enable_expert_parallel != (self.expert_parallel > 1):
            raise ValueError("enable_expert_parallel must be set exactly when expert_parallel > 1")
        if self.enable_expert_parallel and self.expert_parallel != self.tensor_parallel * self.data_parallel:
            raise ValueError(
                f"with --enable-expert-parallel vLLM makes EP = TP × DP = "
                f"{self.tensor_parallel * self.data_parallel}, not {self.expert_parallel}"
            )
        return self

    @property
    def world_size(self) -> int:
        return self.tensor_parallel * self.pipeline_parallel * self.data_parallel

    @property
    def mode(self) -> LaunchMode:
        if self.nodes == 1:
            return "single-node"
        return "multi-node-dp" if self.data_parallel > 1 else "multi-node-tp-pp"

    @property
    def name(self) -> str:
        """E.g. ``TP8``, ``TP8xPP2``, ``DP16+EP16``."""
        parts = [f"TP{self.tensor_parallel}"] if self.tensor_parallel > 1 or self.data_parallel == 1 else []
        if self.pipeline_parallel > 1:
            parts.append(f"PP{self.pipeline_parallel}")
        if self.data_parallel > 1:
            parts.append(f"DP{self.data_parallel}")
        name = "x".join(parts)
        return f"{name}+EP{self.expert_parallel}" if self.enable_expert_parallel else name


def layout_from_plan(plan: ServingPlan, *, replicas: int = 1) -> ServingLayout:
    """The plan's layout (``ServingPlan.parallel``, the one source of truth), read through this one adapter."""
    p = plan.parallel
    return ServingLayout(
        nodes=p.nodes_per_replica,
        gpus_per_node=p.gpus_per_node,
        tensor_parallel=p.tensor_parallel,
        pipeline_parallel=p.pipeline_parallel,
        data_parallel=p.data_parallel,
        data_parallel_local=p.data_parallel_local,
        expert_parallel=p.expert_parallel,
        enable_expert_parallel=p.enable_expert_parallel,
        replicas=replicas,
    )


def launch_blockers(layout: ServingLayout, *, splits_experts: bool) -> list[str]:
    """Why one LeaderWorkerSet cannot start this layout correctly (empty: it can).

    Call it when planning, before anything is bought; the renderer refuses the same layouts.

    - DP and PP across nodes at once: one ``vllm serve`` per node cannot express both in 0.32.
    - Data-parallel start ranks and per-node expert folders: a LeaderWorkerSet has one template for
      the leader and one shared by every worker, so only the leader and *one* worker can be given
      their own rank (``--data-parallel-start-rank``) and pinned to the nodes holding their experts.
    """
    blockers = []
    if layout.nodes > 1 and layout.data_parallel > 1 and layout.pipeline_parallel > 1:
        blockers.append(
            f"{layout.name} on {layout.nodes} nodes combines data and pipeline parallelism across nodes, "
            "which one vLLM command per node cannot start: plan TP×PP or DP(+EP) instead"
        )
    if layout.mode == "multi-node-dp" and layout.nodes > 2:
        blockers.append(
            f"{layout.name} over {layout.nodes} nodes: a LeaderWorkerSet gives each worker the same "
            "arguments, so only 2 nodes can carry distinct data-parallel start ranks; plan at most 2 nodes "
            "per copy for data parallelism, or TP×PP"
        )
    if splits_experts and layout.nodes > 2:
        blockers.append(
            f"experts are split over {layout.nodes} nodes, but a LeaderWorkerSet can pin only its leader and "
            "one worker template to the nodes holding their experts; stage full weights per node or use at "
            "most 2 nodes per copy"
        )
    return blockers
