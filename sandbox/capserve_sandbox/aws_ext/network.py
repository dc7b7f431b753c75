"""moto extension for the campaign's network: what stock moto 5.2.5 gets wrong, each rule from AWS's own pages.

- **NAT gateways** (EC2 API reference, NatGateway.State; VPC user guide, "NAT gateways"): moto makes them
  ``available`` at once, ignores tag filters in DescribeNatGateways, and on delete marks them ``deleted``
  while their network interface and Elastic IP association stay (and crashes on an unknown id). Here a
  gateway is ``pending`` until ``eks.BEHAVIOUR.describes_until_active`` describes (or seconds on the sandbox
  clock) have passed, then ``available``; DeleteNatGateway makes it ``deleting``, and as many describes
  later ``deleted``, its interface gone and its Elastic IP disassociated (EC2 API reference, DeleteNatGateway:
  "Deleting a public NAT gateway disassociates its Elastic IP address"); an unknown id answers
  ``NatGatewayNotFound`` (the code botocore's ``nat_gateway_deleted`` waiter accepts). Tag filters
  (``tag:<key>``, ``tag-key``) are applied.
- **DeleteSubnet** refuses a subnet that still holds a NAT gateway that is not ``deleted``
  (``DependencyViolation``, EC2 API reference, DeleteSubnet: "You must terminate all running instances in
  the subnet before you can delete the subnet"; a NAT gateway holds a network interface there).
- **ReleaseAddress** of an Elastic IP still associated in a nondefault VPC answers ``InvalidIPAddress.InUse``
  (EC2 API reference, ReleaseAddress: "[Nondefault VPC] You must disassociate the Elastic IP address before
  you can release it. Otherwise, Amazon EC2 returns an error (InvalidIPAddress.InUse)"); moto releases it
  silently.
- **EKS CreateCluster** refuses subnets in the Availability Zone IDs EKS does not allow for clusters (EKS
  user guide, "View Amazon EKS networking requirements for VPC and subnets", "Subnet requirements for
  clusters") with ``UnsupportedAvailabilityZoneException`` (HTTP 400, ``clusterName``, ``validZones``) and
  the message EKS's troubleshooting page quotes ("Troubleshoot problems with Amazon EKS clusters and nodes",
  "Insufficient capacity"). moto's zone table puts ``use1-az3`` at ``us-east-1e``.
"""

from __future__ import annotations

from typing import Any

from moto.ec2.exceptions import EC2ClientError
from moto.ec2.models.elastic_ip_addresses import ElasticAddressBackend
from moto.ec2.models.nat_gateways import NatGatewayBackend
from moto.ec2.models.subnets import SubnetBackend
from moto.eks.exceptions import EKSError
from moto.eks.models import EKSBackend

from capserve_sandbox.aws_ext import eks as eks_ext
from capserve_sandbox.clock import CLOCK

# The sandbox's own copy of EKS's table (region → disallowed zone IDs), kept apart from the production
# list (capserve.core.cluster.network.EKS_DISALLOWED_ZONE_IDS) so that a slip in one is caught by the other.
EKS_DISALLOWED_ZONE_IDS_BY_REGION: dict[str, frozenset[str]] = {
    "us-east-1": frozenset({"use1-az3"}),
    "us-west-1": frozenset({"usw1-az2"}),
    "ca-central-1": frozenset({"cac1-az3"}),
}

_INSTALLED = False


class UnsupportedAvailabilityZone(EKSError):
    TYPE = "UnsupportedAvailabilityZoneException"
    STATUS = 400


def _ec2(account_id: str, region: str) -> Any:
    from moto.ec2.models import ec2_backends

    return ec2_backends[account_id][region]


def _tags_match(resource: Any, filters: dict[str, list[str]]) -> bool:
    tags = resource.get_tags() if hasattr(resource, "get_tags") else []
    have = {t["key"]: t["value"] for t in tags}
    for name, values in filters.items():
        if name.startswith("tag:") and have.get(name.removeprefix("tag:")) not in values:
            return False
        if name == "tag-key" and not any(key in have for key in values):
            return False
    return True


def _advance(backend: Any, gateway: Any) -> None:
    """One describe's worth of time for a gateway: pending → available, deleting → deleted."""
    if gateway.state == "pending":
        gateway._capserve_describes = getattr(gateway, "_capserve_describes", 0) + 1
        created = getattr(gateway, "_capserve_created", CLOCK.now())
        if eks_ext.activation_due(created, gateway._capserve_describes):
            gateway.state = "available"
    elif gateway.state == "deleting":
        gateway._capserve_describes += 1
        if not eks_ext.activation_due(gateway._capserve_deleting, gateway._capserve_describes):
            return
        gateway.state = "deleted"
        # AWS disassociates the Elastic IP and removes the gateway's interface once it is deleted.
        for address in list(backend.addresses):
            if address.eni is not None and address.eni is gateway._eni:
                backend.disassociate_address(address=address.public_ip)
        backend.enis.pop(gateway._eni.id, None)


def _patch_nat_gateways() -> None:
    create = NatGatewayBackend.create_nat_gateway
    describe = NatGatewayBackend.describe_nat_gateways

    def create_nat_gateway(self: Any, *args: Any, **kwargs: Any) -> Any:
        gateway: Any = create(self, *args, **kwargs)
        gateway.state, gateway._capserve_created, gateway._capserve_describes = "pending", CLOCK.now(), 0
        return gateway

    def describe_nat_gateways(self: Any, filters: Any, nat_gateway_ids: list[str] | None) -> list[Any]:
        filters = dict(filters or {})
        states = filters.pop("state", None)
        found = [g for g in describe(self, filters, nat_gateway_ids) if _tags_match(g, filters)]
        if nat_gateway_ids and not found:
            raise EC2ClientError("NatGatewayNotFound", f"NAT gateway {nat_gateway_ids[0]} was not found")
        for gateway in found:
            _advance(self, gateway)
        return [g for g in found if states is None or g.state in states]

    def delete_nat_gateway(self: Any, nat_gateway_id: str) -> Any:
        gateway = self.nat_gateways.get(nat_gateway_id)
        if gateway is None:
            raise EC2ClientError("NatGatewayNotFound", f"NAT gateway {nat_gateway_id} was not found")
        if gateway.state not in ("deleting", "deleted"):
            gateway.state, gateway._capserve_deleting, gateway._capserve_describes = "deleting", CLOCK.now(), 0
        return gateway

    NatGatewayBackend.create_nat_gateway = create_nat_gateway  # type: ignore[method-assign]
    NatGatewayBackend.describe_nat_gateways = describe_nat_gateways  # type: ignore[method-assign]
    NatGatewayBackend.delete_nat_gateway = delete_nat_gateway  # type: ignore[method-assign]


def _patch_dependencies() -> None:
    delete_subnet = SubnetBackend.delete_subnet
    release_address = ElasticAddressBackend.release_address

    def _delete_subnet(self: Any, subnet_id: str) -> Any:
        if any(g.subnet_id == subnet_id and g.state != "deleted" for g in self.nat_gateways.values()):
            raise EC2ClientError(
                "DependencyViolation", f"The subnet '{subnet_id}' has dependencies and cannot be deleted."
            )
        return delete_subnet(self, subnet_id)

    def _release_address(self: Any, address: str | None = None, allocation_id: str | None = None) -> None:
        found = self.address_by_allocation([allocation_id]) if allocation_id else self.address_by_ip([address])
        eip = found[0]
        subnet = getattr(eip.eni, "subnet", None) if eip.eni is not None else None
        vpc = self.vpcs.get(subnet.vpc_id) if subnet is not None else None
        if eip.eni is not None and (vpc is None or not vpc.is_default):
            raise EC2ClientError("InvalidIPAddress.InUse", f"Address {eip.allocation_id or eip.public_ip} is in use.")
        release_address(self, address=address, allocation_id=allocation_id)

    SubnetBackend.delete_subnet = _delete_subnet  # type: ignore[method-assign]
    ElasticAddressBackend.release_address = _release_address  # type: ignore[method-assign]


def refused_zone(account_id: str, region: str, subnet_ids: list[str]) -> tuple[str, list[str]] | None:
    """(the first subnet's disallowed zone name, the region's allowed zone names), or None when EKS takes them."""
    disallowed = EKS_DISALLOWED_ZONE_IDS_BY_REGION.get(region, frozenset())
    if not disallowed:
        return None
    ec2 = _ec2(account_id, region)
    for subnet_id in subnet_ids:
        try:
            subnet = ec2.get_subnet(subnet_id)
        except Exception:  # noqa: BLE001, S112 - moto's EKS takes unknown subnets; so does this rule
            continue
        if subnet.availability_zone_id in disallowed:
            valid = [z.name for z in ec2.describe_availability_zones() if z.zone_id not in disallowed]
            return str(subnet.availability_zone), sorted(valid)
    return None


def _patch_eks_zones() -> None:
    create_cluster = EKSBackend.create_cluster

    def _create_cluster(self: EKSBackend, *args: Any, **kwargs: Any) -> Any:
        name = kwargs.get("name") or (args[0] if args else "")
        config = kwargs.get("resources_vpc_config") or (args[2] if len(args) > 2 else {}) or {}
        refused = refused_zone(self.account_id, self.region_name, list(config.get("subnetIds") or []))
        if refused is not None:
            zone, valid = refused
            raise UnsupportedAvailabilityZone(
                clusterName=name,
                validZones=valid,
                message=(
                    f"Cannot create cluster '{name}' because {zone}, the targeted Availability Zone, does not "
                    "currently have sufficient capacity to support the cluster. Retry and choose from these "
                    f"Availability Zones: {', '.join(valid)}"
                ),
            )
        return create_cluster(self, *args, **kwargs)

    EKSBackend.create_cluster = _create_cluster  # type: ignore[method-assign]


def install() -> None:
    """Patch moto once per process (after ``eks.install``: this wraps its CreateCluster)."""
    global _INSTALLED
    if _INSTALLED:
        return
    _patch_nat_gateways()
    _patch_dependencies()
    _patch_eks_zones()
    _INSTALLED = True


__all__ = ["EKS_DISALLOWED_ZONE_IDS_BY_REGION", "install", "refused_zone"]
