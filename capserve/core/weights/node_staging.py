"""Which staging Job runs on which Kubernetes node, and what the report says about it (pure).

The weights stage publishes one manifest per layout; each GPU node then copies only its own files.
Plan node ``i`` of every serving replica is a distinct Kubernetes node: replica ``r`` takes the GPU
nodes ``r × nodes … r × nodes + nodes − 1`` in name order, so a re-run maps the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from capserve.core.cluster.nvme import check_node_room
from capserve.core.errors import PermanentError
from capserve.core.tags import CAMPAIGN_TAG
from capserve.core.weights.manifest import WeightsManifest
from capserve.core.weights.settings import WeightsSettings
from capserve.core.weights.staging_job import render_staging_job


def staging_namespace(campaign_id: str) -> str:
    """One namespace per campaign: teardown (or a person) can remove the campaign's Jobs in one go."""
    return f"capserve-{campaign_id}"


class StagingJob(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    job: str = Field(min_length=1, max_length=63, description="Job name.")
    replica: int = Field(ge=0, le=64, description="Serving replica.")
    node: int = Field(ge=0, le=64, description="Node index within the replica's layout.")
    kube_node: str = Field(min_length=1, max_length=253, description="The Kubernetes node it runs on.")
    files: int = Field(ge=0, description="Files it copies and verifies.")
    bytes: int = Field(ge=0, description="Bytes it copies.")


class NodeStagingResult(BaseModel):
    """What the per-node staging did: report.json ``"node_staging"``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    namespace: str = Field(min_length=1, max_length=63, description="Namespace of the Jobs.")
    target: Literal["fsx", "nvme"] = Field(description="Where the files landed on each node.")
    jobs: tuple[StagingJob, ...] = Field(max_length=4096, description="One per node and replica.")

    def report_section(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "target": self.target, "jobs": [j.model_dump() for j in self.jobs]}

    def markdown(self) -> str:
        rows = ["| job | replica | node | kubernetes node | files | bytes |", "|---|---|---|---|---|---|"]
        rows += [f"| {j.job} | {j.replica} | {j.node} | {j.kube_node} | {j.files} | {j.bytes:,} |" for j in self.jobs]
        return f"Each node copied only its own files from S3 into its {self.target} and verified them (sha256).\n\n" + (
            "\n".join(rows)
        )


def node_assignment(kube_nodes: Sequence[str], nodes: int, replicas: int) -> dict[tuple[int, int], str]:
    """(replica, layout node) → Kubernetes node: replica ``r`` takes the ``r``-th run of nodes in name order."""
    ordered = sorted(kube_nodes)
    return {(r, n): ordered[r * nodes + n] for r in range(replicas) for n in range(nodes)}


def staging_workloads(
    manifest: WeightsManifest,
    *,
    kube_nodes: tuple[str, ...],
    replicas: int,
    campaign_id: str,
    bucket: str,
    prefix: str,
    node_target: Literal["fsx", "nvme"],
    settings: WeightsSettings | None = None,
    node_storage: Mapping[str, int] | None = None,
    cluster_kind: str = "eks",
    tool_source: str,
) -> tuple[list[dict[str, Any]], NodeStagingResult]:
    """The namespace and one Job per (replica, node), pinned to its Kubernetes node, and what they will do.

    ``tool_source``: the copy tool each Job's container runs (``render_staging_job``).
    ``node_storage`` (each Kubernetes node's ephemeral-storage capacity, from readiness): when given,
    every node must hold its share of the weights plus ``settings.node_storage_margin_bytes``, or
    the stage stops here, before anything is copied (``check_node_room``).
    """
    settings = settings or WeightsSettings()
    needed = manifest.nodes * replicas
    if len(kube_nodes) < needed:
        raise PermanentError(
            f"{manifest.nodes} node(s) × {replicas} replica(s) need {needed} GPU nodes, but only "
            f"{len(kube_nodes)} are ready ({', '.join(kube_nodes) or 'none'})"
        )
    namespace = staging_namespace(campaign_id)
    labels = {CAMPAIGN_TAG: campaign_id}
    objects: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": labels}}
    ]
    jobs = []
    placement = node_assignment(kube_nodes, manifest.nodes, replicas)
    if node_storage is not None:
        needs = {
            kube_node: manifest.bytes_for_node(node) if node_target == "nvme" else 0
            for (_, node), kube_node in placement.items()
        }
        check_node_room(needs, node_storage, margin_bytes=settings.node_storage_margin_bytes, kind=cluster_kind)
    for (replica, node), kube_node in placement.items():
        job = render_staging_job(
            manifest,
            node=node,
            replica=replica,
            campaign_id=campaign_id,
            namespace=namespace,
            bucket=bucket,
            prefix=prefix,
            node_target=node_target,
            node_name=kube_node,
            settings=settings,
            tool_source=tool_source,
        )
        objects.append(job)
        files = manifest.for_node(node)
        jobs.append(
            StagingJob(
                job=job["metadata"]["name"],
                replica=replica,
                node=node,
                kube_node=kube_node,
                files=len(files),
                bytes=sum(f.size for f in files),
            )
        )
    return objects, NodeStagingResult(namespace=namespace, target=node_target, jobs=tuple(jobs))
