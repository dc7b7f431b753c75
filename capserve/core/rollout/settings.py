"""Every knob of the serving workload, with bounds and the reason for each default (docs/serving.md)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from capserve.core.cluster.efa import EFA_HUGEPAGES_2MI_PAGES, EFA_POD_HUGEPAGES_MIB, HUGEPAGE_2MI_MIB


class StartupModel(BaseModel):
    """How long vLLM takes to start, as a function of the weights (docs/serving.md §3.2).

    expected = fixed + node_GB / load_GB_per_s + model_GB × compile_s_per_GB, where the fixed part is
    process start, NCCL/EFA setup and CUDA-graph capture, the load part reads this node's weights
    from NVMe, and the compile part (torch.compile, Triton/FlashInfer/DeepGEMM JIT and autotune)
    grows with the model, not with this node's share (every node compiles its whole layer stack).
    A warm compile cache replaces the compile rate with a much smaller one (reading the cache).
    Fitted to two public figures: K3's reported 60–75 min first boot, and a 27B model at ~5¾ min
    cold / ~3¼ min warm (vllm#52682). The budget is ``safety_factor`` × expected, within bounds.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    fixed_cold_s: float = Field(180.0, ge=0, le=3600, description="Start, distributed setup, graph capture (cold).")
    fixed_warm_s: float = Field(120.0, ge=0, le=3600, description="The same with warm caches.")
    load_bytes_per_s: float = Field(
        1e9, gt=0, le=1e11, description="Weight load rate from the node's NVMe into the GPUs (bytes/s)."
    )
    compile_s_per_gb_cold: float = Field(
        1.77, ge=0, le=60, description="Seconds of compile/JIT/autotune per GB of the whole model, cold."
    )
    compile_s_per_gb_warm: float = Field(
        0.3, ge=0, le=60, description="Seconds per GB of the whole model to load cached compile artifacts."
    )
    safety_factor: float = Field(1.5, ge=1.0, le=10.0, description="Budget = this × the expected start time.")
    min_budget_s: float = Field(600.0, ge=60, le=24 * 3600, description="Never less than this.")
    max_budget_s: float = Field(6 * 3600.0, ge=60, le=24 * 3600, description="Never more than this.")


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
    termination_grace_s: int = Field(60, ge=0, le=3600, description="Time vLLM gets to drain on delete.")
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
    startup: StartupModel = Field(
        default_factory=StartupModel, description="How the startup probe's budget is computed."
    )
