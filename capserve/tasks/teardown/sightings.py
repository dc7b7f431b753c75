"""For the reaper: which campaigns have capserve-tagged clusters, node groups, VPCs, NAT gateways or Elastic
IPs in a region (the last two bill by the hour even when everything else is gone), and
when each campaign's lease ends (read from its reservations, never guessed)."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from prefect.cache_policies import NO_CACHE

from capserve.core.capacity.requests import region_from_arn, training_plan_name, training_plan_name_from_arn
from capserve.core.capacity.states import Reservation
from capserve.core.tags import CAMPAIGN_TAG
from capserve.core.teardown.plan import label
from capserve.tasks import aws
from capserve.tasks.capacity.reservations import capacity_reservation, capacity_reservations_by_tag, training_plan
from capserve.tasks.resilience import aws_task


@aws_task(name="find-capserve-campaigns", cache_policy=NO_CACHE)
def find_campaigns(region: str) -> dict[str, list[str]]:
    """Campaign id → what carries its tag: EKS clusters and their node groups, HyperPod clusters, VPCs,
    NAT gateways not yet deleting, Elastic IPs."""
    seen: dict[str, list[str]] = defaultdict(list)
    try:
        eks = aws.client("eks", region)
        for page in eks.get_paginator("list_clusters").paginate():
            for name in page.get("clusters", []):
                try:
                    cluster = eks.describe_cluster(name=name)["cluster"]
                except ClientError as exc:
                    if aws.error_code(exc) == "ResourceNotFoundException":
                        continue  # deleted between the list and the describe
                    raise
                campaign = (cluster.get("tags") or {}).get(CAMPAIGN_TAG)
                if campaign:
                    seen[campaign].append(label("eks-cluster", name))
                for group_page in eks.get_paginator("list_nodegroups").paginate(clusterName=name):
                    for group_name in group_page.get("nodegroups", []):
                        _nodegroup(eks, name, group_name, seen)
        ec2 = aws.client("ec2", region)
        tagged = [{"Name": "tag-key", "Values": [CAMPAIGN_TAG]}]
        for page in ec2.get_paginator("describe_vpcs").paginate(Filters=tagged):
            for vpc in page.get("Vpcs", []):
                tags = {t["Key"]: t.get("Value", "") for t in vpc.get("Tags", [])}
                seen[tags[CAMPAIGN_TAG]].append(label("vpc", tags.get("Name", vpc["VpcId"]), vpc["VpcId"]))
        _egress(ec2, tagged, seen)
        _hyperpod_clusters(aws.client("sagemaker", region), seen)
    except (ClientError, BotoCoreError) as exc:
        raise aws.convert(exc, f"reaper: looking for capserve-tagged resources in {region}") from exc
    return dict(seen)


def _egress(ec2: Any, tagged: list[dict[str, Any]], seen: dict[str, list[str]]) -> None:
    live = [*tagged, {"Name": "state", "Values": ["pending", "available", "failed"]}]
    for page in ec2.get_paginator("describe_nat_gateways").paginate(Filter=live):
        for gateway in page.get("NatGateways", []):
            tags = {t["Key"]: t.get("Value", "") for t in gateway.get("Tags", [])}
            gateway_id = gateway["NatGatewayId"]
            seen[tags[CAMPAIGN_TAG]].append(label("nat-gateway", tags.get("Name", gateway_id), gateway_id))
    for address in ec2.describe_addresses(Filters=tagged).get("Addresses", []):
        tags = {t["Key"]: t.get("Value", "") for t in address.get("Tags", [])}
        allocation = address.get("AllocationId") or address.get("PublicIp", "?")
        seen[tags[CAMPAIGN_TAG]].append(label("elastic-ip", tags.get("Name", allocation), allocation))


def _nodegroup(eks: Any, cluster: str, name: str, seen: dict[str, list[str]]) -> None:
    try:
        group = eks.describe_nodegroup(clusterName=cluster, nodegroupName=name)["nodegroup"]
    except ClientError as exc:
        if aws.error_code(exc) == "ResourceNotFoundException":
            return
        raise
    campaign = (group.get("tags") or {}).get(CAMPAIGN_TAG)
    if campaign:
        seen[campaign].append(label("eks-nodegroup", name))


def _hyperpod_clusters(sagemaker: Any, seen: dict[str, list[str]]) -> None:
    for page in sagemaker.get_paginator("list_clusters").paginate():
        for summary in page.get("ClusterSummaries", []):
            tags = sagemaker.list_tags(ResourceArn=summary["ClusterArn"]).get("Tags", [])
            campaign = {t["Key"]: t.get("Value", "") for t in tags}.get(CAMPAIGN_TAG)
            if campaign:
                seen[campaign].append(label("hyperpod-cluster", summary["ClusterName"]))


@aws_task(name="campaign-lease-end", cache_policy=NO_CACHE)
def lease_end(campaign_id: str, region: str, reservation_ids: list[str]) -> tuple[datetime | None, str | None]:
    """The latest end among the campaign's reservations: tagged with the campaign (acquire tags its
    purchases), targeted by its launch template / HyperPod instance groups, or its deterministic training
    plan. (None, None) when none exists any more: the reaper's grace rule decides then."""
    found: list[Reservation] = list(capacity_reservations_by_tag(campaign_id, region))
    for reservation_id in reservation_ids:
        if reservation_id.startswith("arn:"):
            plan = training_plan(region_from_arn(reservation_id), training_plan_name_from_arn(reservation_id))
            found += [plan] if plan is not None else []
        else:
            reservation = capacity_reservation(region, reservation_id)
            found += [reservation] if reservation is not None else []
    plan = training_plan(region, training_plan_name(campaign_id))
    found += [plan] if plan is not None else []
    if not found:
        return None, None
    latest = max(found, key=lambda r: r.end)
    return latest.end, f"{latest.provider} {latest.reservation_id}"
