"""Every knob of the serving workload, with bounds and the reason for each default (docs/serving.md)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from capserve.core.cluster.efa import EFA_HUGEPAGES_2MI_PAGES, EFA_POD_HUGEPAGES_MIB, HUGEPAGE_2MI_MIB
from capserve.core.drain import POD_TERMINATION_GRACE_S


class StartupModel(BaseModel):
    """How the startup probe's budget is made from the time model's vLLM start (docs/serving.md §3.2).

    The expected start (process start, weight load at the read rate of where the weights are, compile per
    GB of the whole model cold or warm, CUDA-graph capture) is ``capserve.core.timeline``'s, the one time
    model of a block (docs/timeline.md). The budget is ``safety_factor`` × expected, within bounds.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    safety_factor: float = Field(1.5, ge=1.0, le=10.0, description="Budget = this × the expected start time.")
    min_budget_s: float = Field(600.0, ge=60, le=24 * 3600, description="Never less than this.")
    max_budget_s: float = Field(6 * 3600.0, ge=60, le=24 * 3600, description="Never more than this.")


class RolloutWaitSettings(BaseModel):
    """When a rollout stops waiting on a problem instead of running out its whole startup budget."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    unschedulable_grace_s: float = Field(
        120.0, ge=0, le=3600, description="How long a pod may stay unschedulable (or miss a Secret) before it is fatal."
    )
    crash_restarts: int = Field(
        2, ge=1, le=100, description="Restarts of a crash-looping container before the rollout gives up on it."
    )
    pull_and_schedule_allowance_s: float = Field(
        1800.0,
        ge=0,
        le=6 * 3600,
        description="Added to the startup budget for the wait's deadline: image pull (a vLLM image is ~10 GB), "
        "scheduling and the compile-cache restore happen before the startup probe starts counting.",
    )
    log_lines: int = Field(20, ge=1, le=500, description="Log lines of a crashed container kept in the error.")
    cache_save_timeout_s: float = Field(
        1800.0,
        ge=1,
        le=3600,
        description="How long the flow waits, after the Services switched, for the compile-cache save Jobs; past "
        "it (or on their failure) the report says the cache was not saved and the next campaign starts cold.",
    )
    delete_timeout_s: float = Field(
        900.0,
        ge=1,
        le=3600,
        description="How long deleting a workload may take until its pods are gone (their grace periods, a vLLM "
        "server finishing its requests) before the rollout stops on it.",
    )
    endpoint_check_timeout_s: float = Field(
        30.0, gt=0, le=600, description="Timeout of the rollout's own GET /v1/models before traffic moves."
    )
    endpoint_check_attempts: int = Field(
        3,
        ge=1,
        le=10,
        description="Tries of that check when the connection drops before an answer (a wrong answer is final): one "
        "dropped stream through the API server says nothing about the pod, and a failed check tears a new cluster "
        "down.",
    )
    endpoint_check_retry_s: float = Field(2.0, ge=0, le=60, description="Pause between two tries of that check.")


class RolloutSettings(BaseModel):
    """Ports, probe timings, per-pod resources and shared memory of the vLLM pods."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    port: int = Field(8000, ge=1024, le=65535, description="vLLM's HTTP port in the pod and on the Services.")
    master_port: int = Field(
        29501, ge=1024, le=65535, description="torch.distributed port across nodes (vLLM --master-port default)."
    )
    data_parallel_rpc_port: int = Field(
        29550, ge=1024, le=65535, description="Data-parallel coordination port (vLLM --data-parallel-rpc-port)."
    )
    probe_period_s: int = Field(10, ge=1, le=300, description="Startup and readiness probe period.")
    probe_timeout_s: int = Field(5, ge=1, le=120, description="Timeout of one startup/readiness probe.")
    readiness_failure_threshold: int = Field(3, ge=1, le=100, description="Failed readiness probes before NotReady.")
    liveness_period_s: int = Field(30, ge=1, le=600, description="Liveness probe period (after startup only).")
    liveness_timeout_s: int = Field(10, ge=1, le=120, description="Timeout of one liveness probe.")
    liveness_failure_threshold: int = Field(
        5, ge=1, le=100, description="Failed liveness probes before a restart (which rebuilds the whole LWS group)."
    )
    prepull_deadline_s: int = Field(
        4 * 3600, ge=600, le=24 * 3600,
        description="activeDeadlineSeconds of an image pre-pull Job: longer than any pull (a ~10 GB image) [inf].",
    )
    termination_grace_s: int = Field(
        POD_TERMINATION_GRACE_S, ge=0, le=3600, description="Time vLLM gets to drain on delete."
    )
    cpu_fraction: float = Field(
        0.8, gt=0, le=1, description="Share of the instance's vCPUs the vLLM pod requests (the rest: kubelet, agents)."
    )
    memory_fraction: float = Field(
        0.8, gt=0, le=1, description="Share of the instance's RAM the vLLM pod requests, /dev/shm included."
    )
    shm_gib: int = Field(
        64,
        ge=1,
        le=1024,
        description="Size of /dev/shm (a memory emptyDir). vLLM's workers and NCCL's intra-node transport use "
        "shared memory; public deployments use 15–256 GiB. Counted against the pod's memory limit.",
    )
    efa_hugepages_mib: int = Field(
        EFA_POD_HUGEPAGES_MIB,
        ge=0,
        le=EFA_HUGEPAGES_2MI_PAGES * HUGEPAGE_2MI_MIB,
        description="hugepages-2Mi requested by multi-node layouts (one-node layouts use no EFA and request "
        "none): the GPU nodes allocate 5128 2 MiB pages at boot and the EKS EFA guide's NCCL test requests "
        "5120Mi.",
    )
    nccl_debug: str = Field(
        "WARN",
        pattern=r"^(VERSION|WARN|INFO|TRACE)$",
        description="NCCL_DEBUG of single-node pods. Pods of a layout spanning nodes always get INFO: the rollout "
        "reads from the leader's log whether NCCL uses EFA ('NET/OFI Selected Provider is efa') or TCP sockets.",
    )
    image_tool_timeout_s: float = Field(
        4 * 3600.0,
        ge=60,
        le=24 * 3600,
        description="Longest run of the registry tool (crane: resolve a tag, copy the image to ECR, list its files): "
        "a 20 GB copy at a slow 2 MB/s still ends within the default.",
    )
    startup: StartupModel = Field(
        default_factory=StartupModel, description="How the startup probe's budget is computed."
    )
