"""Service Quotas and the limits EC2 enforces with them, for the sandbox's moto (5.2.5 knows only VPC defaults).

Stock moto answers ``GetServiceQuota`` for the ``vpc`` service's default values only, has no EC2 quotas
(``NoSuchResourceException``) and no ``GetAWSDefaultServiceQuota``, and never refuses a VPC, an Elastic IP or a
NAT gateway for a quota. Here, for the quotas capserve reads (``capserve.core.quotas``; codes and names from the
VPC quotas page and the EC2 on-demand instance quotas page, docs/preflight.md §3):

- ``GetServiceQuota`` answers the applied value (``SETTINGS.applied``, else the sandbox account's ``ACCOUNT``) and
  ``GetAWSDefaultServiceQuota`` AWS's default (``DEFAULTS``); other codes go to moto;
- EC2 plays the same rule preflight judges with (``capserve.core.quotas.fits``): ``CreateVpc`` answers
  ``VpcLimitExceeded``, ``AllocateAddress`` (VPC domain) ``AddressLimitExceeded`` and ``CreateNatGateway``
  ``NatGatewayLimitExceeded`` once the region's (the zone's, for NAT gateways) count is at the applied value
  (EC2 API reference, "Error codes"). The default VPC moto makes for each region counts, as AWS's does.

``reset()`` clears the applied values a test set.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from moto.ec2.exceptions import EC2ClientError
from moto.ec2.models.elastic_ip_addresses import ElasticAddressBackend
from moto.ec2.models.nat_gateways import NatGatewayBackend
from moto.ec2.models.vpcs import VPCBackend
from moto.servicequotas.exceptions import NoSuchResource
from moto.servicequotas.responses import ServiceQuotasResponse

from capserve.core.quotas import (
    ELASTIC_IPS,
    NAT_GATEWAYS,
    ON_DEMAND_G,
    ON_DEMAND_P,
    ON_DEMAND_STANDARD,
    VPCS,
    Quota,
    fits,
)

# Defaults: 5 VPCs per region, 5 NAT gateways per zone (VPC quotas page), 5 Elastic IPs per region (EC2 user
# guide, "Elastic IP address quota"). AWS sets the on-demand vCPU defaults per account; the sandbox's are made up
# [inf], large enough for one rehearsal node of any catalog type (192 vCPUs).
DEFAULTS: dict[Quota, float] = {
    VPCS: 5, NAT_GATEWAYS: 5, ELASTIC_IPS: 5, ON_DEMAND_P: 384, ON_DEMAND_G: 384, ON_DEMAND_STANDARD: 1152,
}
# The sandbox account's applied values, as after increases (made up [inf]): test modules share one moto and
# leave several campaigns' networks in a region. A test sets its own with SETTINGS.applied.
ACCOUNT: dict[Quota, float] = {**DEFAULTS, VPCS: 50, NAT_GATEWAYS: 50, ELASTIC_IPS: 50}
_BY_CODE: dict[tuple[str, str], Quota] = {(q.service_code, q.code): q for q in DEFAULTS}


@dataclass
class QuotaSandboxSettings:
    applied: dict[str, float] = field(default_factory=dict)  # quota code → applied value, in every region


SETTINGS = QuotaSandboxSettings()
_INSTALLED = False


def reset() -> None:
    SETTINGS.applied.clear()


def applied(quota: Quota) -> float:
    return SETTINGS.applied.get(quota.code, ACCOUNT[quota])


def _answer(self: Any, value: float) -> str:
    params = json.loads(self.body)
    quota = _BY_CODE[(params["ServiceCode"], params["QuotaCode"])]
    return json.dumps({"Quota": {
        "ServiceCode": quota.service_code, "QuotaCode": quota.code, "QuotaName": quota.name, "Value": value,
        "QuotaArn": f"arn:aws:servicequotas:{self.region}:{self.current_account}:{quota.service_code}/{quota.code}",
        "Unit": "None", "Adjustable": True, "GlobalQuota": False,
    }})


def _known(self: Any) -> Quota | None:
    params = json.loads(self.body)
    return _BY_CODE.get((str(params.get("ServiceCode")), str(params.get("QuotaCode"))))


def _patch_service_quotas() -> None:
    moto_get = ServiceQuotasResponse.get_service_quota

    def get_service_quota(self: Any) -> str:
        quota = _known(self)
        return moto_get(self) if quota is None else _answer(self, applied(quota))

    def get_aws_default_service_quota(self: Any) -> str:
        quota = _known(self)
        if quota is None:
            raise NoSuchResource
        return _answer(self, DEFAULTS[quota])

    ServiceQuotasResponse.get_service_quota = get_service_quota  # type: ignore[method-assign]
    ServiceQuotasResponse.get_aws_default_service_quota = get_aws_default_service_quota  # type: ignore[attr-defined]


def _refuse_over(quota: Quota, used: int, code: str, message: str) -> None:
    if not fits(used=used, adding=1, limit=applied(quota)):
        raise EC2ClientError(code, message)


def _patch_ec2() -> None:
    create_vpc = VPCBackend.create_vpc
    allocate_address = ElasticAddressBackend.allocate_address
    create_nat_gateway = NatGatewayBackend.create_nat_gateway  # network.py's, when it was installed first

    def _create_vpc(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not kwargs.get("is_default"):
            _refuse_over(VPCS, len(self.vpcs), "VpcLimitExceeded", "The maximum number of VPCs has been reached.")
        return create_vpc(self, *args, **kwargs)

    def _allocate_address(self: Any, domain: str, *args: Any, **kwargs: Any) -> Any:
        used = sum(1 for a in self.addresses if a.domain == "vpc")
        _refuse_over(ELASTIC_IPS, used, "AddressLimitExceeded", "The maximum number of addresses has been reached.")
        return allocate_address(self, domain, *args, **kwargs)

    def _create_nat_gateway(self: Any, subnet_id: str, *args: Any, **kwargs: Any) -> Any:
        zone = self.get_subnet(subnet_id).availability_zone
        used = sum(
            1 for g in self.nat_gateways.values()
            if g.state not in ("deleted", "failed") and self.get_subnet(g.subnet_id).availability_zone == zone
        )
        _refuse_over(NAT_GATEWAYS, used, "NatGatewayLimitExceeded",
                     f"The maximum number of NAT gateways in {zone} has been reached.")
        return create_nat_gateway(self, subnet_id, *args, **kwargs)

    VPCBackend.create_vpc = _create_vpc  # type: ignore[method-assign]
    ElasticAddressBackend.allocate_address = _allocate_address  # type: ignore[method-assign]
    NatGatewayBackend.create_nat_gateway = _create_nat_gateway  # type: ignore[method-assign]


def install() -> None:
    """Patch moto once per process (after ``network.install``: this wraps its CreateNatGateway)."""
    global _INSTALLED
    if _INSTALLED:
        return
    _patch_service_quotas()
    _patch_ec2()
    _INSTALLED = True
