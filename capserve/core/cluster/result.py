"""What bring-up produced: the cluster, how many GPU nodes are ready, for the report and later stages."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from capserve.core.cluster.network import NetworkIds
from capserve.core.cluster.readiness import Readiness
from capserve.core.markdown import markdown_table


class SystemPool(BaseModel):
    """The system node group: small on-demand CPU nodes for CoreDNS and the controllers (and their cost)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=63, description="EKS node group name.")
    instance_type: str = Field(min_length=1, max_length=64, description="EC2 instance type of its nodes.")
    node_count: int = Field(ge=0, le=100, description="Nodes it runs (desired size).")
    capacity_type: Literal["ON_DEMAND"] = Field("ON_DEMAND", description="Billed on demand, per second.")
    created_at: AwareDatetime | None = Field(
        None, description="When EKS created the node group (its instances bill from about then)."
    )
    active_at: AwareDatetime | None = Field(None, description="When bring-up saw it ACTIVE.")
    created: tuple[str, ...] = Field(default=(), max_length=8, description="'kind/name' of what this run created.")

    def report_section(self) -> dict[str, object]:
        return {
            "name": self.name,
            "instance_type": self.instance_type,
            "node_count": self.node_count,
            "capacity_type": self.capacity_type,
            "created_at": self.created_at.isoformat() if self.created_at else None,
            "active_at": self.active_at.isoformat() if self.active_at else None,
        }


class NodeJoin(BaseModel):
    """The GPU nodes' launch and join on the block as Kubernetes recorded it, beside the time model's figure
    (docs/timeline.md §1, "EC2 launch and node join")."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    began_at: AwareDatetime = Field(description="When bring-up began on the block (the campaign's clock).")
    registered_at: AwareDatetime | None = Field(
        None, description="When the last GPU node registered (its creationTimestamp)."
    )
    ready_at: AwareDatetime | None = Field(
        None, description="When the last GPU node's Ready condition turned True (lastTransitionTime)."
    )
    usable_at: AwareDatetime = Field(description="When bring-up saw every GPU node usable (GPUs allocatable).")
    predicted_s: float = Field(ge=0, description="The time model's EC2 launch and node join.")
    scaled_at: AwareDatetime | None = Field(
        None, description="When bring-up scaled the GPU node group the prepare run made at size 0 (None: it made "
        "the group itself, or found it at size)."
    )

    @property
    def measured_s(self) -> float:
        return (self.usable_at - self.began_at).total_seconds()

    @classmethod
    def of(
        cls,
        readiness: Readiness,
        *,
        began_at: datetime,
        usable_at: datetime,
        predicted_s: float,
        scaled_at: datetime | None = None,
    ) -> NodeJoin:
        """The join of the ready GPU nodes in ``readiness``: the last node's registration and Ready transition."""
        ready = [node for node in readiness.nodes if node.ready]
        registered = [node.registered_at for node in ready if node.registered_at is not None]
        turned = [node.ready_since for node in ready if node.ready_since is not None]
        return cls(
            began_at=began_at, usable_at=usable_at, predicted_s=predicted_s, scaled_at=scaled_at,
            registered_at=max(registered) if registered else None, ready_at=max(turned) if turned else None,
        )

    def report_section(self) -> dict[str, object]:
        return {
            "began_at": self.began_at.isoformat(),
            "registered_at": self.registered_at.isoformat() if self.registered_at else None,
            "ready_at": self.ready_at.isoformat() if self.ready_at else None,
            "usable_at": self.usable_at.isoformat(),
            "scaled_at": self.scaled_at.isoformat() if self.scaled_at else None,
            "measured_s": round(self.measured_s, 1),
            "predicted_s": self.predicted_s,
        }

    def markdown(self) -> str:
        def at(when: AwareDatetime | None) -> str:
            return f"{when:%H:%M:%S}" if when is not None else "—"

        scaled = (
            f"scaled the GPU node group made before the block at {at(self.scaled_at)}; "
            if self.scaled_at is not None else ""
        )
        return (
            f"GPU nodes: bring-up began {at(self.began_at)}; {scaled}the last node registered "
            f"{at(self.registered_at)} and turned Ready {at(self.ready_at)}; every GPU allocatable at "
            f"{at(self.usable_at)}: "
            f"{self.measured_s / 60:,.1f} min (the time model: {self.predicted_s / 60:,.1f} min for EC2 launch and "
            "node join)."
        )


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
    node_storage_bytes: dict[str, int] = Field(
        default_factory=dict,
        description="ephemeral-storage capacity of each ready GPU node (the RAID0 NVMe array when configured).",
    )
    system_pool: SystemPool | None = Field(
        None, description="The system node group (None: an existing cluster, whose nodes are not ours)."
    )
    network: NetworkIds | None = Field(
        None, description="The campaign's VPC, subnets, NAT gateway and endpoints (None: an existing cluster's)."
    )
    gpu_interface_security_groups: tuple[str, ...] = Field(
        default=(),
        max_length=16,
        description="Security groups on the GPU nodes' network interfaces (the launch template's: campaign and "
        "cluster groups); empty where capserve did not make the interfaces (HyperPod, an existing cluster).",
    )
    created: tuple[str, ...] = Field(
        default=(), max_length=256, description="Resources this run created ('kind/name'); empty on a converged re-run."
    )
    node_join: NodeJoin | None = Field(None, description="How long the GPU nodes took to join, measured.")

    def report_section(self) -> dict[str, object]:
        """report.json ``"cluster"`` (its contract keys; the system pool is in ``system_pool`` and the markdown,
        for the cost section to price)."""
        return {
            "kind": self.kind,
            "name": self.name,
            "nodes_ready": self.nodes_ready,
            "gpus_allocatable": self.gpus_allocatable,
            "node_join": self.node_join.report_section() if self.node_join else None,
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
        system = ""
        if self.system_pool is not None:
            pool = self.system_pool
            since = f", active since {pool.active_at.isoformat()}" if pool.active_at else ""
            system = (
                f"\n\nSystem nodes (CoreDNS, controllers): {pool.node_count} × {pool.instance_type} on demand "
                f"in node group {pool.name}{since}."
            )
        network = ""
        if self.network is not None:
            network = "\n\n" + self.network.markdown(self.gpu_interface_security_groups).rstrip("\n")
        joined = f"\n\n{self.node_join.markdown()}" if self.node_join is not None else ""
        return f"{markdown_table(rows)}{joined}{system}{network}\n\nCreated in this run: {created}\n"


class PreparedCluster(BaseModel):
    """What the cluster's preparation run did before the block: everything that needs no GPU (network, IAM, the
    control plane, access entries, the system node group, on EKS the GPU node group at size 0 and the add-ons), so
    that at the block's start only the GPU nodes' launch and the pods remain (report.json ``"prepared"``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    run: str = Field(min_length=1, max_length=200, description="The scheduled run that prepared it.")
    cluster: str = Field(min_length=1, max_length=100, description="The EKS cluster.")
    started_at: AwareDatetime = Field(description="When the preparation began, on the campaign's clock.")
    ended_at: AwareDatetime = Field(description="When the cluster, its network and its system nodes were ready.")
    block_start: AwareDatetime = Field(description="When the block starts (the GPU nodes can exist from then).")
    created: tuple[str, ...] = Field(default=(), max_length=64, description="'kind/name' of what it created.")

    @property
    def ahead_of_block_s(self) -> float:
        """Seconds between the preparation's end and the block's start (negative: it ended after the start)."""
        return (self.block_start - self.ended_at).total_seconds()

    def report_section(self) -> dict[str, object]:
        return {
            "run": self.run,
            "cluster": self.cluster,
            "started_at": self.started_at.isoformat(),
            "ended_at": self.ended_at.isoformat(),
            "block_start": self.block_start.isoformat(),
            "ahead_of_block_minutes": round(self.ahead_of_block_s / 60, 1),
            "created": list(self.created),
        }

    def markdown(self) -> str:
        ahead = self.ahead_of_block_s / 60
        when = f"{ahead:.0f} min before the block's start" if ahead >= 0 else f"{-ahead:.0f} min after it started"
        made = ", ".join(self.created) or "nothing (all of it existed)"
        return (
            f"Run `{self.run}` prepared cluster {self.cluster} from {self.started_at:%Y-%m-%d %H:%M} to "
            f"{self.ended_at:%H:%M} UTC, {when} ({self.block_start:%Y-%m-%d %H:%M} UTC). Created: {made}.\n"
        )
