"""One time model of a Capacity Block, phase by phase (docs/timeline.md).

A block is paid from its start to its end; AWS terminates its instances 30 minutes before the end, and
the campaign drains a little earlier (``teardown.drain_before_end_minutes``, ``capserve.core.drain``). What the
block buys is the serving time between the endpoint passing its gate and the drain point; every phase before
that is paid and lost. This module says how long each phase is expected to take for a plan (instance type,
nodes, bytes per node, the compile shape, where the weights are read from), cold (empty compile caches) and warm
(caches restored), at the central figures and at the fast and slow end of their ranges, and what utilisation
(serving ÷ paid) that leaves on a block of N hours.

The phases and the figure each rests on (every figure is a bounded field of ``TimeFigures``, its range in
``FIGURE_RANGES``, its public source in docs/timeline.md):

- before the block (bought time is not spent on them): the EKS control plane, the system node group,
  the cluster add-ons, and the Hub → S3 staging of the checkpoint;
- in the block: the scale-up of the node group made at size 0 before it (boot and join); the S3 → node copy
  (node bytes ÷ the slowest of S3's per-instance rate, the network and the NVMe array's writes; none from FSx
  or S3) with the image pull beside it (only what the pull takes beyond the copy counts); vLLM's start:
  process start, weight load (node bytes ÷ the read rate of where the weights are), compile/JIT/autotune and
  CUDA-graph capture (functions of the compile shape: the architecture and the layout, not the bytes), the
  engine's profiling run; and the gate before traffic (smoke and quality within their budget).

The measured fact behind the load phase: on one H200 host safetensors, fastsafetensors (no GDS) and
instanttensor all loaded at the disk's own rate while host → GPU copies ran at 55 GB/s, so the storage
decides the load time, not the loader; the load rate is the storage's read rate, capped by host → GPU.

Pure: no SDK, no I/O.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from capserve.core.catalog import get_instance_type
from capserve.core.catalog.hardware import InstanceType
from capserve.core.catalog.models import ModelEntry
from capserve.core.drain import AWS_TERMINATION_BEFORE_END_MINUTES, DRAIN_BEFORE_END_MINUTES
from capserve.core.errors import UnknownCatalogEntryError
from capserve.core.weights.settings import WeightsSettings
from capserve.core.weights.staging_job import staging_copy_bytes_per_s

Storage = Literal["nvme", "fsx", "s3"]
STORAGES: tuple[Storage, ...] = ("nvme", "fsx", "s3")

GB = 1e9
_HOUR_S = 3600.0
AWS_TERMINATION_BEFORE_END_S = AWS_TERMINATION_BEFORE_END_MINUTES * 60.0


class TimeFigures(BaseModel):
    """Every figure of the time model, bounded; docs/timeline.md gives each one's source, and ``FIGURE_RANGES``
    the fast and slow end the evidence allows (``at_end``)."""

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
        900.0,
        ge=0,
        le=6 * _HOUR_S,
        description="The block's node group (made at size 0 before the block) scaled up → instances booted → "
        "every GPU allocatable in Kubernetes.",
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
    s3_get_bytes_per_s: float = Field(
        8 * GB,
        gt=0,
        le=1e12,
        description="What one instance reads from S3 with many parallel ranged GETs (bytes/s): the S3 side of the "
        "S3 → node copy, which runs at the slowest of this, the network and the NVMe array's writes.",
    )
    storage_rate_factor: float = Field(
        1.0,
        gt=0,
        le=10,
        description="Multiplies the catalog's NVMe array rates (an inference: AWS publishes none), for the range.",
    )
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
        120.0, ge=0, le=_HOUR_S, description="vLLM process start, CUDA init, P2P check, distributed (NCCL) setup."
    )
    compile_s_per_layer_cold: float = Field(
        1.5, ge=0, le=600, description="Dynamo tracing and Inductor compilation per decoder layer, empty caches."
    )
    kernel_jit_s_per_layer_kind: float = Field(
        60.0,
        ge=0,
        le=3600,
        description="Kernel JIT and Triton autotune per distinct kind of layer (attention × dense/MoE), empty caches.",
    )
    compile_s_per_layer_warm: float = Field(
        0.45, ge=0, le=600, description="Loading the cached compiled graphs per decoder layer (warm caches)."
    )
    flashinfer_moe_autotune_s: float = Field(
        946.0,
        ge=0,
        le=6 * _HOUR_S,
        description="FlashInfer's MoE autotune on a cold start, when on (vLLM's default; the K3 recipe turns it off).",
    )
    engine_profile_s: float = Field(
        30.0, ge=0, le=_HOUR_S, description="Memory profiling run and KV-cache allocation before capture."
    )
    graph_capture_s_per_layer_size: float = Field(
        0.010, ge=0, le=10, description="CUDA-graph capture per decoder layer per captured batch size per pass."
    )
    graph_capture_passes: int = Field(
        2, ge=1, le=4, description="Capture passes: FULL_AND_PIECEWISE captures piecewise graphs and full decode ones."
    )
    gate_s: float = Field(
        600.0, ge=0, le=24 * _HOUR_S, description="The gate before traffic: smoke and quality within their budget."
    )

    @property
    def fsx_bytes_per_s(self) -> float:
        """The FSx file system's throughput (MB/s/TiB × TiB), shared by every node reading it."""
        return self.fsx_mb_s_per_tib * 1e6 * self.fsx_storage_tib

    def at_end(self, end: End) -> TimeFigures:
        """These figures with every ranged one at the fast or the slow end the evidence allows (docs/timeline.md)."""
        return self.model_copy(update={name: pair[0 if end == "fast" else 1] for name, pair in FIGURE_RANGES.items()})


End = Literal["fast", "slow"]

# The fast and the slow end of each figure the evidence leaves open, (fast, slow): for a rate the fast end is the
# higher. docs/timeline.md §1 gives each range's source; a figure absent here is not ranged (a product setting or
# a fixed size).
FIGURE_RANGES: dict[str, tuple[float, float]] = {
    "launch_and_join_s": (480.0, 1800.0),
    "registry_bytes_per_s": (0.4 * GB, 0.1 * GB),
    "s3_get_bytes_per_s": (12.5 * GB, 5 * GB),
    "storage_rate_factor": (1.3, 0.6),
    "process_start_s": (60.0, 180.0),
    "compile_s_per_layer_cold": (0.6, 2.0),
    "kernel_jit_s_per_layer_kind": (0.0, 150.0),
    "compile_s_per_layer_warm": (0.25, 0.6),
    "flashinfer_moe_autotune_s": (89.0, 2400.0),
    "engine_profile_s": (10.0, 210.0),
    "graph_capture_s_per_layer_size": (0.005, 0.012),
}

MEASURED_START = "vLLM start (measured)"

# The evidence tag of each phase's figures (docs/timeline.md §1 has the links).
PHASE_SOURCES: dict[str, str] = {
    "EKS control plane": "[doc] containers-roadmap#1227",
    "system nodes": "[inf]",
    "add-ons": "[inf]",
    "Hub → S3 staging": "[inf]",
    "EC2 launch and node join": "[doc] EKS CB guide + [inf] boot/join",
    "HyperPod deep health checks": "[doc] + [inf]",
    "image pull": "[3p] vllm#27154 + [inf] rate",
    "S3 → node staging": "[3p] s3-benchmark + [inf] NVMe",
    "vLLM process start": "[3p] vllm#19824",
    "weight load": "[measured] + [inf] NVMe",
    "compile/autotune": "[3p] vllm#26511 #19824 #54794",
    "engine profile": "[3p] vllm#20264 #44881",
    "CUDA-graph capture": "[src] vLLM sizes + [3p] vllm#19824",
    "gate (smoke + quality)": "[spec] evaluation.gate_budget_minutes",
    MEASURED_START: "[measured] start history",
}


class CompileShape(BaseModel):
    """What vLLM's compile, kernel JIT and CUDA-graph capture depend on: the model's architecture and the serving
    layout, not its weight bytes (docs/timeline.md §4). The defaults stand for a model of unknown architecture."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    layers: int = Field(80, ge=1, le=10_000, description="Decoder layers each rank traces and compiles.")
    layer_kinds: int = Field(
        1, ge=1, le=64, description="Distinct kinds of layer (attention kind × dense or MoE MLP): each JITs kernels."
    )
    capture_sizes: int = Field(
        51, ge=0, le=1024, description="Batch sizes vLLM captures CUDA graphs for (its default list for the engine)."
    )
    flashinfer_moe_autotune: bool = Field(
        False, description="FlashInfer's MoE autotune runs at a cold start (MoE on Blackwell, not turned off)."
    )


def cudagraph_capture_sizes(max_num_seqs: int) -> int:
    """How many batch sizes vLLM captures by default: 1, 2, 4, then multiples of 8 below 256, then multiples of 16,
    up to min(2 × max_num_seqs, 512) (``vllm/config/vllm.py``, ``set_cudagraph_sizes``)."""
    largest = min(2 * max_num_seqs, 512)
    sizes = [1, 2, 4, *range(8, 256, 8), *range(256, largest + 1, 16)]
    return sum(1 for size in sizes if size <= largest)


def compile_shape(
    model: ModelEntry, *, max_num_seqs: int, gpu_family: str, autotune_off: bool
) -> CompileShape:
    """The shape of ``model`` served with ``max_num_seqs`` sequences per engine on a GPU of ``gpu_family``;
    ``autotune_off``: the engine's arguments carry ``--no-enable-flashinfer-autotune`` (the K3 recipe does)."""
    moe = set(model.moe_layers)
    kinds = {(kind, index in moe) for index, kind in enumerate(model.layers)}
    return CompileShape(
        layers=model.num_layers,
        layer_kinds=len(kinds),
        capture_sizes=cudagraph_capture_sizes(max_num_seqs),
        flashinfer_moe_autotune=bool(moe) and gpu_family == "blackwell" and not autotune_off,
    )


class MeasuredStart(BaseModel):
    """vLLM's process start → listening as a rollout of the same shape measured it (docs/timeline.md §7.3)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seconds: float = Field(ge=0, le=7 * 24 * _HOUR_S, description="The measured start.")
    basis: str = Field(min_length=1, max_length=300, description="Which start it was (campaign, when).")


class BlockPlan(BaseModel):
    """What the time model needs of a plan: the instance, how many nodes, the bytes, the compile shape, and where
    the weights are read."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    instance_type: str = Field(min_length=1, max_length=64, description="EC2 instance type of the GPU nodes.")
    nodes: int = Field(ge=1, le=4096, description="GPU nodes (all start in parallel).")
    model_bytes: int = Field(ge=0, description="Bytes of the whole checkpoint (what the weights stage brings to S3).")
    node_bytes: int = Field(ge=0, description="Bytes the fullest node stages and loads.")
    shape: CompileShape = Field(description="What compile and graph capture depend on (architecture and layout).")
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

    @property
    def source(self) -> str:
        """The evidence tag of the figures behind it (docs/timeline.md §1)."""
        return PHASE_SOURCES.get(self.name, "[inf]")


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
        """Block start → endpoint through its gate and serving."""
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

    def seconds_short_of(self, target: float) -> float:
        """How much longer than the target allows the block's lost time is (0 when it meets the target)."""
        return max(target * self.paid_s - self.serving_s, 0.0)

    def largest_in_block(self) -> Phase:
        """The in-block phase that takes longest: what holds a missed target back most."""
        return max((p for p in self.phases if not p.before_block), key=lambda p: p.seconds)

    def to_json(self) -> dict[str, Any]:
        return {
            "warm": self.warm,
            "storage": self.plan.storage,
            "block_hours": self.block_hours,
            "phases": [{**p.model_dump(mode="json"), "source": p.source} for p in self.phases],
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
        read = rate * figures.storage_rate_factor if rate is not None else figures.unknown_disk_read_bytes_per_s
    elif storage == "fsx":
        read = min(figures.fsx_bytes_per_s / nodes, network)
    else:
        read = min(figures.s3_streaming_bytes_per_s, network)
    return min(read, figures.host_to_gpu_bytes_per_s)


def compile_s(shape: CompileShape, *, warm: bool, figures: TimeFigures | None = None) -> float:
    """torch.compile, kernel JIT and autotune: per layer traced, per kind of layer JIT'd, plus FlashInfer's MoE
    autotune when it runs; warm, the cached graphs are loaded per layer and the JIT and autotune caches hit."""
    f = figures or TimeFigures()
    if warm:
        return shape.layers * f.compile_s_per_layer_warm
    autotune = f.flashinfer_moe_autotune_s if shape.flashinfer_moe_autotune else 0.0
    return shape.layers * f.compile_s_per_layer_cold + shape.layer_kinds * f.kernel_jit_s_per_layer_kind + autotune


def graph_capture_s(shape: CompileShape, figures: TimeFigures | None = None) -> float:
    """CUDA-graph capture: every captured batch size runs every layer, once per pass; vLLM keeps no cache of the
    graphs, so a warm start captures them again (docs/serving.md §4)."""
    f = figures or TimeFigures()
    return shape.layers * shape.capture_sizes * f.graph_capture_passes * f.graph_capture_s_per_layer_size


def vllm_start_phases(
    shape: CompileShape, node_bytes: int, *, warm: bool, read_bytes_per_s: float, figures: TimeFigures | None = None
) -> list[Phase]:
    """vLLM's start, from process start to listening: start, weight load, compile, profile, graph capture."""
    f = figures or TimeFigures()
    autotune = " + FlashInfer MoE autotune" if shape.flashinfer_moe_autotune and not warm else ""
    compile_basis = (
        f"{shape.layers} layers × {f.compile_s_per_layer_warm:g} s (cached)"
        if warm
        else f"{shape.layers} layers × {f.compile_s_per_layer_cold:g} s + {shape.layer_kinds} kinds × "
        f"{f.kernel_jit_s_per_layer_kind:g} s JIT{autotune}"
    )
    return [
        Phase(name="vLLM process start", seconds=f.process_start_s, before_block=False, basis="fixed"),
        Phase(
            name="weight load",
            seconds=node_bytes / read_bytes_per_s,
            before_block=False,
            basis=f"{node_bytes / GB:,.1f} GB ÷ {read_bytes_per_s / GB:,.2f} GB/s",
        ),
        Phase(name="compile/autotune", seconds=compile_s(shape, warm=warm, figures=f), before_block=False,
              basis=compile_basis),
        Phase(name="engine profile", seconds=f.engine_profile_s, before_block=False, basis="fixed"),
        Phase(
            name="CUDA-graph capture",
            seconds=graph_capture_s(shape, f),
            before_block=False,
            basis=f"{shape.layers} layers × {shape.capture_sizes} sizes × {f.graph_capture_passes} passes × "
            f"{f.graph_capture_s_per_layer_size * 1000:g} ms",
        ),
    ]


def vllm_start_s(
    shape: CompileShape, node_bytes: int, *, warm: bool, read_bytes_per_s: float, figures: TimeFigures | None = None
) -> float:
    """Seconds from vLLM's process start to listening (the startup probe's budget is a multiple of this)."""
    phases = vllm_start_phases(shape, node_bytes, warm=warm, read_bytes_per_s=read_bytes_per_s, figures=figures)
    return sum(p.seconds for p in phases)


def s3_to_node_bytes_per_s(instance_type: str | None, figures: TimeFigures | None = None) -> float:
    """The S3 → node copy's rate onto one node: the slowest of what the instance reads from S3 with parallel
    ranged GETs, what the staging Job's copy tool carries at its default tuning, the instance's network and its
    NVMe array's writes."""
    f = figures or TimeFigures()
    rate = min(f.s3_get_bytes_per_s, staging_copy_bytes_per_s(WeightsSettings()))
    instance = _instance(instance_type)
    if instance is not None:
        rate = min(rate, instance.network_bandwidth_gbps * 1e9 / 8)
        if instance.nvme_write_bytes_per_s is not None:
            rate = min(rate, instance.nvme_write_bytes_per_s * f.storage_rate_factor)
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


def _copy_and_pull(plan: BlockPlan, f: TimeFigures) -> list[Phase]:
    """The S3 → node copy, and the image pull, which runs beside it (bring-up pre-pulls the image while the
    weights are copied): the pull costs the block only what it takes beyond the copy."""
    pull = 0.0 if plan.image_cached else f.image_bytes / f.registry_bytes_per_s
    if plan.storage == "nvme":
        rate = s3_to_node_bytes_per_s(plan.instance_type, f)
        copy = plan.node_bytes / rate
        copy_basis = f"{plan.node_bytes / GB:,.1f} GB ÷ {rate / GB:,.2f} GB/s"
    else:
        copy, copy_basis = 0.0, f"none: read from {plan.storage}"
    if plan.image_cached:
        pull_basis = "cached on the node"
    else:
        pull_basis = f"{f.image_bytes / GB:,.0f} GB ÷ {f.registry_bytes_per_s / GB:,.2f} GB/s = {pull / 60:,.1f} min"
        pull_basis += f", beside the {copy / 60:,.1f}-min copy" if copy > 0 else ""
    return [
        Phase(name="image pull", seconds=max(pull - copy, 0.0), before_block=False, basis=pull_basis),
        Phase(name="S3 → node staging", seconds=copy, before_block=False, basis=copy_basis),
    ]


def predict_block(
    plan: BlockPlan,
    *,
    block_hours: float,
    warm: bool,
    drain_before_end_minutes: int = DRAIN_BEFORE_END_MINUTES,
    gate_s: float | None = None,
    measured_start: MeasuredStart | None = None,
    figures: TimeFigures | None = None,
) -> BlockTimeline:
    """The predicted timeline of a block of ``block_hours`` for ``plan``, phase by phase. ``gate_s``: the spec's
    gate budget (``evaluation.gate_budget_minutes``), else the figures' default; ``measured_start``: a start of
    the same shape, cold or warm as this block, measured by an earlier rollout: it wins over the model's phases."""
    f = figures or TimeFigures()
    if drain_before_end_minutes * 60 < AWS_TERMINATION_BEFORE_END_S:
        raise ValueError("the drain point must come at or before AWS's termination, 30 minutes before the end")
    read = weight_read_bytes_per_s(plan.instance_type, plan.storage, nodes=plan.nodes, figures=f)
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
        Phase(
            name="EC2 launch and node join",
            seconds=f.launch_and_join_s,
            before_block=False,
            basis="scale-up of the node group made at size 0 before the block: boot and join",
        ),
        *(
            [Phase(name="HyperPod deep health checks", seconds=f.deep_health_checks_s, before_block=False,
                   basis="fixed, unmeasured")]
            if plan.deep_health_checks
            else []
        ),
        *_copy_and_pull(plan, f),
        *(
            vllm_start_phases(plan.shape, plan.node_bytes, warm=warm, read_bytes_per_s=read, figures=f)
            if measured_start is None
            else [Phase(name=MEASURED_START, seconds=measured_start.seconds, before_block=False,
                        basis=measured_start.basis)]
        ),
        Phase(
            name="gate (smoke + quality)",
            seconds=f.gate_s if gate_s is None else gate_s,
            before_block=False,
            basis="its budget; the load profile runs after the switch",
        ),
    ]
    return BlockTimeline(
        plan=plan,
        warm=warm,
        block_hours=block_hours,
        drain_before_end_s=drain_before_end_minutes * 60.0,
        phases=tuple(phases),
    )


def predict_range(plan: BlockPlan, *, figures: TimeFigures | None = None, **kwargs: Any) -> dict[End, BlockTimeline]:
    """The same block at the fast and the slow end of every ranged figure (``FIGURE_RANGES``)."""
    f = figures or TimeFigures()
    return {end: predict_block(plan, figures=f.at_end(end), **kwargs) for end in ("fast", "slow")}
