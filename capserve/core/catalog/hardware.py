"""GPUs and EC2 instance types, as data.

Every number here comes from EC2 ``DescribeInstanceTypes`` as snapshotted in moto 5.2.5
(``moto/ec2/resources/instance_types.json.gz``, fields ``GpuInfo``, ``VCpuInfo``, ``MemoryInfo``,
``InstanceStorageInfo``, ``NetworkInfo.NetworkCards``), cross-checked with
AWS's and NVIDIA's published sizes (docs/aws-capacity.md §3). The tasks layer can refresh them from the real API
at run time; the planner only needs what is here.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from pydantic import BaseModel, ConfigDict, Field

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

    @property
    def efa_card_indices(self) -> tuple[int, ...]:
        """Network cards that take an EFA interface (on p6-b300 card 0 is ENA-only)."""
        return tuple(card.index for card in self.network_cards if card.efa)


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
        # 275,040 MiB = 288 GB = 268.6 GiB (NVIDIA: 288 GB HBM3e per GPU; docs/aws-capacity.md §3.1).
        "B300": GpuType(name="B300", hbm_bytes=275_040 * _MIB, architecture="Blackwell Ultra (sm_103)"),
        # 183,359 MiB = 179 GiB; AWS markets p6-b200 as 1,440 GB HBM3e (8 x 180 GB).
        "B200": GpuType(name="B200", hbm_bytes=183_359 * _MIB, architecture="Blackwell (sm_100)"),
        # 144,384 MiB = 141 GiB (NVIDIA: 141 GB; docs/aws-capacity.md §3.2).
        "H200": GpuType(name="H200", hbm_bytes=144_384 * _MIB, architecture="Hopper (sm_90)"),
        # 81,920 MiB = 80 GiB.
        "H100": GpuType(name="H100", hbm_bytes=81_920 * _MIB, architecture="Hopper (sm_90)"),
    }
)

_NVME_8X3800 = 8 * 3800 * _GB  # InstanceStorageInfo: 8 x 3,800 GB SSD on all five types below.

INSTANCE_TYPES: Mapping[str, InstanceType] = MappingProxyType(
    {
        "p6-b300.48xlarge": InstanceType(
            name="p6-b300.48xlarge",
            gpu=GPUS["B300"],
            gpus_per_node=8,
            vcpus=192,
            memory_bytes=4096 * _GIB,
            local_nvme_bytes=_NVME_8X3800,
            # 17 cards: card 0 is ENA-only (350 Gbps), EFA on 1-16 at 400 Gbps (docs/aws-capacity.md §3.1;
            # launches asking for EFA on card 0 fail: aws-parallelcluster #7143).
            network_cards=_cards(17, 400.0, ena_only=(0,), ena_only_gbps=350.0),
        ),
        "p6-b200.48xlarge": InstanceType(
            name="p6-b200.48xlarge",
            gpu=GPUS["B200"],
            gpus_per_node=8,
            vcpus=192,
            memory_bytes=2048 * _GIB,
            local_nvme_bytes=_NVME_8X3800,
            network_cards=_cards(8, 400.0 / 2),  # 8 x 200 Gbps EFA = 3,200 Gbps
        ),
        "p5en.48xlarge": InstanceType(
            name="p5en.48xlarge",
            gpu=GPUS["H200"],
            gpus_per_node=8,
            vcpus=192,
            memory_bytes=2048 * _GIB,
            local_nvme_bytes=_NVME_8X3800,
            network_cards=_cards(16, 200.0),  # 16 x 200 Gbps EFA = 3,200 Gbps
        ),
        "p5e.48xlarge": InstanceType(
            name="p5e.48xlarge",
            gpu=GPUS["H200"],
            gpus_per_node=8,
            vcpus=192,
            memory_bytes=2048 * _GIB,
            local_nvme_bytes=_NVME_8X3800,
            network_cards=_cards(32, 100.0),  # 32 x 100 Gbps EFA = 3,200 Gbps
        ),
        "p5.48xlarge": InstanceType(
            name="p5.48xlarge",
            gpu=GPUS["H100"],
            gpus_per_node=8,
            vcpus=192,
            memory_bytes=2048 * _GIB,
            local_nvme_bytes=_NVME_8X3800,
            network_cards=_cards(32, 100.0),
        ),
    }
)
