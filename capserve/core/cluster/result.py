"""What bring-up produced: the cluster, how many GPU nodes are ready, for the report and later stages."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from capserve.core.report import markdown_table


class ClusterResult(BaseModel):
    """The cluster the serving stage deploys to."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["eks", "hyperpod"] = Field(description="EKS managed node group, or HyperPod on EKS.")
    name: str = Field(min_length=1, max_length=100, description="EKS cluster name (HyperPod's orchestrator too).")
    region: str = Field(min_length=1, max_length=32, description="AWS region of the cluster.")
    endpoint: str = Field(min_length=1, max_length=2048, description="Kubernetes API server URL.")
    ca_data: str | None = Field(
        None, max_length=65536, description="The API server's CA bundle, base64 (public, not a secret)."
    )
    gpu_pool: str = Field(
        min_length=1, max_length=100, description="The GPU node group (EKS) or HyperPod cluster/instance group."
    )
    nodes_ready: int = Field(ge=0, le=4096, description="GPU nodes Ready, schedulable, with every GPU allocatable.")
    gpus_allocatable: int = Field(ge=0, le=4096 * 64, description="Sum of nvidia.com/gpu allocatable on those nodes.")
    node_names: tuple[str, ...] = Field(default=(), max_length=4096, description="The ready GPU nodes.")
    created: tuple[str, ...] = Field(
        default=(), max_length=256, description="Resources this run created ('kind/name'); empty on a converged re-run."
    )

    def report_section(self) -> dict[str, object]:
        """report.json ``"cluster"``."""
        return {
            "kind": self.kind,
            "name": self.name,
            "nodes_ready": self.nodes_ready,
            "gpus_allocatable": self.gpus_allocatable,
        }

    def markdown(self) -> str:
        rows: list[dict[str, object]] = [
            {
                "kind": self.kind,
                "cluster": self.name,
                "region": self.region,
                "GPU pool": self.gpu_pool,
                "nodes ready": self.nodes_ready,
                "GPUs allocatable": self.gpus_allocatable,
            }
        ]
        created = ", ".join(self.created) if self.created else "nothing (everything already existed)"
        return f"{markdown_table(rows)}\n\nCreated in this run: {created}\n"
