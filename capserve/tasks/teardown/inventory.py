"""What of a campaign exists in a region: EC2 by the campaign tag, EKS/IAM/SageMaker by the campaign's
deterministic names with the tag checked (a same-named resource without our tag is reported as kept,
never deleted), Kubernetes objects by the campaign label."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from prefect import get_run_logger
from prefect.cache_policies import NO_CACHE

from capserve.core.cluster.hyperpod import is_lifecycle_bucket_of, lifecycle_bucket
from capserve.core.cluster.iam import roles_for
from capserve.core.cluster.naming import ClusterNames
from capserve.core.cluster.network import GONE_ENDPOINT_STATES
from capserve.core.tags import CAMPAIGN_TAG
from capserve.core.teardown.inventory import (
    AddressFound,
    BucketFound,
    ClusterFound,
    ClusterKind,
    HyperPodFound,
    InternetGatewayFound,
    Inventory,
    Named,
    NatGatewayFound,
    NodegroupFound,
    RoleFound,
    RouteTableFound,
    SecurityGroupFound,
    VpcFound,
    WorkloadFound,
)
from capserve.core.teardown.plan import group_references, label
from capserve.core.teardown.result import KeptResource
from capserve.core.teardown.settings import TeardownSettings
from capserve.tasks import aws
from capserve.tasks.resilience import aws_task
from capserve.tasks.teardown import workloads as kube

# Instances in these states still exist (and may bill); terminated ones are gone.
_LIVE_INSTANCE_STATES = ["pending", "running", "stopping", "stopped", "shutting-down"]
# NAT gateways teardown deletes (EC2 API reference, NatGateway.State): a deleting one is already going.
LIVE_NAT_STATES = ["pending", "available", "failed"]


def _tags(items: list[dict[str, Any]] | None) -> dict[str, str]:
    return {t["Key"]: t.get("Value", "") for t in items or []}


def _name(resource: dict[str, Any], fallback: str) -> str:
    return _tags(resource.get("Tags")).get("Name") or fallback


def _pages(ec2: Any, operation: str, key: str, **params: Any) -> list[dict[str, Any]]:
    return [item for page in ec2.get_paginator(operation).paginate(**params) for item in page.get(key, [])]


def _code(exc: ClientError) -> str:
    return aws.error_code(exc)


class _Collector:
    """Gathers the inventory's pieces while the AWS reads run."""

    def __init__(self, campaign_id: str) -> None:
        self.campaign_id = campaign_id
        self.kept: list[KeptResource] = []
        self.missing: list[str] = []
        self.reservations: list[str] = []
        self.dates: list[datetime] = []

    def not_ours(self, resource: str, tags: dict[str, str]) -> None:
        owner = tags.get(CAMPAIGN_TAG)
        whose = f"tagged {CAMPAIGN_TAG}={owner}" if owner else f"has no {CAMPAIGN_TAG} tag"
        self.kept.append(KeptResource(resource=resource, why=f"has this campaign's name but {whose}: not ours"))

    def created(self, when: Any) -> None:
        if isinstance(when, datetime) and when.tzinfo is not None:
            self.dates.append(when)


@aws_task(name="inventory-campaign", cache_policy=NO_CACHE)
def inventory_campaign(
    campaign_id: str,
    region: str,
    *,
    kind: ClusterKind | None = None,
    existing_cluster: str | None = None,
    settings: TeardownSettings | None = None,
) -> Inventory:
    """Everything of ``campaign_id`` in ``region``.

    ``kind`` (the spec's cluster kind) lists the deterministic names the campaign would have as
    "already gone" when they do not exist; None (the reaper) reports only what is found.
    ``existing_cluster`` is a cluster the spec named: its labelled workloads are ours, the cluster is not.
    """
    settings = settings or TeardownSettings()
    names = ClusterNames(campaign_id=campaign_id)
    seen = _Collector(campaign_id)
    try:
        vpcs, gateways, instances, templates = _ec2(campaign_id, region, seen)
        nats, endpoints, addresses = _egress(campaign_id, region, seen)
        if kind is not None:
            _missing_network(names, kind, vpcs, gateways, templates, seen)
            _missing_egress(names, nats, endpoints, addresses, seen)
        eks_cluster, nodegroups = _eks(names, region, kind, seen)
        hyperpod = _hyperpod(names, region, kind, seen)
        bucket = _lifecycle_bucket(names, region, kind, seen)
        roles = _roles(names, region, kind, seen)
        repositories = _ecr_repositories(campaign_id, region, seen)
        workload_cluster = eks_cluster
        if existing_cluster:
            workload_cluster = _existing(existing_cluster, region)
            seen.kept.append(
                KeptResource(
                    resource=label("eks-cluster", existing_cluster),
                    why="named in cluster.existing_cluster_name: used by the campaign, never owned by it",
                )
            )
    except (ClientError, BotoCoreError) as exc:
        raise aws.convert(exc, f"inventory of campaign {campaign_id} in {region}") from exc
    workloads: list[WorkloadFound] = []
    if settings.delete_workloads and workload_cluster is not None and workload_cluster.status == "ACTIVE":
        workloads = _workloads(workload_cluster, region, campaign_id, seen, owned=not existing_cluster)
    return Inventory(
        campaign_id=campaign_id,
        region=region,
        workload_cluster=workload_cluster,
        workloads=tuple(workloads),
        hyperpod=hyperpod,
        nodegroups=tuple(nodegroups),
        instances=tuple(instances),
        launch_templates=tuple(templates),
        eks_cluster=eks_cluster,
        lifecycle_bucket=bucket,
        roles=tuple(roles),
        ecr_repositories=tuple(repositories),
        internet_gateways=tuple(gateways),
        vpcs=tuple(vpcs),
        nat_gateways=tuple(nats),
        vpc_endpoints=tuple(endpoints),
        addresses=tuple(addresses),
        kept=tuple(seen.kept),
        missing=tuple(seen.missing),
        reservation_ids=tuple(dict.fromkeys(seen.reservations)),
        oldest_created=min(seen.dates) if seen.dates else None,
    )


def _refused(exc: BaseException) -> int | None:
    """401 or 403 when the API server refused the caller (here or in the error it was converted from)."""
    cause: BaseException | None = exc
    while cause is not None:
        status = getattr(cause, "status", None)
        if status in (401, 403):
            return int(status)
        cause = cause.__cause__
    return None


def _workloads(
    cluster: ClusterFound, region: str, campaign_id: str, seen: _Collector, *, owned: bool
) -> list[WorkloadFound]:
    """The campaign's labelled objects; none when the API server refuses the caller (no EKS access entry: only
    the cluster's creator and cluster.admin_principals have one, docs/aws-network.md "Access"). Teardown is
    anyone's who may delete the AWS resources: deleting the campaign's own cluster deletes its workloads with
    it, so a refusal is a warning and the AWS plan still runs. In a cluster the campaign does not own
    (cluster.existing_cluster_name) they stay, and are reported as kept."""
    try:
        return kube.list_workloads(kube.connect(cluster, region), campaign_id)
    except Exception as exc:
        status = _refused(exc)
        if status is None:
            raise
    why = (f"not listed: the Kubernetes API refused this principal ({status}; it has no EKS access entry: add it "
           "to cluster.admin_principals)")
    if owned:
        get_run_logger().warning("workloads of campaign %s in %s %s; deleting the cluster deletes them",
                                 campaign_id, cluster.name, why)
    else:
        seen.kept.append(KeptResource(resource=label("k8s-workloads", cluster.name),
                                      why=f"{why}; delete them with kubectl as a principal that has access"))
    return []


def _ec2(
    campaign_id: str, region: str, seen: _Collector
) -> tuple[list[VpcFound], list[InternetGatewayFound], list[Named], list[Named]]:
    ec2 = aws.client("ec2", region)
    ours = [{"Name": f"tag:{CAMPAIGN_TAG}", "Values": [campaign_id]}]
    vpcs = []
    for vpc in _pages(ec2, "describe_vpcs", "Vpcs", Filters=ours):
        vpc_id = vpc["VpcId"]
        inside = [*ours, {"Name": "vpc-id", "Values": [vpc_id]}]
        subnets = [
            Named(id=s["SubnetId"], name=_name(s, s["SubnetId"]))
            for s in _pages(ec2, "describe_subnets", "Subnets", Filters=inside)
        ]
        tables = [
            RouteTableFound(
                id=t["RouteTableId"],
                name=_name(t, t["RouteTableId"]),
                # The main association belongs to the VPC and cannot be removed (EC2 API reference,
                # DisassociateRouteTable); only subnet associations are ours to undo.
                association_ids=tuple(
                    a["RouteTableAssociationId"] for a in t.get("Associations", []) if not a.get("Main")
                ),
            )
            for t in _pages(ec2, "describe_route_tables", "RouteTables", Filters=inside)
        ]
        groups = [
            SecurityGroupFound(
                id=g["GroupId"],
                name=g.get("GroupName") or g["GroupId"],
                ingress=tuple(group_references(g.get("IpPermissions", []))),
                egress=tuple(group_references(g.get("IpPermissionsEgress", []))),
            )
            for g in _pages(ec2, "describe_security_groups", "SecurityGroups", Filters=inside)
            if g.get("GroupName") != "default"  # deleted with the VPC; DeleteSecurityGroup refuses it
        ]
        vpcs.append(
            VpcFound(
                id=vpc_id,
                name=_name(vpc, vpc_id),
                subnets=tuple(subnets),
                route_tables=tuple(tables),
                security_groups=tuple(groups),
            )
        )
    gateways = [
        InternetGatewayFound(
            id=g["InternetGatewayId"],
            name=_name(g, g["InternetGatewayId"]),
            attached_vpc_ids=tuple(a["VpcId"] for a in g.get("Attachments", []) if a.get("VpcId")),
        )
        for g in _pages(ec2, "describe_internet_gateways", "InternetGateways", Filters=ours)
    ]
    live = [*ours, {"Name": "instance-state-name", "Values": _LIVE_INSTANCE_STATES}]
    instances = [
        Named(id=i["InstanceId"], name=_name(i, i["InstanceId"]))
        for r in _pages(ec2, "describe_instances", "Reservations", Filters=live)
        for i in r.get("Instances", [])
    ]
    templates = []
    for t in _pages(ec2, "describe_launch_templates", "LaunchTemplates", Filters=ours):
        templates.append(Named(id=t["LaunchTemplateId"], name=t["LaunchTemplateName"]))
        seen.created(t.get("CreateTime"))
        versions = ec2.describe_launch_template_versions(LaunchTemplateId=t["LaunchTemplateId"], Versions=["$Latest"])
        for version in versions.get("LaunchTemplateVersions", []):
            target = (
                (version.get("LaunchTemplateData") or {}).get("CapacityReservationSpecification") or {}
            ).get("CapacityReservationTarget") or {}
            if target.get("CapacityReservationId"):
                seen.reservations.append(target["CapacityReservationId"])
    return vpcs, gateways, instances, templates


def _egress(
    campaign_id: str, region: str, seen: _Collector
) -> tuple[list[NatGatewayFound], list[Named], list[AddressFound]]:
    """NAT gateways, VPC endpoints and Elastic IPs carrying the campaign tag, in whatever VPC (or none)."""
    ec2 = aws.client("ec2", region)
    ours = [{"Name": f"tag:{CAMPAIGN_TAG}", "Values": [campaign_id]}]
    nats = []
    live = [*ours, {"Name": "state", "Values": LIVE_NAT_STATES}]
    for gateway in _pages(ec2, "describe_nat_gateways", "NatGateways", Filter=live):
        nats.append(NatGatewayFound(id=gateway["NatGatewayId"], name=_name(gateway, gateway["NatGatewayId"]),
                                    vpc_id=gateway.get("VpcId"), state=gateway.get("State") or "unknown"))
        seen.created(gateway.get("CreateTime"))
    endpoints = []
    for endpoint in _pages(ec2, "describe_vpc_endpoints", "VpcEndpoints", Filters=ours):
        if str(endpoint.get("State", "")).lower() in GONE_ENDPOINT_STATES:
            continue
        endpoints.append(Named(id=endpoint["VpcEndpointId"], name=_name(endpoint, endpoint["VpcEndpointId"])))
        seen.created(endpoint.get("CreationTimestamp"))
    # DescribeAddresses has no paginator: it answers every address of the region at once.
    addresses = [
        AddressFound(id=a["AllocationId"], name=_name(a, a["AllocationId"]), public_ip=a.get("PublicIp"),
                     association_id=a.get("AssociationId") or None)
        for a in ec2.describe_addresses(Filters=ours).get("Addresses", [])
        if a.get("AllocationId")
    ]
    return nats, endpoints, addresses


def _missing_egress(
    names: ClusterNames, nats: list[NatGatewayFound], endpoints: list[Named], addresses: list[AddressFound],
    seen: _Collector,
) -> None:
    found = {label("nat-gateway", n.name) for n in nats} | {label("vpc-endpoint", e.name) for e in endpoints}
    found |= {label("elastic-ip", a.name) for a in addresses}
    expected = [
        label("nat-gateway", names.nat_gateway),
        label("vpc-endpoint", names.s3_endpoint),
        label("elastic-ip", names.nat_address),
    ]
    seen.missing += [resource for resource in expected if resource not in found]


def _missing_network(
    names: ClusterNames,
    kind: ClusterKind,
    vpcs: list[VpcFound],
    gateways: list[InternetGatewayFound],
    templates: list[Named],
    seen: _Collector,
) -> None:
    """The network pieces (and the EKS launch template) the campaign would have by name, when absent."""
    found = {label("vpc", v.name) for v in vpcs}
    found |= {label("internet-gateway", g.name) for g in gateways}
    found |= {label("route-table", t.name) for v in vpcs for t in v.route_tables}
    found |= {label("security-group", g.name) for v in vpcs for g in v.security_groups}
    found |= {label("launch-template", t.name) for t in templates}
    expected = [
        label("vpc", names.vpc),
        label("internet-gateway", names.internet_gateway),
        label("route-table", names.route_table),
        label("route-table", names.private_route_table),
        label("security-group", names.security_group),
    ]
    if kind == "eks":
        expected.append(label("launch-template", names.launch_template))
    seen.missing += [resource for resource in expected if resource not in found]


def _ecr_repositories(campaign_id: str, region: str, seen: _Collector) -> list[Named]:
    """The campaign's ECR repositories: named ``capserve/<campaign>/…`` (capserve.core.rollout.image) and tagged."""
    ecr = aws.client("ecr", region)
    prefix = f"capserve/{campaign_id.lower()}/"
    found: list[Named] = []
    for repository in _pages(ecr, "describe_repositories", "repositories"):
        name = str(repository["repositoryName"])
        if not name.startswith(prefix):
            continue
        listed = ecr.list_tags_for_resource(resourceArn=repository["repositoryArn"])["tags"]
        tags = {t["Key"]: t["Value"] for t in listed}
        if tags.get(CAMPAIGN_TAG) != campaign_id:
            seen.not_ours(label("ecr-repository", name), tags)
            continue
        seen.created(repository.get("createdAt"))
        found.append(Named(id=name, name=name))
    return found


def _cluster_found(cluster: dict[str, Any]) -> ClusterFound:
    return ClusterFound(
        name=cluster["name"],
        status=cluster.get("status") or "UNKNOWN",
        endpoint=cluster.get("endpoint") or None,
        ca_data=(cluster.get("certificateAuthority") or {}).get("data"),
    )


def _eks(
    names: ClusterNames, region: str, kind: ClusterKind | None, seen: _Collector
) -> tuple[ClusterFound | None, list[NodegroupFound]]:
    eks = aws.client("eks", region)
    try:
        cluster = eks.describe_cluster(name=names.eks_cluster)["cluster"]
    except ClientError as exc:
        if _code(exc) != "ResourceNotFoundException":  # EKS API reference, DescribeCluster errors
            raise
        if kind is not None:
            seen.missing.append(label("eks-cluster", names.eks_cluster))
            seen.missing += [label("eks-nodegroup", group) for group in _expected_nodegroups(names, kind)]
        return None, []
    tags = cluster.get("tags") or {}
    if tags.get(CAMPAIGN_TAG) != names.campaign_id:
        seen.not_ours(label("eks-cluster", names.eks_cluster), tags)
        return None, []
    seen.created(cluster.get("createdAt"))
    groups = []
    for page in eks.get_paginator("list_nodegroups").paginate(clusterName=names.eks_cluster):
        for group_name in page.get("nodegroups", []):
            try:
                group = eks.describe_nodegroup(clusterName=names.eks_cluster, nodegroupName=group_name)["nodegroup"]
            except ClientError as exc:
                if _code(exc) == "ResourceNotFoundException":
                    continue  # deleted between the list and the describe
                raise
            group_tags = group.get("tags") or {}
            if group_tags.get(CAMPAIGN_TAG) != names.campaign_id:
                seen.not_ours(label("eks-nodegroup", group_name), group_tags)
                continue
            seen.created(group.get("createdAt"))
            groups.append(NodegroupFound(cluster=names.eks_cluster, name=group_name))
    found = {g.name for g in groups}
    seen.missing += [
        label("eks-nodegroup", group) for group in _expected_nodegroups(names, kind) if group not in found
    ]
    return _cluster_found(cluster), groups


def _expected_nodegroups(names: ClusterNames, kind: ClusterKind | None) -> list[str]:
    """The node groups bring-up makes: the system group in both kinds, the GPU group on EKS only."""
    if kind is None:
        return []
    return [names.nodegroup, names.system_nodegroup] if kind == "eks" else [names.system_nodegroup]


def _existing(name: str, region: str) -> ClusterFound | None:
    try:
        return _cluster_found(aws.client("eks", region).describe_cluster(name=name)["cluster"])
    except ClientError as exc:
        if _code(exc) == "ResourceNotFoundException":
            return None
        raise


def _hyperpod(names: ClusterNames, region: str, kind: ClusterKind | None, seen: _Collector) -> HyperPodFound | None:
    sagemaker = aws.client("sagemaker", region)
    name = names.hyperpod_cluster
    try:
        cluster = sagemaker.describe_cluster(ClusterName=name)
    except ClientError as exc:
        if _code(exc) != "ResourceNotFound":  # SageMaker API reference, DescribeCluster errors
            raise
        if kind == "hyperpod":
            seen.missing.append(label("hyperpod-cluster", name))
        return None
    tags = _tags(sagemaker.list_tags(ResourceArn=cluster["ClusterArn"]).get("Tags"))
    if tags.get(CAMPAIGN_TAG) != names.campaign_id:
        seen.not_ours(label("hyperpod-cluster", name), tags)
        return None
    seen.created(cluster.get("CreationTime"))
    for group in cluster.get("InstanceGroups", []):
        if group.get("TrainingPlanArn"):
            seen.reservations.append(group["TrainingPlanArn"])
    return HyperPodFound(name=name, arn=cluster["ClusterArn"])


def _lifecycle_bucket(
    names: ClusterNames, region: str, kind: ClusterKind | None, seen: _Collector
) -> BucketFound | None:
    """The HyperPod lifecycle bucket by its deterministic name, when it carries the campaign's lifecycle tags.

    Found whatever the kind (the reaper passes none); a bucket of that name without those tags is kept.
    A bucket the settings named (``bring_up.hyperpod_lifecycle_s3_uri``) is the user's and never looked at.
    """
    account = aws.client("sts", region).get_caller_identity()["Account"]
    name = lifecycle_bucket(names.campaign_id, account)
    s3 = aws.client("s3", region)
    try:
        s3.head_bucket(Bucket=name)
    except ClientError as exc:
        if _code(exc) not in ("404", "NoSuchBucket", "NotFound"):  # HeadBucket: bare status code
            raise
        if kind == "hyperpod":
            seen.missing.append(label("s3-bucket", name))
        return None
    try:
        tags = _tags(s3.get_bucket_tagging(Bucket=name).get("TagSet"))
    except ClientError as exc:
        if _code(exc) != "NoSuchTagSet":
            raise
        tags = {}
    if not is_lifecycle_bucket_of(tags, names.campaign_id):
        seen.not_ours(label("s3-bucket", name), tags)
        return None
    keys = [
        item["Key"]
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=name)
        for item in page.get("Contents", [])
    ]
    return BucketFound(name=name, keys=tuple(keys[:1000]))


def _roles(names: ClusterNames, region: str, kind: ClusterKind | None, seen: _Collector) -> list[RoleFound]:
    iam = aws.client("iam", region)
    expected = {role.name for role in roles_for(kind, names)} if kind else set()
    found = []
    # Every role the campaign can have (the HyperPod list is the EKS list plus one), whatever the kind.
    for role in roles_for("hyperpod", names):
        try:
            raw = iam.get_role(RoleName=role.name)["Role"]
        except ClientError as exc:
            if _code(exc) != "NoSuchEntity":  # IAM API reference, GetRole errors
                raise
            if role.name in expected:
                seen.missing.append(label("iam-role", role.name))
            continue
        tags = _tags(raw.get("Tags"))
        if tags.get(CAMPAIGN_TAG) != names.campaign_id:
            seen.not_ours(label("iam-role", role.name), tags)
            continue
        seen.created(raw.get("CreateDate"))
        attached = [
            p["PolicyArn"]
            for page in iam.get_paginator("list_attached_role_policies").paginate(RoleName=role.name)
            for p in page.get("AttachedPolicies", [])
        ]
        inline = [
            n for page in iam.get_paginator("list_role_policies").paginate(RoleName=role.name)
            for n in page.get("PolicyNames", [])
        ]
        found.append(RoleFound(name=role.name, policy_arns=tuple(attached), inline_policies=tuple(inline)))
    return found
