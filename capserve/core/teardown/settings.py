"""Every timeout, poll interval and grace period of teardown and the reaper, bounded (docs/design.md §6)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class TeardownSettings(BaseModel):
    """How long teardown waits for each kind of thing to be gone, and how often it looks.

    Defaults are sized for AWS: deleting a managed node group takes ~5-15 minutes (its instances
    drain and terminate), an EKS control plane ~5-10 minutes, a HyperPod cluster up to ~30 minutes.
    All of it must finish before AWS terminates the instances at end - 30 min anyway; the spec's
    ``teardown.hard_teardown_before_end_minutes`` sets when teardown starts. Tests shrink them.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    poll_seconds: float = Field(10.0, ge=0.0, le=300.0, description="Delay between polls of what is still there.")
    workloads_gone_timeout_s: float = Field(
        600.0,
        gt=0,
        le=3600,
        description="Wait for the campaign's Kubernetes objects (load-balanced Services first) to be gone.",
    )
    nodegroups_gone_timeout_s: float = Field(
        1800.0, gt=0, le=4 * 3600, description="Wait for the GPU node groups / HyperPod cluster to be deleted."
    )
    instances_gone_timeout_s: float = Field(
        900.0, gt=0, le=3600, description="Wait for leftover campaign instances to be terminated."
    )
    cluster_gone_timeout_s: float = Field(
        1800.0, gt=0, le=4 * 3600, description="Wait for the EKS control plane to be deleted."
    )
    nat_gateways_gone_timeout_s: float = Field(
        1200.0, gt=0, le=4 * 3600, description="Wait for NAT gateways to be deleted (before their Elastic IPs are "
        "released and their subnets deleted)."
    )
    dependency_retry_timeout_s: float = Field(
        900.0,
        ge=0,
        le=3600,
        description="How long a network delete that fails with DependencyViolation is retried: EKS releases "
        "its network interfaces minutes after the cluster is gone.",
    )
    delete_workloads: bool = Field(
        True,
        description="Delete the campaign's labelled Kubernetes objects before the node groups "
        "(a LoadBalancer Service left behind leaves its ELB billing after the cluster is gone).",
    )


class ReaperSettings(BaseModel):
    """When the reaper considers a campaign finished."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    lease_end_margin_minutes: int = Field(
        30,
        ge=0,
        le=24 * 60,
        description="A lease counts as over this long before its end: AWS terminates Capacity Block and "
        "training plan instances 30 minutes before the end (EC2 user guide, capacity-blocks-using.html).",
    )
    unknown_lease_grace_hours: float = Field(
        24.0,
        ge=1.0,
        le=24 * 30,
        description="A campaign whose lease cannot be found is reaped once its oldest resource is this old.",
    )
    teardown: TeardownSettings = Field(
        TeardownSettings.model_validate({}), description="Timeouts of the teardowns the reaper runs."
    )
