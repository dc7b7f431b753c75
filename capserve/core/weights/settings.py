"""Knobs of the weights stage: parallelism, retries, sizes, timeouts. Bounds say what is sane."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from capserve.core.cluster.nvme import NVME_MOUNTS, RAID0_MOUNT, nvme_mount

FIVE_GIB = 5 * 1024**3
# Anything the nodes keep on local NVMe lives under the NVMe mount of the cluster kind (EKS: nodeadm's
# RAID0 array; HyperPod: /opt/dlami/nvme, docs/hyperpod.md §3): elsewhere it would land on a small
# EBS volume, which a checkpoint overflows (docs/serving.md §5.3).
_MOUNTS = "|".join(sorted({mount.replace(".", r"\.") for mount in NVME_MOUNTS.values()}))
NVME_PATH = rf"^({_MOUNTS})(/[A-Za-z0-9._-]+)+$"


class WeightsSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    fetch_parallelism: int = Field(
        4,
        ge=1,
        le=64,
        description="Files downloaded (and hashed) at once. Hashing runs ~0.9 GB/s per core (docs/weights.md §6).",
    )
    fetch_retries: int = Field(
        3, ge=0, le=10, description="Prefect retries of one file's fetch after a transient error."
    )
    fetch_retry_delay_seconds: float = Field(
        2.0, ge=0, le=600, description="Base delay between fetch retries (jittered)."
    )
    fetch_retry_max_delay_seconds: float = Field(
        60.0, ge=0, le=3600, description="Longest delay between fetch retries (each is 4× the one before)."
    )
    hub_timeout_seconds: float = Field(30.0, gt=0, le=600, description="Timeout of one Hub metadata request.")
    etag_timeout_seconds: float = Field(10.0, gt=0, le=600, description="Timeout of the HEAD before each download.")
    hash_chunk_bytes: int = Field(8 << 20, ge=64 << 10, le=256 << 20, description="Read size while hashing.")
    max_output_file_bytes: int = Field(
        FIVE_GIB,
        ge=1 << 20,
        le=FIVE_GIB,
        description="Largest re-sharded file; 5 GiB is S3's single-request PUT limit (S3 user guide, upload objects).",
    )
    allow_reshard: bool = Field(True, description="Re-shard experts per rank when that saves bytes on nodes.")
    publish_parallelism: int = Field(4, ge=1, le=64, description="Files uploaded to S3 at once.")
    staging_image: str = Field(
        "public.ecr.aws/aws-cli/aws-cli:2.27.50",
        min_length=1,
        max_length=255,
        description="Image of the per-node staging Job: needs the aws CLI, sh, xargs and sha256sum.",
    )
    staging_tool_image: str = Field(
        "public.ecr.aws/lambda/python:3.12",
        min_length=1,
        max_length=255,
        description="Image of the per-node staging Job: needs python3 and boto3 (AWS's Lambda Python base image "
        "carries both, docs/weights.md §7).",
    )
    staging_parallelism: int = Field(
        16,
        ge=1,
        le=128,
        description="Files one staging Job copies at once: each file's sha256 runs in order on one core "
        "(~0.9 GB/s, docs/weights.md §6), so 16 files keep up with a 10 GB/s NVMe array.",
    )
    staging_requests: int = Field(
        128,
        ge=1,
        le=1024,
        description="Ranged GETs one staging Job keeps in flight: one per ~88 MB/s wanted (AWS S3 performance "
        "guidance, docs/weights.md §7); 128 cover a 10 GB/s array.",
    )
    staging_part_bytes: int = Field(
        16 << 20, ge=1 << 20, le=256 << 20, description="Bytes of one ranged GET (AWS advises 8–16 MB)."
    )
    staging_processes: int = Field(
        8, ge=1, le=64, description="Processes of the staging copy: one Python process's lock bounds its rate."
    )
    staging_deadline_seconds: int = Field(
        4 * 3600, ge=60, le=48 * 3600, description="activeDeadlineSeconds of a staging Job."
    )
    staging_backoff_limit: int = Field(3, ge=0, le=20, description="Pod retries of a staging Job.")
    staging_part_attempts: int = Field(
        5, ge=1, le=20, description="Attempts of one part by the staging copy, beyond botocore's retries of a request."
    )
    nvme_path: str = Field(
        f"{RAID0_MOUNT}/capserve/weights",
        pattern=NVME_PATH,
        max_length=255,
        description=f"Host directory on each node's local NVMe (the RAID0 array nodeadm mounts at {RAID0_MOUNT}) "
        "where weights are staged; the vLLM pods mount the same directory. On HyperPod the same path under "
        "/opt/dlami/nvme is used (for_cluster).",
    )
    compile_cache_path: str = Field(
        f"{RAID0_MOUNT}/capserve/cache",
        pattern=NVME_PATH,
        max_length=255,
        description="Host directory on each node's NVMe for vLLM's compile, JIT and autotune caches.",
    )
    node_storage_margin_bytes: int = Field(
        128 * 1024**3,
        ge=0,
        le=16 * 1024**4,
        description="Room each node's NVMe must have beyond its share of the weights: compile caches "
        "(torch.compile, Triton/FlashInfer/DeepGEMM JIT, CUDA cache) and container images, which RAID0 also holds.",
    )
    fsx_claim: str = Field(
        "capserve-fsx",
        pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$",
        description="PersistentVolumeClaim of the FSx for Lustre file system (node_target 'fsx').",
    )

    def for_cluster(self, kind: str) -> WeightsSettings:
        """These settings with the node paths on ``kind``'s NVMe mount ("eks" or "hyperpod").

        A path under another kind's mount is moved to this kind's (the same directory below the mount):
        /mnt/k8s-disks/0 does not exist on a HyperPod node, nor /opt/dlami/nvme on an EKS node.
        """
        mount = nvme_mount(kind)
        moved = {}
        for field in ("nvme_path", "compile_cache_path"):
            path: str = getattr(self, field)
            for other in NVME_MOUNTS.values():
                if other != mount and (path == other or path.startswith(other + "/")):
                    moved[field] = mount + path[len(other) :]
        return self.model_copy(update=moved) if moved else self
