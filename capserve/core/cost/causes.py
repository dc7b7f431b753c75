"""Where a paid GPU-minute went: one cause per minute, a stated precedence, and what would shrink each loss.

Every minute of a reservation is attributed to exactly one cause, so that paid = serving + Σ lost holds
to the minute. When recorded intervals overlap, the cause with the higher precedence takes the minute:

1. ``aws_termination`` outranks everything: from end − 30 min AWS is terminating the instances, so no
   plan can use those minutes, whatever was recorded (docs/cost.md, "The last 30 minutes").
2. ``failures_and_rollbacks`` outranks every stage: the failure is why that stage's time was lost.
   ``redeploys`` comes next: the endpoint was down from the old pods' deletion until the new revision
   passed its gate (or the old one served again), whatever else was recorded then.
3. ``drain_and_teardown_margin`` outranks the stages: after the drain point nothing else may run.
4. Among lifecycle stages a later stage outranks an earlier one (an overlap means the later stage had
   begun, e.g. node readiness nested inside bring-up, evaluation starting once the rollout is ready).
5. ``serving`` is claimed only by minutes no loss claims: the ledger never overstates serving.
6. ``idle`` and ``waiting_for_bring_up`` are what is left: the ledger fills unrecorded minutes with them.
"""

from __future__ import annotations

import enum


class Cause(enum.StrEnum):
    """Why a paid GPU-minute was (or was not) serving. Values are the report's keys."""

    WAITING_FOR_BRING_UP = "waiting_for_bring_up"
    BRING_UP = "bring_up"
    NODE_READINESS = "node_readiness"
    WEIGHTS_TO_NODES = "weights_to_nodes"
    VLLM_COLD_START = "vllm_cold_start"
    EVALUATION = "evaluation"
    SERVING = "serving"
    IDLE = "idle"
    DRAIN_AND_TEARDOWN_MARGIN = "drain_and_teardown_margin"
    AWS_TERMINATION = "aws_termination"
    FAILURES_AND_ROLLBACKS = "failures_and_rollbacks"
    REDEPLOYS = "redeploys"

    @property
    def precedence(self) -> int:
        """Higher wins a minute that several recorded intervals claim (module docstring)."""
        return _PRECEDENCE[self]

    @property
    def description(self) -> str:
        return _DESCRIPTIONS[self]

    @property
    def advice(self) -> str:
        """What would shrink this loss next time (the report names it for the biggest loss)."""
        return _ADVICE[self]


# Highest precedence first.
_BY_PRECEDENCE: tuple[Cause, ...] = (
    Cause.AWS_TERMINATION,
    Cause.FAILURES_AND_ROLLBACKS,
    Cause.REDEPLOYS,
    Cause.DRAIN_AND_TEARDOWN_MARGIN,
    Cause.EVALUATION,
    Cause.VLLM_COLD_START,
    Cause.WEIGHTS_TO_NODES,
    Cause.NODE_READINESS,
    Cause.BRING_UP,
    Cause.SERVING,
    Cause.IDLE,
    Cause.WAITING_FOR_BRING_UP,
)
_PRECEDENCE = {cause: len(_BY_PRECEDENCE) - rank for rank, cause in enumerate(_BY_PRECEDENCE)}

# Report order: the order a reservation lives through them.
LOST_CAUSES: tuple[Cause, ...] = (
    Cause.WAITING_FOR_BRING_UP,
    Cause.BRING_UP,
    Cause.NODE_READINESS,
    Cause.WEIGHTS_TO_NODES,
    Cause.VLLM_COLD_START,
    Cause.EVALUATION,
    Cause.IDLE,
    Cause.REDEPLOYS,
    Cause.DRAIN_AND_TEARDOWN_MARGIN,
    Cause.AWS_TERMINATION,
    Cause.FAILURES_AND_ROLLBACKS,
)

_DESCRIPTIONS = {
    Cause.WAITING_FOR_BRING_UP: "paid, before bring-up began (block start → bring-up start)",
    Cause.BRING_UP: "GPU nodes being created on the reservation",
    Cause.NODE_READINESS: "nodes joining, drivers and device plugins until every GPU is allocatable",
    Cause.WEIGHTS_TO_NODES: "copying each node's share of the weights onto it",
    Cause.VLLM_COLD_START: "vLLM loading weights, compiling and capturing graphs until ready",
    Cause.EVALUATION: "smoke, quality and load evaluation of the endpoint before it serves",
    Cause.SERVING: "rollout ready → drain: the endpoint could take traffic",
    Cause.IDLE: "paid, nothing recorded running (between stages, or stopped before the drain point)",
    Cause.DRAIN_AND_TEARDOWN_MARGIN: "drain point → AWS termination: traffic stopped, cluster torn down",
    Cause.AWS_TERMINATION: "the last 30 minutes: AWS terminates the instances (EC2 Capacity Block rule)",
    Cause.FAILURES_AND_ROLLBACKS: "a stage that failed, and rolling back from it",
    Cause.REDEPLOYS: "a redeploy's downtime: old pods deleted → the new revision passed its gate (or the old is back)",
}

_ADVICE = {
    Cause.WAITING_FOR_BRING_UP: (
        "Start bring-up at the block's start (or a lead before it): schedule the bring-up run at purchase, "
        "and build the VPC, control plane and system nodes before the block, since they need no GPU."
    ),
    Cause.BRING_UP: (
        "Build everything that needs no GPU (VPC, EKS control plane, IAM, system nodes, add-ons) before "
        "the block starts, so that only the GPU node group is created once it is active."
    ),
    Cause.NODE_READINESS: (
        "Use a node image with the GPU driver, EFA and container images preloaded; on HyperPod, weigh "
        "the deep health checks' duration against the hours they protect."
    ),
    Cause.WEIGHTS_TO_NODES: (
        "Stage the weights before the block starts (S3 in the reservation's region, or FSx for Lustre "
        "linked to it) and copy only each node's experts, all nodes in parallel."
    ),
    Cause.VLLM_COLD_START: (
        "Warm the compile caches: restore torch.compile, Triton/FlashInfer autotune and CUDA-graph caches "
        "from S3 (keyed by image, model revision and layout) before vLLM starts."
    ),
    Cause.EVALUATION: (
        "Shorten the load profile (fewer concurrency levels, fewer requests per level) or keep only the "
        "smoke and quality gates before serving and measure load on real traffic."
    ),
    Cause.SERVING: "Nothing to shrink: this is what the reservation was bought for.",
    Cause.IDLE: (
        "Keep serving until the drain point instead of stopping early, or buy a shorter block for the work planned."
    ),
    Cause.DRAIN_AND_TEARDOWN_MARGIN: (
        "Move the drain point closer to the end (teardown.drain_before_end_minutes, at least 31) once "
        "teardown is known to finish in time; AWS warns 40 minutes before the end."
    ),
    Cause.AWS_TERMINATION: (
        "Nothing within the block: AWS always takes the last 30 minutes. A longer block dilutes it."
    ),
    Cause.FAILURES_AND_ROLLBACKS: (
        "Fix the failed stage before the next reservation (the report's diagnosis names it) and rehearse "
        "the same plan in the sandbox first."
    ),
    Cause.REDEPLOYS: (
        "Redeploy with a strategy that keeps the old revision serving until the new one passes its gate "
        "(blue-green or rolling, when the block has the nodes), keep compile caches warm across revisions, "
        "and publish fewer revisions mid-block."
    ),
}

assert set(_PRECEDENCE) == set(Cause) and set(_DESCRIPTIONS) == set(Cause) and set(_ADVICE) == set(Cause)
assert set(LOST_CAUSES) == set(Cause) - {Cause.SERVING}
