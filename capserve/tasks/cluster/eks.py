"""Converge the EKS side: control plane, capacity-block launch template, GPU and system node groups;
wait with boto3's waiters."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError, WaiterError
from prefect.cache_policies import NO_CACHE
from pydantic import BaseModel, ConfigDict, Field

from capserve.core.catalog import get_instance_type
from capserve.core.cluster import access
from capserve.core.cluster import eks as build
from capserve.core.cluster.efa import described_network_facts
from capserve.core.cluster.naming import ClusterNames, partition_for
from capserve.core.cluster.result import SystemPool
from capserve.core.errors import PermanentError
from capserve.core.lease import Lease
from capserve.core.tags import CAMPAIGN_TAG
from capserve.tasks import aws
from capserve.tasks.cluster.common import has_code, wait_on_the_block, waiter_error
from capserve.tasks.resilience import aws_task
from capserve.tasks.the_clock import clock
from capserve.tasks.waiting import wait_until

# Statuses from which waiting cannot help (EKS API reference, Cluster.status / Nodegroup.status).
_CLUSTER_DEAD = {"FAILED", "DELETING"}
_NODEGROUP_DEAD = {"CREATE_FAILED", "DELETE_FAILED", "DELETING", "DEGRADED"}


class EksCluster(BaseModel):
    """What later steps need to reach the control plane. ``ca_data`` is public (a CA certificate)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=100, description="EKS cluster name.")
    arn: str = Field(min_length=1, max_length=2048, description="EKS cluster ARN (HyperPod's orchestrator).")
    endpoint: str = Field(min_length=1, max_length=2048, description="Kubernetes API server URL.")
    ca_data: str | None = Field(None, max_length=65536, description="certificateAuthority.data (base64 PEM).")
    cluster_security_group_id: str | None = Field(
        None, max_length=64, description="resourcesVpcConfig.clusterSecurityGroupId: the group EKS made for it."
    )
    created: tuple[str, ...] = Field(default=(), description="'kind/name' of what this run created.")


def _ours(tags: dict[str, str], campaign_id: str, what: str) -> None:
    if tags.get(CAMPAIGN_TAG) != campaign_id:
        raise PermanentError(
            f"{what} exists but is not tagged {CAMPAIGN_TAG}={campaign_id}: it is not this campaign's. "
            "Set cluster.existing_cluster_name to use it, or choose another campaign name"
        )


@aws_task(name="converge-eks-cluster", cache_policy=NO_CACHE)
def converge_cluster(
    campaign_id: str,
    region: str,
    *,
    kubernetes_version: str,
    role_arn: str,
    subnet_ids: list[str],
    security_group_id: str,
    timeout_s: float,
    poll_s: float,
) -> EksCluster:
    """Find the campaign's cluster by name (checking our tag) or create it; wait until ACTIVE."""
    names = ClusterNames(campaign_id=campaign_id)
    eks = aws.client("eks", region)
    what = f"EKS cluster {names.eks_cluster}"
    created: list[str] = []
    try:
        try:
            cluster = eks.describe_cluster(name=names.eks_cluster)["cluster"]
            _ours(cluster.get("tags", {}), campaign_id, what)
        except ClientError as exc:
            if not has_code(exc, "ResourceNotFoundException"):
                raise
            request = build.cluster_request(
                names,
                kubernetes_version=kubernetes_version,
                role_arn=role_arn,
                subnet_ids=subnet_ids,
                security_group_id=security_group_id,
            )
            cluster = eks.create_cluster(**request)["cluster"]
            created.append(f"eks-cluster/{names.eks_cluster}")
        return _wait_cluster(eks, names.eks_cluster, cluster, timeout_s, poll_s, tuple(created))
    except (ClientError, BotoCoreError) as exc:
        raise aws.convert(exc, what) from exc


@aws_task(name="describe-existing-eks-cluster", cache_policy=NO_CACHE)
def existing_cluster(name: str, region: str, *, timeout_s: float, poll_s: float) -> EksCluster:
    """A cluster the spec names: never created or changed by us, only waited for."""
    eks = aws.client("eks", region)
    try:
        cluster = eks.describe_cluster(name=name)["cluster"]
        return _wait_cluster(eks, name, cluster, timeout_s, poll_s, ())
    except (ClientError, BotoCoreError) as exc:
        raise aws.convert(
            exc, f"existing EKS cluster {name}", fix="check cluster.existing_cluster_name and region"
        ) from exc


def _wait_cluster(
    eks: Any, name: str, cluster: dict[str, Any], timeout_s: float, poll_s: float, created: tuple[str, ...]
) -> EksCluster:
    if cluster["status"] in _CLUSTER_DEAD:
        raise PermanentError(f"EKS cluster {name} is {cluster['status']}: delete it and run bring-up again")
    if cluster["status"] != "ACTIVE":
        try:
            wait_on_the_block(eks.get_waiter("cluster_active"), timeout_s, poll_s, name=name)
        except WaiterError as exc:
            raise waiter_error(exc, f"EKS cluster {name}", timeout_s) from exc
        cluster = eks.describe_cluster(name=name)["cluster"]
    return EksCluster(
        name=name,
        arn=cluster["arn"],
        endpoint=cluster["endpoint"],
        ca_data=(cluster.get("certificateAuthority") or {}).get("data"),
        cluster_security_group_id=(cluster.get("resourcesVpcConfig") or {}).get("clusterSecurityGroupId"),
        created=created,
    )


class LaunchTemplateRef(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1, max_length=64, description="LaunchTemplateId.")
    version: str = Field(min_length=1, max_length=16, description="The version the node group uses.")
    security_group_ids: tuple[str, ...] = Field(
        default=(), max_length=16, description="The groups on the GPU nodes' interfaces (that version's)."
    )
    created: tuple[str, ...] = Field(default=(), description="'kind/name' of what this run created.")


@aws_task(name="converge-launch-template", cache_policy=NO_CACHE)
def converge_launch_template(
    campaign_id: str,
    lease: Lease,
    security_group_id: str,
    *,
    cluster_security_group_id: str | None,
    hugepages_2mi_pages: int = 0,
    uses_efa: bool = False,
) -> LaunchTemplateRef:
    """The capacity-block template; a new version only when its content (the reservation, the groups) changed.

    ``cluster_security_group_id`` is the cluster's (``EksCluster.cluster_security_group_id``): without it
    GPU pods cannot reach CoreDNS on the system nodes, so a cluster that reports none is refused here,
    before any GPU node launches. ``hugepages_2mi_pages``: what the nodes' boot configuration pre-allocates
    (multi-node EFA layouts). ``uses_efa``: the layout spans nodes; its interfaces are laid out from what
    DescribeInstanceTypes says of the type's network cards now, not from the catalog (docs/aws-network.md).
    """
    names = ClusterNames(campaign_id=campaign_id)
    if not cluster_security_group_id:
        raise PermanentError(
            f"EKS cluster {names.eks_cluster} reports no resourcesVpcConfig.clusterSecurityGroupId: the GPU "
            "nodes need it beside the campaign group to reach CoreDNS on the system nodes. Check the cluster "
            "in the EKS console"
        )
    instance = get_instance_type(lease.instance_type)
    ec2 = aws.client("ec2", lease.region)
    try:
        described = ec2.describe_instance_types(InstanceTypes=[lease.instance_type])["InstanceTypes"]
        request = build.launch_template_request(
            names, lease, instance, security_group_id, cluster_security_group_id=cluster_security_group_id,
            hugepages_2mi_pages=hugepages_2mi_pages, uses_efa=uses_efa,
            facts=described_network_facts(described[0]),
        )
        groups = tuple(build.interface_security_groups(request["LaunchTemplateData"]))
        try:
            found = ec2.describe_launch_templates(LaunchTemplateNames=[names.launch_template])["LaunchTemplates"][0]
        except ClientError as exc:
            if not has_code(exc, "InvalidLaunchTemplateName.NotFoundException"):
                raise
            made = ec2.create_launch_template(**request)["LaunchTemplate"]
            return LaunchTemplateRef(
                id=made["LaunchTemplateId"],
                version=str(made["LatestVersionNumber"]),
                security_group_ids=groups,
                created=(f"launch-template/{names.launch_template}",),
            )
        template_id = found["LaunchTemplateId"]
        latest = ec2.describe_launch_template_versions(LaunchTemplateId=template_id, Versions=["$Latest"])
        current = latest["LaunchTemplateVersions"][0]
        if not build.launch_template_drift(current["LaunchTemplateData"], request["LaunchTemplateData"]):
            return LaunchTemplateRef(id=template_id, version=str(current["VersionNumber"]), security_group_ids=groups)
        made_version = ec2.create_launch_template_version(
            LaunchTemplateId=template_id,
            VersionDescription=request["VersionDescription"],
            LaunchTemplateData=request["LaunchTemplateData"],
        )["LaunchTemplateVersion"]
        return LaunchTemplateRef(
            id=template_id,
            version=str(made_version["VersionNumber"]),
            security_group_ids=groups,
            created=(f"launch-template-version/{names.launch_template}:{made_version['VersionNumber']}",),
        )
    except (ClientError, BotoCoreError) as exc:
        raise aws.convert(exc, f"launch template {names.launch_template}") from exc


class GpuPool(BaseModel):
    """What converging the GPU node group did: created it, and (at the block's start) scaled it from 0."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    created: tuple[str, ...] = Field(default=(), description="'kind/name' of what this run created.")
    scaled_from: int | None = Field(None, ge=0, description="desiredSize before this run scaled it (None: not).")
    scaled_at: datetime | None = Field(None, description="When this run asked EKS to scale it, campaign's clock.")


@aws_task(name="converge-gpu-nodegroup", cache_policy=NO_CACHE)
def converge_nodegroup(
    campaign_id: str,
    lease: Lease,
    *,
    cluster_name: str,
    node_role_arn: str,
    subnet_id: str,
    launch_template: LaunchTemplateRef,
    timeout_s: float,
    poll_s: float,
    before_block: bool = False,
) -> GpuPool:
    """The node group on the lease; wait until ACTIVE.

    ``before_block`` (the prepare run): made at ``desiredSize`` 0, so nothing launches before the reservation is
    active. At the block (``before_block`` False) a group found below the lease's count is scaled up to it with
    ``UpdateNodegroupConfig``, and one not found is made at full size: only the instances' boot and join are left
    on the block (EKS user guide, "Create a managed node group with Capacity Blocks for ML").
    """
    names = ClusterNames(campaign_id=campaign_id)
    request = build.nodegroup_request(
        names,
        lease,
        node_role_arn=node_role_arn,
        subnet_id=subnet_id,
        launch_template_id=launch_template.id,
        launch_template_version=launch_template.version,
        before_block=before_block,
    )
    request["clusterName"] = cluster_name
    eks = aws.client("eks", lease.region)
    group, created = _converge_nodegroup(eks, campaign_id, request, timeout_s=timeout_s, poll_s=poll_s)
    desired = int((group.get("scalingConfig") or {}).get("desiredSize", 0))
    if before_block or desired >= lease.instance_count:
        return GpuPool(created=created)
    scaled_at = clock().now()
    _scale_nodegroup(eks, cluster_name, names.nodegroup, build.gpu_scaling(lease, desired=lease.instance_count),
                     timeout_s=timeout_s, poll_s=poll_s)
    return GpuPool(created=created, scaled_from=desired, scaled_at=scaled_at)


def _scale_nodegroup(
    eks: Any, cluster_name: str, group_name: str, scaling: dict[str, int], *, timeout_s: float, poll_s: float
) -> None:
    """``UpdateNodegroupConfig`` to ``scaling``; wait until the group is ACTIVE again.

    A group that turns DEGRADED (its Auto Scaling group cannot launch: the reservation is not active, not in the
    subnet's zone, or too small) fails at once with EKS's health issues rather than waiting out the timeout.
    """
    what = f"node group {group_name} of {cluster_name}"
    try:
        eks.update_nodegroup_config(clusterName=cluster_name, nodegroupName=group_name, scalingConfig=scaling)

        def look() -> dict[str, Any]:
            group: dict[str, Any] = eks.describe_nodegroup(clusterName=cluster_name, nodegroupName=group_name)[
                "nodegroup"
            ]
            if group["status"] in _NODEGROUP_DEAD:
                found = (group.get("health") or {}).get("issues", [])
                issues = "; ".join(f"{i.get('code', '')}: {i.get('message', '')}" for i in found)
                raise PermanentError(
                    f"{what} is {group['status']} after scaling to {scaling['desiredSize']}: "
                    f"{issues or 'no health issues reported'}"
                )
            return group

        wait_until(
            look,
            done=lambda group: group["status"] == "ACTIVE",
            describe=lambda group: f"status {group['status']}",
            what=f"{what} scaled to {scaling['desiredSize']}",
            timeout_s=timeout_s,
            initial_s=poll_s,
        )
    except (ClientError, BotoCoreError) as exc:
        raise aws.convert(exc, what) from exc


@aws_task(name="converge-system-nodegroup", cache_policy=NO_CACHE)
def converge_system_nodegroup(
    campaign_id: str,
    region: str,
    *,
    cluster_name: str,
    node_role_arn: str,
    subnet_ids: list[str],
    instance_type: str,
    node_count: int,
    timeout_s: float,
    poll_s: float,
) -> SystemPool:
    """The untainted on-demand CPU node group for CoreDNS and the controllers; wait until ACTIVE.

    Converged by name with our tag checked, like the GPU group. An existing group keeps the instance
    type it was made with (EKS cannot change it in place); the result reports what really runs.
    """
    names = ClusterNames(campaign_id=campaign_id)
    request = build.system_nodegroup_request(
        names,
        node_role_arn=node_role_arn,
        subnet_ids=subnet_ids,
        instance_type=instance_type,
        node_count=node_count,
    )
    request["clusterName"] = cluster_name
    group, created = _converge_nodegroup(
        aws.client("eks", region), campaign_id, request, timeout_s=timeout_s, poll_s=poll_s
    )
    scaling = group.get("scalingConfig") or {}
    created_at = group.get("createdAt")
    return SystemPool(
        name=names.system_nodegroup,
        instance_type=(group.get("instanceTypes") or [instance_type])[0],
        node_count=int(scaling.get("desiredSize", node_count)),
        created_at=created_at if isinstance(created_at, datetime) and created_at.tzinfo else None,
        active_at=clock().now(),
        created=created,
    )


def _converge_nodegroup(
    eks: Any, campaign_id: str, request: dict[str, Any], *, timeout_s: float, poll_s: float
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Find the node group ``request`` names (checking our tag) or create it; wait until ACTIVE.

    Returns the node group as EKS describes it once ACTIVE, and what this call created.
    """
    cluster_name, group_name = request["clusterName"], request["nodegroupName"]
    what = f"node group {group_name} of {cluster_name}"
    created: tuple[str, ...] = ()
    try:
        try:
            group = eks.describe_nodegroup(clusterName=cluster_name, nodegroupName=group_name)["nodegroup"]
            _ours(group.get("tags", {}), campaign_id, what)
        except ClientError as exc:
            if not has_code(exc, "ResourceNotFoundException"):
                raise
            group = eks.create_nodegroup(**request)["nodegroup"]
            created = (f"eks-nodegroup/{group_name}",)
        if group["status"] in _NODEGROUP_DEAD:
            issues = "; ".join(i.get("message", "") for i in (group.get("health") or {}).get("issues", []))
            raise PermanentError(f"{what} is {group['status']}: {issues or 'no health issues reported'}")
        if group["status"] != "ACTIVE":
            waiter = eks.get_waiter("nodegroup_active")
            try:
                wait_on_the_block(waiter, timeout_s, poll_s, clusterName=cluster_name, nodegroupName=group_name)
            except WaiterError as exc:
                raise waiter_error(exc, what, timeout_s) from exc
            group = eks.describe_nodegroup(clusterName=cluster_name, nodegroupName=group_name)["nodegroup"]
    except (ClientError, BotoCoreError) as exc:
        raise aws.convert(exc, what) from exc
    return group, created


@aws_task(name="converge-eks-access-entries", cache_policy=NO_CACHE)
def converge_access_entries(
    campaign_id: str, region: str, cluster_name: str, admin_principals: list[str]
) -> tuple[str, ...]:
    """Cluster-admin access entries for ``admin_principals`` other than this run's own principal (STS
    GetCallerIdentity), which EKS made admin at creation; each entry and association only if missing.

    Returns 'kind/name' of what was created. Nothing is deleted here: the entries go with the cluster.
    """
    if not admin_principals:
        return ()
    names = ClusterNames(campaign_id=campaign_id)
    partition = partition_for(region)
    created: list[str] = []
    what = f"access entries of EKS cluster {cluster_name}"
    try:
        caller = aws.client("sts", region).get_caller_identity()["Arn"]
        eks = aws.client("eks", region)
        for principal in access.principals_to_grant(admin_principals, caller):
            try:
                eks.describe_access_entry(clusterName=cluster_name, principalArn=principal)
            except ClientError as exc:
                if not has_code(exc, "ResourceNotFoundException"):
                    raise
                try:
                    eks.create_access_entry(**access.access_entry_request(names, cluster_name, principal))
                    created.append(f"eks-access-entry/{principal}")
                except ClientError as race:
                    if not has_code(race, "ResourceInUseException"):  # another run made it meanwhile
                        raise
            pages = eks.get_paginator("list_associated_access_policies").paginate(
                clusterName=cluster_name, principalArn=principal
            )
            associated = {p["policyArn"] for page in pages for p in page.get("associatedAccessPolicies", [])}
            if access.admin_policy_arn(partition) not in associated:
                eks.associate_access_policy(**access.admin_policy_request(cluster_name, principal, partition))
    except (ClientError, BotoCoreError) as exc:
        raise aws.convert(
            exc, what, fix="check cluster.admin_principals (IAM role or user ARNs) and the caller's eks:*AccessEntry "
            "and eks:AssociateAccessPolicy permissions"
        ) from exc
    return tuple(created)
