"""Where a sandbox node can reach, read from moto's EC2 state as AWS would route it (docs/aws-network.md,
§9 "Reachability and security groups"; docs/sandbox.md §3).

A pool of nodes (an EKS node group, a HyperPod instance group) is attached when it activates: its
subnet, its security groups, how many network interfaces its instances launch with, and whether
they get a public IPv4. Every question after that reads moto's *current* state, so a route or a rule
removed later is missed at the next connection, as on AWS. The rules:

- **Public IPv4**: the subnet's ``MapPublicIpOnLaunch`` (or the interface's ``AssociatePublicIpAddress``),
  and only when the instance launches with exactly one network interface (EC2 API reference,
  ``InstanceNetworkInterfaceSpecification.AssociatePublicIpAddress``: "You cannot specify more than one
  network interface in the request" with it; applies to device index 0 only). HyperPod instances'
  interfaces in your VPC get none (``private_attachment``, used by ``hyperpod.py`` with the instance
  group's ``VpcConfig`` subnet and security groups): SageMaker's guide has the instance groups reach S3
  through a VPC endpoint or internet access of the subnet ("Setting up SageMaker HyperPod with a custom
  Amazon VPC"), and an EKS-orchestrated instance takes an address on every network card, so it has
  many interfaces (docs/aws-network.md §9).
- **Route table**: the subnet's explicit association, else the VPC's main table (Amazon VPC user guide,
  "Configure route tables"). ``0.0.0.0/0`` to an internet gateway reaches the internet only with a
  public IPv4; to a NAT gateway only when the NAT is ``available``, public, and its own subnet routes
  ``0.0.0.0/0`` to an internet gateway attached to the VPC (VPC user guide, "NAT gateways").
- **AWS services** (``<service>.<region>.amazonaws.com``): through the internet path, or an interface
  endpoint ``com.amazonaws.<region>.<service>`` in the VPC with private DNS whose security groups admit
  HTTPS from the node; S3 also through a gateway endpoint associated with the node's route table (VPC
  user guide, "Gateway endpoints for Amazon S3"). The region's ECR needs ``ecr.dkr`` and ``ecr.api``
  endpoints and a path to S3 for the layers (ECR user guide, "Amazon ECR interface VPC endpoints").
  Endpoints are regional: another region's names need the internet.
- **Security groups**: a connection passes when an egress rule of the source's groups and an ingress
  rule of the target's groups admit the protocol and port, from a group of the other side or a CIDR
  covering the other side's subnet (EC2 user guide, "Security group rules"). Nodes of a node group
  carry: without a launch template, or with one that names no groups, the cluster security group;
  with a template that names groups, only those ("Amazon EKS doesn't add the cluster security group":
  EKS user guide, "Customize managed nodes with launch templates"). HyperPod instances carry their
  ``VpcConfig.SecurityGroupIds``. The control plane's interfaces
  carry the cluster security group and the cluster's ``securityGroupIds`` (EKS user guide, "View
  Amazon EKS security group requirements for clusters").
- **The VPC CNI** (aws-node's ipamd) calls the EC2 API and its image comes from the region's EKS ECR
  (EKS user guide, "Deploy private clusters with limited internet access": the ``ec2`` and ``ecr``
  endpoints): without both the node stays NotReady, ``cni plugin not initialized``.
"""

from __future__ import annotations

import ipaddress
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from capserve_sandbox.kube.network import CONTROL_PLANE

EKS_ECR_ACCOUNT = "602401143452"  # where EKS publishes aws-node, kube-proxy, CoreDNS (EKS user guide)


@dataclass(frozen=True)
class PoolAttachment:
    """How a pool's instances sit in the VPC (decided at launch)."""

    account_id: str
    region: str
    cluster_name: str
    subnet_id: str
    security_group_ids: tuple[str, ...]
    interfaces: int
    public_ip: bool
    public_ip_reason: str  # why it has / has not a public IPv4, for the messages


def _truthy(value: Any) -> bool:
    return str(value).lower() == "true"


def _ec2(account_id: str, region: str) -> Any:
    from moto.ec2.models import ec2_backends

    return ec2_backends[account_id][region]


def public_ip(subnet: Any, interfaces: list[dict[str, Any]]) -> tuple[bool, str]:
    """(gets a public IPv4, why) for an instance launched into ``subnet`` with ``interfaces``."""
    count = max(len(interfaces), 1)
    if count > 1:
        return False, f"it launches with {count} network interfaces (EC2 assigns a public IPv4 only with one)"
    requested = (interfaces[0] if interfaces else {}).get("AssociatePublicIpAddress")
    if requested is not None:
        return _truthy(requested), f"its interface sets AssociatePublicIpAddress={requested}"
    mapped = _truthy(getattr(subnet, "map_public_ip_on_launch", False))
    return mapped, f"subnet {subnet.id} has MapPublicIpOnLaunch={str(mapped).lower()}"


def nodegroup_attachment(
    account_id: str, region: str, cluster: Any, subnet_id: str, template: dict[str, Any]
) -> PoolAttachment:
    """An EKS managed node group's instances: the template's interfaces and groups, else EKS's defaults."""
    ec2 = _ec2(account_id, region)
    interfaces = list(template.get("NetworkInterfaces") or [])
    groups = [str(g) for g in template.get("SecurityGroupIds") or []]
    for interface in interfaces:
        groups += [str(g) for g in interface.get("Groups") or interface.get("SecurityGroupIds") or []]
    if not groups:
        groups = [cluster_security_group(cluster)]
    has_ip, why = public_ip(ec2.get_subnet(subnet_id), interfaces)
    return PoolAttachment(
        account_id, region, cluster.name, subnet_id, tuple(dict.fromkeys(groups)), max(len(interfaces), 1),
        has_ip, why,
    )


def private_attachment(
    account_id: str, region: str, cluster_name: str, subnet_id: str, groups: Iterable[str], why: str
) -> PoolAttachment:
    """Instances whose interfaces in the VPC have no public IPv4 (HyperPod)."""
    return PoolAttachment(account_id, region, cluster_name, subnet_id, tuple(groups), 1, False, why)


def cluster_security_group(cluster: Any) -> str:
    return str((cluster.resources_vpc_config or {}).get("clusterSecurityGroupId") or "")


def aws_service(host: str, region: str) -> str | None:
    """The AWS service a host name belongs to in ``region`` ("s3", "ec2", "ecr", ...), or None."""
    if host.endswith(f".dkr.ecr.{region}.amazonaws.com"):
        return "ecr"
    suffix = f".{region}.amazonaws.com"
    if not host.endswith(suffix):
        return None
    service = host[: -len(suffix)].rsplit(".", 1)[-1]
    if service == "ecr" and host.startswith("api."):
        return "ecr.api"
    return service


class MotoNetwork:
    """``capserve_sandbox.kube.network.Network`` over moto's EC2 state, per attached pool."""

    models_dns = True

    def __init__(self) -> None:
        self.pools: dict[str, PoolAttachment] = {}
        self._lock = threading.Lock()

    def attach(self, pool: str, attachment: PoolAttachment) -> None:
        with self._lock:
            self.pools[pool] = attachment

    def detach(self, pool: str) -> None:
        with self._lock:
            self.pools.pop(pool, None)

    def _pool(self, pool: str) -> PoolAttachment | None:
        with self._lock:
            return self.pools.get(pool)

    # ------------------------------------------------------------------ the Network protocol

    def cni_failure(self, pool: str) -> str | None:
        at = self._pool(pool)
        if at is None:
            return None
        for host, need in (
            (f"ec2.{at.region}.amazonaws.com", "ipamd calls the EC2 API"),
            (f"{EKS_ECR_ACCOUNT}.dkr.ecr.{at.region}.amazonaws.com", "the aws-node image comes from EKS's ECR"),
        ):
            why = self._route(at, host)
            if why:
                return f"{need}: {why}"
        return None

    def route(self, pool: str, host: str) -> str | None:
        at = self._pool(pool)
        return None if at is None else self._route(at, host)

    def path(self, at: PoolAttachment, host: str) -> str | None:
        """``route`` for instances placed as ``at`` that are no attached pool (yet): a stand-in deciding
        what they can reach before any node joins (HyperPod's lifecycle script, fetched from S3)."""
        return self._route(at, host)

    def admits(self, source: str, target: str, protocol: str, port: int) -> str | None:
        src = self._pool(source)
        if src is None:
            return None
        ec2 = _ec2(src.account_id, src.region)
        if target == CONTROL_PLANE:
            cluster = _cluster(src)
            if cluster is None:
                return None
            config = cluster.resources_vpc_config or {}
            if not _truthy(config.get("endpointPrivateAccess", False)):
                why = self._internet(src)  # the public endpoint, from outside the VPC
                return f"the API server's endpoint is public only and {why}" if why else None
            groups = [cluster_security_group(cluster), *[str(g) for g in config.get("securityGroupIds") or []]]
            target_groups, what = tuple(g for g in groups if g), "the EKS control plane"
            # Its interfaces sit in the cluster's subnets: somewhere in the VPC.
            vpc = ec2.vpcs.get(ec2.get_subnet(src.subnet_id).vpc_id)
            target_cidr = str(vpc.cidr_block) if vpc is not None else None
        else:
            dst = self._pool(target)
            if dst is None:
                return None
            target_groups, what = dst.security_group_ids, f"node group {target}"
            target_cidr = _subnet_cidr(ec2, dst.subnet_id)
        source_cidr = _subnet_cidr(ec2, src.subnet_id)
        out = _allows(ec2, src.security_group_ids, "egress", protocol, port, target_groups, target_cidr)
        if not out:
            return f"no egress rule of {', '.join(src.security_group_ids)} admits {protocol}/{port} to {what}"
        into = _allows(ec2, target_groups, "ingress", protocol, port, src.security_group_ids, source_cidr)
        if not into:
            return (
                f"no ingress rule of {what}'s security groups ({', '.join(target_groups) or 'none'}) admits "
                f"{protocol}/{port} from node group {source}'s ({', '.join(src.security_group_ids) or 'none'})"
            )
        return None

    def same_cluster(self, pool: str, other: str) -> bool:
        """False only for two attached pools of different EKS clusters (the fake serves them all)."""
        mine, theirs = self._pool(pool), self._pool(other)
        return mine is None or theirs is None or mine.cluster_name == theirs.cluster_name

    # ------------------------------------------------------------------ routes

    def _route(self, at: PoolAttachment, host: str) -> str | None:
        ec2 = _ec2(at.account_id, at.region)
        service = aws_service(host, at.region)
        if service == "s3" and _gateway_endpoint(ec2, at, "s3"):
            return None
        if service == "ecr":
            wanted = ("ecr.dkr", "ecr.api")
            if all(self._interface_endpoint(ec2, at, s) for s in wanted) and self._route(
                at, f"s3.{at.region}.amazonaws.com"
            ) is None:
                return None
        elif service and self._interface_endpoint(ec2, at, service):
            return None
        why = self._internet(at)
        if why is None:
            return None
        endpoint = f", and the VPC has no usable {service} endpoint" if service else ""
        return f"no path to {host}: {why}{endpoint}"

    def _internet(self, at: PoolAttachment) -> str | None:
        ec2 = _ec2(at.account_id, at.region)
        subnet = ec2.get_subnet(at.subnet_id)
        table = route_table_of(ec2, subnet)
        if table is None:
            return f"subnet {subnet.id} has no route table"
        default = _default_route(table)
        if default is None:
            return f"route table {table.id} of subnet {subnet.id} has no 0.0.0.0/0 route"
        gateway = getattr(default, "gateway", None)
        if gateway is not None and str(gateway.id).startswith("igw-"):
            if not _attached(gateway, subnet.vpc_id):
                return f"internet gateway {gateway.id} (0.0.0.0/0 in {table.id}) is not attached to {subnet.vpc_id}"
            if not at.public_ip:
                return (
                    f"0.0.0.0/0 in route table {table.id} goes to internet gateway {gateway.id}, but the node has "
                    f"no public IPv4: {at.public_ip_reason}"
                )
            return None
        nat = getattr(default, "nat_gateway", None)
        if nat is not None:
            if nat.state != "available":
                return f"NAT gateway {nat.id} (0.0.0.0/0 in {table.id}) is {nat.state}"
            if getattr(nat, "connectivity_type", "public") == "private":
                return f"NAT gateway {nat.id} (0.0.0.0/0 in {table.id}) is private: it does not reach the internet"
            nat_subnet = ec2.get_subnet(nat.subnet_id)
            nat_table = route_table_of(ec2, nat_subnet)
            nat_default = _default_route(nat_table) if nat_table is not None else None
            nat_gateway = getattr(nat_default, "gateway", None)
            if nat_gateway is None or not str(nat_gateway.id).startswith("igw-") or not _attached(
                nat_gateway, subnet.vpc_id
            ):
                return (
                    f"NAT gateway {nat.id} sits in subnet {nat_subnet.id}, whose route table "
                    f"{getattr(nat_table, 'id', 'none')} sends 0.0.0.0/0 to no attached internet gateway"
                )
            return None
        return f"0.0.0.0/0 in route table {table.id} goes to {_target(default)}, not to a gateway out of the VPC"

    def _interface_endpoint(self, ec2: Any, at: PoolAttachment, service: str) -> bool:
        vpc_id = ec2.get_subnet(at.subnet_id).vpc_id
        name = f"com.amazonaws.{at.region}.{service}"
        for endpoint in ec2.vpc_end_points.values():
            if (
                endpoint.vpc_id == vpc_id
                and endpoint.service_name == name
                and str(endpoint.vpc_endpoint_type or "").lower() == "interface"
                and endpoint.state == "available"
                # PrivateDnsEnabled defaults to true (EC2 API reference, CreateVpcEndpoint).
                and (endpoint.private_dns_enabled is None or _truthy(endpoint.private_dns_enabled))
                and _allows(
                    ec2, tuple(endpoint.security_group_ids), "ingress", "tcp", 443, at.security_group_ids,
                    _subnet_cidr(ec2, at.subnet_id),
                )
            ):
                return True
        return False


# ---------------------------------------------------------------- moto lookups


def _cluster(at: PoolAttachment) -> Any:
    from moto.eks.models import eks_backends

    return eks_backends[at.account_id][at.region].clusters.get(at.cluster_name)


def route_table_of(ec2: Any, subnet: Any) -> Any:
    """The subnet's explicitly associated route table, else its VPC's main one."""
    main = None
    for table in ec2.route_tables.values():
        if table.vpc_id != subnet.vpc_id:
            continue
        if subnet.id in table._associations.values():
            return table
        if table.main_association_id is not None:
            main = table
    return main


def _default_route(table: Any) -> Any:
    return next((r for r in _routes(table) if r.destination_cidr_block == "0.0.0.0/0"), None)


def _routes(table: Any) -> list[Any]:
    routes = table.routes
    return list(routes.values() if isinstance(routes, dict) else routes)


def _target(route: Any) -> str:
    for attribute in ("instance", "interface", "vpc_pcx", "transit_gateway", "egress_only_igw", "carrier_gateway"):
        value = getattr(route, attribute, None)
        if value is not None:
            return str(getattr(value, "id", value))
    return str(getattr(route, "gateway_id", None) or "nothing")


def _attached(gateway: Any, vpc_id: str) -> bool:
    vpc = getattr(gateway, "vpc", None)
    return vpc is not None and vpc.id == vpc_id


def _gateway_endpoint(ec2: Any, at: PoolAttachment, service: str) -> bool:
    table = route_table_of(ec2, ec2.get_subnet(at.subnet_id))
    name = f"com.amazonaws.{at.region}.{service}"
    return table is not None and any(
        endpoint.service_name == name
        and str(endpoint.vpc_endpoint_type or "").lower() == "gateway"
        and endpoint.state == "available"
        and table.id in (endpoint.route_table_ids or [])
        for endpoint in ec2.vpc_end_points.values()
    )


def _subnet_cidr(ec2: Any, subnet_id: str | None) -> str | None:
    if not subnet_id:
        return None
    try:
        return str(ec2.get_subnet(subnet_id).cidr_block)
    except Exception:  # noqa: BLE001 - a deleted subnet matches no CIDR rule
        return None


def _allows(
    ec2: Any,
    groups: Iterable[str],
    direction: str,
    protocol: str,
    port: int,
    peer_groups: Iterable[str],
    peer_cidr: str | None,
) -> bool:
    """True when a rule of ``groups`` (``direction``) admits protocol/port with the peer (a group or CIDR)."""
    peers = set(peer_groups)
    for group_id in groups:
        group = ec2.get_security_group_from_id(group_id) if group_id else None
        if group is None:
            continue
        rules = group.egress_rules if direction == "egress" else group.ingress_rules
        for rule in rules:
            if not _covers(rule, protocol, port):
                continue
            if (rule.source_group or {}).get("GroupId") in peers:
                return True
            cidr = (rule.ip_range or {}).get("CidrIp")
            if cidr and peer_cidr and _contains(cidr, peer_cidr):
                return True
    return False


def _covers(rule: Any, protocol: str, port: int) -> bool:
    if rule.ip_protocol in ("-1", "all"):
        return True
    if rule.ip_protocol != protocol:
        return False
    return rule.from_port is not None and int(rule.from_port) <= port <= int(rule.to_port)


def _contains(rule_cidr: str, peer_cidr: str) -> bool:
    try:
        return ipaddress.ip_network(peer_cidr, strict=False).subnet_of(ipaddress.ip_network(rule_cidr, strict=False))  # type: ignore[arg-type]
    except (ValueError, TypeError):
        return False
