"""What EKS and Kubernetes controllers create on a cluster's behalf, without the campaign's tag.

Teardown deletes what carries ``capserve.io/campaign``; these carry the *cluster's* name instead
(docs/operations.md §3): the control plane's network interfaces and cluster security group
(``aws:eks:cluster-name``), load balancers made for Services (``elbv2.k8s.aws/cluster`` or
``kubernetes.io/cluster/<name>``), EBS volumes made by the CSI driver (``kubernetes.io/cluster/<name>``),
the control-plane log group (``/aws/eks/<name>/cluster``) and the IAM OIDC provider of the cluster's
issuer. They are listed read-only, so ``capserve down`` and ``capserve status`` can say what is still
there (and billing) rather than a false all-clear.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from capserve.tasks.aws import client, convert


def _ec2_by_tag(region: str, operation: str, key: str, filters: list[dict[str, Any]]) -> list[dict[str, Any]]:
    ec2 = client("ec2", region)
    items: list[dict[str, Any]] = []
    for page in ec2.get_paginator(operation).paginate(Filters=filters):
        items += page[key]
    return items


def eks_made_resources(cluster_name: str, region: str, *, oidc_issuer: str | None = None) -> list[str]:
    """Labels ('kind/id: why') of what EKS or the cluster's controllers made for ``cluster_name`` in ``region``."""
    owned = f"kubernetes.io/cluster/{cluster_name}"
    found: list[str] = []
    try:
        for eni in _ec2_by_tag(region, "describe_network_interfaces", "NetworkInterfaces", [
            {"Name": "tag:aws:eks:cluster-name", "Values": [cluster_name]}
        ]):
            found.append(f"network-interface/{eni['NetworkInterfaceId']}: EKS control-plane interface")
        for eni in _ec2_by_tag(region, "describe_network_interfaces", "NetworkInterfaces", [
            {"Name": "description", "Values": [f"Amazon EKS {cluster_name}"]}
        ]):
            label = f"network-interface/{eni['NetworkInterfaceId']}: EKS control-plane interface"
            if label not in found:
                found.append(label)
        for group in _ec2_by_tag(region, "describe_security_groups", "SecurityGroups", [
            {"Name": "tag:aws:eks:cluster-name", "Values": [cluster_name]}
        ]):
            found.append(f"security-group/{group['GroupId']}: EKS cluster security group")
        for group in _ec2_by_tag(region, "describe_security_groups", "SecurityGroups", [
            {"Name": "tag-key", "Values": [owned]}
        ]):
            label = f"security-group/{group['GroupId']}: made by a Kubernetes controller (load balancer)"
            if not any(group["GroupId"] in f for f in found):
                found.append(label)
        for volume in _ec2_by_tag(region, "describe_volumes", "Volumes", [{"Name": "tag-key", "Values": [owned]}]):
            found.append(f"ebs-volume/{volume['VolumeId']}: made by the EBS CSI driver ({volume['State']})")
        found += _load_balancers(cluster_name, region)
        logs = client("logs", region)
        for group in logs.describe_log_groups(logGroupNamePrefix=f"/aws/eks/{cluster_name}/")["logGroups"]:
            found.append(f"log-group/{group['logGroupName']}: EKS control-plane logs")
        if oidc_issuer:
            found += _oidc_provider(oidc_issuer)
    except (ClientError, BotoCoreError) as exc:
        raise convert(exc, f"listing what EKS made for cluster {cluster_name} in {region}") from exc
    return found


def _load_balancers(cluster_name: str, region: str) -> list[str]:
    elb = client("elbv2", region)
    arns = [lb["LoadBalancerArn"] for page in elb.get_paginator("describe_load_balancers").paginate()
            for lb in page["LoadBalancers"]]
    found = []
    for start in range(0, len(arns), 20):  # DescribeTags takes at most 20 ARNs
        for described in elb.describe_tags(ResourceArns=arns[start:start + 20])["TagDescriptions"]:
            tags = {t["Key"]: t.get("Value", "") for t in described.get("Tags", [])}
            if tags.get("elbv2.k8s.aws/cluster") == cluster_name or f"kubernetes.io/cluster/{cluster_name}" in tags:
                service = tags.get("service.k8s.aws/resource") or tags.get("kubernetes.io/service-name") or "a Service"
                found.append(f"load-balancer/{described['ResourceArn']}: made for {service}")
    return found


def _oidc_provider(issuer: str) -> list[str]:
    iam = client("iam")
    host_path = issuer.removeprefix("https://")
    return [
        f"oidc-provider/{p['Arn']}: the cluster's IAM OIDC provider"
        for p in iam.list_open_id_connect_providers()["OpenIDConnectProviderList"]
        if p["Arn"].endswith(f"oidc-provider/{host_path}")
    ]
