"""GPUs and EC2 instance types, as data.

Every number here comes from EC2 ``DescribeInstanceTypes`` as snapshotted in moto 5.2.5
(``moto/ec2/resources/instance_types.json.gz``, fields ``GpuInfo``, ``VCpuInfo``, ``MemoryInfo``,
``InstanceStorageInfo``, ``NetworkInfo.NetworkCards``); a test checks each against that snapshot
(docs/planner.md §10). The tasks layer can refresh them from the real API at run time; the planner
only needs what is here.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

GpuFamily = Literal["blackwell", "hopper", "ada", "ampere", "older"]

_MIB = 2**20
_GIB = 2**30
_GB = 10**9


class GpuType(BaseModel):
    """One GPU model and the memory the planner may fill."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, max_length=32, description="GPU name as EC2 reports it, e.g. 'B300'.")
    hbm_bytes: int = Field(
        gt=0,
        le=2**40,
        description="HBM per GPU in bytes, from DescribeInstanceTypes GpuInfo.Gpus[].MemoryInfo.SizeInMiB.",
    )
    architecture: str = Field(min_length=1, max_length=32, description="NVIDIA architecture / SM, for humans.")
    sm: int = Field(
        ge=50,
        le=200,
        description="CUDA compute capability as one integer (sm_90 -> 90, sm_103 -> 103): decides which kernels "
        "the serving engine has for this GPU (docs/planner.md, 'Kernel support').",
    )

    @property
    def family(self) -> GpuFamily:
        """The architecture family the planner keys its defaults on (docs/planner.md)."""
        if self.sm >= 100:
            return "blackwell"
        if self.sm >= 90:
            return "hopper"
        if self.sm == 89:
            return "ada"
        if self.sm >= 80:
            return "ampere"
        return "older"


class NetworkCard(BaseModel):
    """One network card of an instance type (NetworkInfo.NetworkCards[])."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    index: int = Field(ge=0, le=63, description="NetworkCardIndex.")
    efa: bool = Field(description="True when the card accepts an 'efa' or 'efa-only' interface.")
    bandwidth_gbps: float = Field(gt=0, le=10_000, description="Baseline bandwidth of the card in Gbit/s.")


class InstanceType(BaseModel):
    """An EC2 GPU instance type: what one node brings."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, max_length=64, description="EC2 instance type, e.g. 'p6-b300.48xlarge'.")
    gpu: GpuType = Field(description="The GPU model fitted in this instance type.")
    gpus_per_node: int = Field(ge=1, le=64, description="GPUs per instance.")
    vcpus: int = Field(ge=1, le=4096, description="Default vCPUs.")
    memory_bytes: int = Field(gt=0, description="Host RAM in bytes.")
    local_nvme_bytes: int = Field(ge=0, description="Instance-store NVMe in bytes (sum over disks).")
    network_cards: tuple[NetworkCard, ...] = Field(
        min_length=1, max_length=64, description="Every network card, in index order."
    )
    nvme_read_bytes_per_s: float | None = Field(
        None,
        gt=0,
        le=1e12,
        description="Sequential read rate of the instance-store NVMe array (RAID0 of every disk), bytes/s. AWS "
        "publishes no sequential rate for these disks: the figure and its basis are in docs/timeline.md §2. "
        "None: unknown (the time model then uses one measured disk's rate).",
    )
    nvme_write_bytes_per_s: float | None = Field(
        None, gt=0, le=1e12, description="Sequential write rate of the same array, bytes/s (docs/timeline.md §2)."
    )

    @property
    def efa_card_indices(self) -> tuple[int, ...]:
        """Network cards that take an EFA interface (on p6-b300 card 0 is ENA-only)."""
        return tuple(card.index for card in self.network_cards if card.efa)

    @property
    def network_bandwidth_gbps(self) -> float:
        """The instance's network bandwidth: the sum of its cards' baseline bandwidths (DescribeInstanceTypes)."""
        return sum(card.bandwidth_gbps for card in self.network_cards)


def _cards(
    count: int, gbps: float, *, ena_only: tuple[int, ...] = (), ena_only_gbps: float = 0.0
) -> tuple[NetworkCard, ...]:
    return tuple(
        NetworkCard(index=i, efa=False, bandwidth_gbps=ena_only_gbps)
        if i in ena_only
        else NetworkCard(index=i, efa=True, bandwidth_gbps=gbps)
        for i in range(count)
    )


# SizeInMiB values from DescribeInstanceTypes. nvidia-smi reports slightly less on the H-series
# (e.g. 143,771 MiB on H200); the gpu_memory_utilization ceiling absorbs the difference.
GPUS: Mapping[str, GpuType] = MappingProxyType(
    {
        # 275,040 MiB = 288 GB = 268.6 GiB (NVIDIA's B300: 288 GB HBM3e per GPU).
        "B300": GpuType(name="B300", hbm_bytes=275_040 * _MIB, architecture="Blackwell Ultra (sm_103)", sm=103),
        # 183,359 MiB = 179 GiB; AWS markets p6-b200 as 1,440 GB HBM3e (8 x 180 GB).
        "B200": GpuType(name="B200", hbm_bytes=183_359 * _MIB, architecture="Blackwell (sm_100)", sm=100),
        # 144,384 MiB = 141 GiB (NVIDIA's H200: 141 GB).
        "H200": GpuType(name="H200", hbm_bytes=144_384 * _MIB, architecture="Hopper (sm_90)", sm=90),
        # 81,920 MiB = 80 GiB.
        "H100": GpuType(name="H100", hbm_bytes=81_920 * _MIB, architecture="Hopper (sm_90)", sm=90),
    }
)

_NVME_8X3800 = 8 * 3800 * _GB  # InstanceStorageInfo: 8 x 3,800 GB SSD on all five types below.
# Sequential rates of one instance-store NVMe disk of these types, an inference (AWS publishes none for
# them): docs/timeline.md §2 gives the basis. The array is a RAID0 of every disk, so its rate is the sum.
_DISK_READ = 2.5 * _GB
_DISK_WRITE = 1.25 * _GB



def _48xlarge(name: str, gpu: str, memory_gib: int, cards: tuple[NetworkCard, ...]) -> InstanceType:
    """A 48xlarge size: 8 GPUs, 192 vCPUs, 8 x 3,800 GB NVMe (DescribeInstanceTypes); every card at ``cards``."""
    return InstanceType(
        name=name,
        gpu=GPUS[gpu],
        gpus_per_node=8,
        vcpus=192,
        memory_bytes=memory_gib * _GIB,
        local_nvme_bytes=_NVME_8X3800,
        nvme_read_bytes_per_s=8 * _DISK_READ,
        nvme_write_bytes_per_s=8 * _DISK_WRITE,
        network_cards=cards,
    )


INSTANCE_TYPES: Mapping[str, InstanceType] = MappingProxyType(
    {
        # 17 cards: card 0 is ENA-only (350 Gbps), EFA on 1-16 at 400 Gbps (DescribeInstanceTypes;
        # launches asking for EFA on card 0 fail: aws-parallelcluster #7143).
        "p6-b300.48xlarge": _48xlarge(
            "p6-b300.48xlarge", "B300", 4096, _cards(17, 400.0, ena_only=(0,), ena_only_gbps=350.0)
        ),
        "p6-b200.48xlarge": _48xlarge("p6-b200.48xlarge", "B200", 2048, _cards(8, 400.0 / 2)),  # 8 x 200 Gbps EFA
        "p5en.48xlarge": _48xlarge("p5en.48xlarge", "H200", 2048, _cards(16, 200.0)),  # 16 x 200 Gbps EFA
        "p5e.48xlarge": _48xlarge("p5e.48xlarge", "H200", 2048, _cards(32, 100.0)),  # 32 x 100 Gbps EFA
        "p5.48xlarge": _48xlarge("p5.48xlarge", "H100", 2048, _cards(32, 100.0)),
        # The one smaller size AWS sells for the catalog's GPUs: 1 x H100, 16 vCPUs, 256 GiB RAM, one
        # 3,800 GB NVMe disk, one 100 Gbps card taking one EFA interface (DescribeInstanceTypes in moto
        # 5.2.5's snapshot; in botocore 1.43's EC2 InstanceType enum and SageMaker's ClusterInstanceType
        # and ReservedCapacityInstanceType). No single-GPU or smaller H200, B200 or B300 size exists in
        # either; whether Capacity Blocks offer p5.4xlarge could not be confirmed (docs/planner.md).
        "p5.4xlarge": InstanceType(
            name="p5.4xlarge",
            gpu=GPUS["H100"],
            gpus_per_node=1,
            vcpus=16,
            memory_bytes=256 * _GIB,
            local_nvme_bytes=3800 * _GB,
            nvme_read_bytes_per_s=_DISK_READ,
            nvme_write_bytes_per_s=_DISK_WRITE,
            network_cards=_cards(1, 100.0),
        ),
    }
)
