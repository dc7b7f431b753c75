"""Every timeout and poll interval of bring-up, with bounds, in one place (docs/design.md §6)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class KubeSettings(BaseModel):
    """Timeouts of the Kubernetes side of bring-up (docs/design.md §6: no literals in code)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    nodes_ready_timeout_s: float = Field(
        1800.0, gt=0, le=6 * 3600, description="How long to wait for every GPU node to be Ready with its GPUs."
    )
    addons_ready_timeout_s: float = Field(
        900.0,
        gt=0,
        le=48 * 3600,
        description="How long to wait for applied workloads (add-ons, staging Jobs) to report ready.",
    )
    watch_window_s: float = Field(
        300.0,
        ge=1,
        le=3600,
        description="Longest single watch request; it is re-opened from the last resourceVersion until the deadline.",
    )
    request_timeout_s: float = Field(30.0, gt=0, le=600, description="Timeout of one non-watch API request.")
    reconnect_max_s: float = Field(
        15.0,
        ge=0,
        le=600,
        description="Longest pause before a wait re-opens a dropped watch (1 s, doubling up to this; never past the "
        "wait's deadline). A wait reconnects itself: its task is not retried, so its deadline is the caller's.",
    )
    cluster_check_s: float = Field(
        20.0,
        ge=1,
        le=600,
        description="How often a wait on an EKS cluster asks EKS whether the cluster still exists (a deleted "
        "cluster's API goes quiet or away; the wait then ends at once, naming it).",
    )
    network_proof_timeout_s: float = Field(
        300.0, gt=0, le=3600, description="How long the per-GPU-node network check pods may take (pull and run)."
    )
    token_refresh_margin_s: float = Field(
        120.0, ge=0, le=600, description="Refresh an EKS token this long before it would expire."
    )


class BringUpSettings(BaseModel):
    """How long bring-up waits for each thing, and how often it looks.

    Defaults are sized for AWS: an EKS control plane takes ~10 minutes, a managed node group on a
    Capacity Block ~10-20 minutes once the block is active, HyperPod with deep health checks up to
    a few hours (SageMaker HyperPod developer guide, "Deep health checks"). Tests shrink them.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kube: KubeSettings = Field(
        KubeSettings.model_validate({}), description="Kubernetes-side waits: GPU nodes ready, add-ons ready."
    )
    poll_seconds: float = Field(15.0, ge=0.0, le=600.0, description="Delay between polls of AWS and Kubernetes status.")
    cluster_active_timeout_s: float = Field(
        1800.0, gt=0, le=4 * 3600, description="How long to wait for the EKS control plane to become ACTIVE."
    )
    nat_gateway_available_timeout_s: float = Field(
        900.0, gt=0, le=3600, description="How long to wait for the NAT gateway to become available (minutes, usually)."
    )
    nodegroup_active_timeout_s: float = Field(
        2700.0, gt=0, le=6 * 3600, description="How long to wait for the GPU node group to become ACTIVE."
    )
    system_nodegroup_active_timeout_s: float = Field(
        1800.0, gt=0, le=4 * 3600, description="How long to wait for the system (CPU) node group to become ACTIVE."
    )
    system_instance_type: str = Field(
        "m7i.large",
        pattern=r"^[a-z][a-z0-9-]*\.[a-z0-9]+$",
        max_length=64,
        description="On-demand CPU instance type of the system node group (CoreDNS, LWS and FSx controllers). "
        "m7i.large: 2 vCPU, 8 GiB, 29 pods with the VPC CNI; the controllers need a fraction of it.",
    )
    system_node_count: int = Field(
        2,
        ge=1,
        le=10,
        description="System nodes. 2: CoreDNS runs 2 replicas spread over nodes, so losing one node keeps DNS up.",
    )
    hyperpod_in_service_timeout_s: float = Field(
        4 * 3600.0,
        gt=0,
        le=12 * 3600,
        description="How long to wait for the HyperPod cluster to be InService (deep health checks are slow).",
    )
    hyperpod_threads_per_core: int = Field(
        1,
        ge=1,
        le=2,
        description="HyperPod ThreadsPerCore: 1 disables hyper-threading (the usual choice for GPU work).",
    )
    hyperpod_root_volume_gb: int = Field(
        500, ge=1, le=16384, description="Extra EBS volume per HyperPod instance, in GB (InstanceStorageConfigs)."
    )
    hyperpod_lifecycle_s3_uri: str | None = Field(
        None,
        pattern=r"^s3://sagemaker-[a-z0-9.-]+(/.*)?$",
        max_length=1024,
        description="S3 folder with the HyperPod lifecycle scripts; the bucket name must start with 'sagemaker-'. "
        "Default: s3://sagemaker-capserve-<account>-<region>/lifecycle/.",
    )
    hyperpod_on_create_script: str = Field(
        "on_create.sh",
        min_length=1,
        max_length=128,
        description="Lifecycle script run when a HyperPod node is created.",
    )
    vpc_cidr: str = Field(
        "10.64.0.0/16",
        pattern=r"^\d{1,3}(\.\d{1,3}){3}/(1[6-9]|2[0-4])$",
        description="CIDR of a VPC bring-up creates.",
    )
