"""One time model of a Capacity Block, phase by phase (docs/timeline.md).

A block is paid from its start to its end; AWS terminates its instances 30 minutes before the end, and
the campaign drains earlier still (``teardown.drain_before_end_minutes``). What the block buys is the
serving time between the endpoint being ready and the drain point; every phase before that is paid and
lost. This module says how long each phase is expected to take for a plan (instance type, nodes, bytes
per node, where the weights are read from), cold (empty compile caches) and warm (caches restored), and
what utilisation (serving ÷ paid) that leaves on a block of N hours.

The phases and the figure each rests on (every figure is a bounded field of ``TimeFigures`` with its
public source in docs/timeline.md):

- before the block (bought time is not spent on them): the EKS control plane, the system node group,
  the cluster add-ons, and the Hub → S3 staging of the checkpoint;
- in the block: EC2 launch and node join; the vLLM image pull (image bytes ÷ registry rate, none when the
  node already holds the image); S3 → node staging (node bytes ÷ the slowest of the instance's network,
  its NVMe array's write rate and the staging job's streams; none when the weights are read from FSx or
  streamed from S3); vLLM's start: process start, weight load (node bytes ÷ the read rate of where the
  weights are), compile/JIT/autotune (per GB of the whole model, cold or warm), CUDA-graph capture; the
  evaluation.

The measured fact behind the load phase: on one H200 host safetensors, fastsafetensors (no GDS) and
instanttensor all loaded at the disk's own rate while host → GPU copies ran at 55 GB/s, so the storage
decides the load time, not the loader; the load rate is the storage's read rate, capped by host → GPU.

Pure: no SDK, no I/O.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from capserve.core.catalog import InstanceType, get_instance_type
from capserve.core.errors import UnknownCatalogEntryError

Storage = Literal["nvme", "fsx", "s3"]
STORAGES: tuple[Storage, ...] = ("nvme", "fsx", "s3")

GB = 1e9
_TIB = 2**40
_HOUR_S = 3600.0
# AWS terminates a Capacity Block's instances 30 minutes before its end (docs/aws-capacity.md).
AWS_TERMINATION_BEFORE_END_S = 30 * 60.0


class TimeFigures(BaseModel):
    """Every figure of the time model, bounded; docs/timeline.md gives each one's source."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Before the block: a cluster can be made before the block starts (only the GPU nodes need it).
    control_plane_s: float = Field(
        900.0, ge=0, le=6 * _HOUR_S, description="EKS CreateCluster → ACTIVE (10–15 min; AWS: averages 15)."
    )
    system_nodes_s: float = Field(
        300.0, ge=0, le=6 * _HOUR_S, description="System (CPU) node group → ACTIVE, after the control plane."
    )
    addons_s: float = Field(300.0, ge=0, le=6 * _HOUR_S, description="Cluster add-ons applied and ready.")
    hub_download_bytes_per_s: float = Field(
        0.5 * GB, gt=0, le=1e12, description="Hub → this host → S3 rate of the weights stage (bytes/s), unverified."
    )
    # In the block.
    launch_and_join_s: float = Field(
        1800.0,
        ge=0,
        le=6 * _HOUR_S,
        description="GPU node group on the active block → instances running → every GPU allocatable in Kubernetes.",
    )
    deep_health_checks_s: float = Field(
        3600.0,
        ge=0,
        le=6 * _HOUR_S,
        description="HyperPod's deep health checks (DCGM level 4, EFA, NCCL tests) before it hands a node over, "
        "on a layout across nodes only; unmeasured, 30 min to 2 h.",
    )
    image_bytes: float = Field(
        12 * GB, ge=0, le=1e12, description="Bytes of the vLLM image a node pulls (vllm/vllm-openai is ~12 GB)."
    )
    registry_bytes_per_s: float = Field(
        0.2 * GB, gt=0, le=1e11, description="Pull and unpack rate of one node from the registry (bytes/s)."
    )
    s3_stream_bytes_per_s: float = Field(
        0.25 * GB, gt=0, le=1e11, description="Rate of one `aws s3 cp` of one file in the staging job (bytes/s)."
    )
    hash_bytes_per_s: float = Field(
        0.92 * GB, gt=0, le=1e11, description="sha256 on one core (bytes/s): the staging job hashes each file."
    )
    staging_streams: int = Field(8, ge=1, le=128, description="Files one staging job copies at once.")
    fsx_mb_s_per_tib: float = Field(
        1000.0, gt=0, le=10_000, description="FSx for Lustre PERSISTENT_2 throughput per TiB stored (MB/s/TiB)."
    )
    fsx_storage_tib: float = Field(
        9.6, gt=0, le=10_000, description="FSx file system size (TiB): its throughput scales with it."
    )
    s3_streaming_bytes_per_s: float = Field(
        2 * GB, gt=0, le=1e12, description="Rate of loading straight from S3 (a streaming loader), per node."
    )
    unknown_disk_read_bytes_per_s: float = Field(
        1.43 * GB, gt=0, le=1e12, description="Read rate used when the catalog has no NVMe rate (one measured disk)."
    )
    host_to_gpu_bytes_per_s: float = Field(
        55 * GB, gt=0, le=1e13, description="Host → GPU copy rate measured on one H200 host: caps every load."
    )
    process_start_s: float = Field(
        60.0, ge=0, le=_HOUR_S, description="vLLM process start and distributed (NCCL/EFA) setup."
    )
    graph_capture_cold_s: float = Field(
        120.0, ge=0, le=_HOUR_S, description="CUDA-graph capture and warm-up, cold caches."
    )
    graph_capture_warm_s: float = Field(60.0, ge=0, le=_HOUR_S, description="The same with warm caches.")
    compile_s_per_gb_cold: float = Field(
        2.72, ge=0, le=60, description="Seconds of torch.compile/JIT/autotune per GB of the whole model, cold."
    )
    compile_s_per_gb_warm: float = Field(
        0.3, ge=0, le=60, description="Seconds per GB of the whole model to load cached compile artifacts."
    )
    evaluation_s: float = Field(1800.0, ge=0, le=24 * _HOUR_S, description="Smoke, quality and load profiles.")

    @property
    def fsx_bytes_per_s(self) -> float:
        """The FSx file system's throughput (MB/s/TiB × TiB), shared by every node reading it."""
        return self.fsx_mb_s_per_tib * 1e6 * self.fsx_storage_tib


class BlockPlan(BaseModel):
    """What the time model needs of a plan: the instance, how many nodes, the bytes, and where they are read."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    instance_type: str = Field(min_length=1, max_length=64, description="EC2 instance type of the GPU nodes.")
    nodes: int = Field(ge=1, le=4096, description="GPU nodes (all start in parallel).")
    model_bytes: int = Field(ge=0, description="Bytes of the whole checkpoint (the compile part).")
    node_bytes: int = Field(ge=0, description="Bytes the fullest node stages and loads.")
    storage: Storage = Field("nvme", description="Where vLLM reads the weights: node NVMe, FSx, or S3 directly.")
    image_cached: bool = Field(False, description="The nodes already hold the vLLM image (no pull).")
    deep_health_checks: bool = Field(
        False, description="HyperPod runs its deep health checks before handing the nodes over (a layout across nodes)."
    )


class Phase(BaseModel):
    """One phase of the timeline."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=64, description="What happens.")
    seconds: float = Field(ge=0, description="How long it is expected to take.")
    before_block: bool = Field(description="True when it can be done before the block starts (not paid GPU time).")
    basis: str = Field(max_length=300, description="How the figure is made (the rate or fixed time it rests on).")


class BlockTimeline(BaseModel):
    """The predicted timeline of one block for one plan, cold or warm, and the utilisation it leaves."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    plan: BlockPlan = Field(description="The plan modelled.")
    warm: bool = Field(description="Compile caches restored.")
    block_hours: float = Field(gt=0, description="Length of the block.")
    drain_before_end_s: float = Field(ge=AWS_TERMINATION_BEFORE_END_S, description="Drain point before the end.")
    phases: tuple[Phase, ...] = Field(description="Every phase, in order.")

    @property
    def before_block_s(self) -> float:
        return sum(p.seconds for p in self.phases if p.before_block)

    @property
    def to_ready_s(self) -> float:
        """Block start → endpoint evaluated and serving."""
        return sum(p.seconds for p in self.phases if not p.before_block)

    @property
    def paid_s(self) -> float:
        return self.block_hours * _HOUR_S

    @property
    def serving_s(self) -> float:
        """Serving time: from ready to the drain point (none when the block ends first)."""
        return max(self.paid_s - self.drain_before_end_s - self.to_ready_s, 0.0)

    @property
    def utilisation(self) -> float:
        """Serving ÷ paid."""
        return self.serving_s / self.paid_s

    def to_json(self) -> dict[str, Any]:
        return {
            "warm": self.warm,
            "storage": self.plan.storage,
            "block_hours": self.block_hours,
            "phases": [p.model_dump(mode="json") for p in self.phases],
            "before_block_s": round(self.before_block_s, 1),
            "to_ready_s": round(self.to_ready_s, 1),
            "drain_before_end_s": self.drain_before_end_s,
            "aws_termination_before_end_s": AWS_TERMINATION_BEFORE_END_S,
            "serving_s": round(self.serving_s, 1),
            "paid_s": self.paid_s,
            "utilisation": round(self.utilisation, 4),
        }


def _instance(instance_type: str | None) -> InstanceType | None:
    """The catalog entry, or None when not given or not in the catalog (the model then uses its fallbacks)."""
    if instance_type is None:
        return None
    try:
        return get_instance_type(instance_type)
    except UnknownCatalogEntryError:
        return None


def weight_read_bytes_per_s(
    instance_type: str | None, storage: Storage, *, nodes: int = 1, figures: TimeFigures | None = None
) -> float:
    """The rate one node reads its weights at: the storage's read rate, capped by host → GPU copies.

    NVMe: the catalog's array rate (one measured disk's rate when unknown). FSx: the file system's
    throughput shared by every node loading at once, capped by the node's network. S3: a streaming
    loader's rate, capped by the node's network.
    """
    figures = figures or TimeFigures()
    instance = _instance(instance_type)
    network = instance.network_bandwidth_gbps * 1e9 / 8 if instance is not None else float("inf")
    if storage == "nvme":
        rate = instance.nvme_read_bytes_per_s if instance is not None else None
        read = rate if rate is not None else figures.unknown_disk_read_bytes_per_s
    elif storage == "fsx":
        read = min(figures.fsx_bytes_per_s / nodes, network)
    else:
        read = min(figures.s3_streaming_bytes_per_s, network)
    return min(read, figures.host_to_gpu_bytes_per_s)


def vllm_start_phases(
    model_bytes: int, node_bytes: int, *, warm: bool, read_bytes_per_s: float, figures: TimeFigures | None = None
) -> list[Phase]:
    """vLLM's start, from process start to listening: start, weight load, compile, graph capture."""
    f = figures or TimeFigures()
    compile_rate = f.compile_s_per_gb_warm if warm else f.compile_s_per_gb_cold
    capture = f.graph_capture_warm_s if warm else f.graph_capture_cold_s
    return [
        Phase(name="vLLM process start", seconds=f.process_start_s, before_block=False, basis="fixed"),
        Phase(
            name="weight load",
            seconds=node_bytes / read_bytes_per_s,
            before_block=False,
            basis=f"{node_bytes / GB:,.1f} GB ÷ {read_bytes_per_s / GB:,.2f} GB/s",
        ),
        Phase(
            name="compile/autotune",
            seconds=model_bytes / GB * compile_rate,
            before_block=False,
            basis=f"{model_bytes / GB:,.1f} GB of model × {compile_rate} s/GB ({'warm cache' if warm else 'cold'})",
        ),
        Phase(name="CUDA-graph capture", seconds=capture, before_block=False, basis="fixed"),
    ]


def vllm_start_s(
    model_bytes: int, node_bytes: int, *, warm: bool, read_bytes_per_s: float, figures: TimeFigures | None = None
) -> float:
    """Seconds from vLLM's process start to listening (the startup probe's budget is a multiple of this)."""
    phases = vllm_start_phases(model_bytes, node_bytes, warm=warm, read_bytes_per_s=read_bytes_per_s, figures=figures)
    return sum(p.seconds for p in phases)


def s3_to_node_bytes_per_s(instance_type: str | None, figures: TimeFigures | None = None) -> float:
    """The staging job's rate onto one node: the slowest of its streams, the network and the NVMe array's writes.

    Each stream copies one file then hashes it, so one stream's rate is 1 ÷ (1/copy + 1/hash).
    """
    f = figures or TimeFigures()
    per_stream = 1 / (1 / f.s3_stream_bytes_per_s + 1 / f.hash_bytes_per_s)
    rate = per_stream * f.staging_streams
    instance = _instance(instance_type)
    if instance is not None:
        rate = min(rate, instance.network_bandwidth_gbps * 1e9 / 8)
        if instance.nvme_write_bytes_per_s is not None:
            rate = min(rate, instance.nvme_write_bytes_per_s)
    return rate


def s3_to_node_s(node_bytes: int, instance_type: str | None, figures: TimeFigures | None = None) -> float:
    """Seconds to copy one node's weights from S3 onto its NVMe (nodes copy in parallel)."""
    return node_bytes / s3_to_node_bytes_per_s(instance_type, figures)


def hub_to_s3_s(model_bytes: int, figures: TimeFigures | None = None) -> float:
    """Seconds for the weights stage to bring the checkpoint from the Hub into S3."""
    return model_bytes / (figures or TimeFigures()).hub_download_bytes_per_s


def node_join_s(*, deep_health_checks: bool, figures: TimeFigures | None = None) -> float:
    """From the GPU capacity's creation on the block to every GPU allocatable: launch and join, plus HyperPod's
    deep health checks when they run (they come before HyperPod hands the node to the cluster)."""
    f = figures or TimeFigures()
    return f.launch_and_join_s + (f.deep_health_checks_s if deep_health_checks else 0.0)


def predict_block(
    plan: BlockPlan,
    *,
    block_hours: float,
    warm: bool,
    drain_before_end_minutes: int = 45,
    evaluation_s: float | None = None,
    figures: TimeFigures | None = None,
) -> BlockTimeline:
    """The predicted timeline of a block of ``block_hours`` for ``plan``, phase by phase."""
    f = figures or TimeFigures()
    if drain_before_end_minutes * 60 < AWS_TERMINATION_BEFORE_END_S:
        raise ValueError("the drain point must come at or before AWS's termination, 30 minutes before the end")
    read = weight_read_bytes_per_s(plan.instance_type, plan.storage, nodes=plan.nodes, figures=f)
    pull_s = 0.0 if plan.image_cached else f.image_bytes / f.registry_bytes_per_s
    pull_basis = "cached on the node" if plan.image_cached else (
        f"{f.image_bytes / GB:,.0f} GB ÷ {f.registry_bytes_per_s / GB:,.2f} GB/s"
    )
    if plan.storage == "nvme":
        rate = s3_to_node_bytes_per_s(plan.instance_type, f)
        staging = Phase(
            name="S3 → node staging",
            seconds=plan.node_bytes / rate,
            before_block=False,
            basis=f"{plan.node_bytes / GB:,.1f} GB ÷ {rate / GB:,.2f} GB/s",
        )
    else:
        staging = Phase(
            name="S3 → node staging", seconds=0.0, before_block=False, basis=f"none: read from {plan.storage}"
        )
    phases = [
        Phase(name="EKS control plane", seconds=f.control_plane_s, before_block=True, basis="fixed"),
        Phase(name="system nodes", seconds=f.system_nodes_s, before_block=True, basis="fixed"),
        Phase(name="add-ons", seconds=f.addons_s, before_block=True, basis="fixed"),
        Phase(
            name="Hub → S3 staging",
            seconds=hub_to_s3_s(plan.model_bytes, f),
            before_block=True,
            basis=f"{plan.model_bytes / GB:,.1f} GB ÷ {f.hub_download_bytes_per_s / GB:,.2f} GB/s",
        ),
        Phase(name="EC2 launch and node join", seconds=f.launch_and_join_s, before_block=False, basis="fixed"),
        *(
            [Phase(name="HyperPod deep health checks", seconds=f.deep_health_checks_s, before_block=False,
                   basis="fixed, unmeasured")]
            if plan.deep_health_checks
            else []
        ),
        Phase(name="image pull", seconds=pull_s, before_block=False, basis=pull_basis),
        staging,
        *vllm_start_phases(plan.model_bytes, plan.node_bytes, warm=warm, read_bytes_per_s=read, figures=f),
        Phase(
            name="evaluation",
            seconds=f.evaluation_s if evaluation_s is None else evaluation_s,
            before_block=False,
            basis="fixed" if evaluation_s is None else "the spec's evaluation.timeout_s",
        ),
    ]
    return BlockTimeline(
        plan=plan,
        warm=warm,
        block_hours=block_hours,
        drain_before_end_s=drain_before_end_minutes * 60.0,
        phases=tuple(phases),
    )
