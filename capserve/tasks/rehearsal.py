"""The rehearsal's one look at AWS of its own: where the on-demand GPU type is offered in the home region."""

from __future__ import annotations

from botocore.exceptions import BotoCoreError, ClientError

from capserve.core.capacity.zones import zones_from_describe
from capserve.core.errors import PermanentError
from capserve.core.rehearsal import on_demand_zone
from capserve.tasks import aws
from capserve.tasks.resilience import aws_task


@aws_task(name="rehearsal-zone")
def rehearsal_zone(region: str, instance_type: str) -> str:
    """A zone of ``region`` that offers ``instance_type`` on demand (EC2 API reference,
    DescribeInstanceTypeOfferings with LocationType availability-zone), preferring zones EKS allows."""
    ec2 = aws.client("ec2", region)
    try:
        pages = ec2.get_paginator("describe_instance_type_offerings").paginate(
            LocationType="availability-zone", Filters=[{"Name": "instance-type", "Values": [instance_type]}]
        )
        offered = [o["Location"] for page in pages for o in page.get("InstanceTypeOfferings", [])]
        zones = zones_from_describe(ec2.describe_availability_zones())
    except (ClientError, BotoCoreError) as exc:
        raise aws.convert(exc, f"looking up where {instance_type} is offered in {region}") from exc
    zone = on_demand_zone(offered, zones)
    if zone is None:
        raise PermanentError(
            f"{instance_type} is not offered in any Availability Zone of {region}: set rehearsal.instance_type to "
            "another type of the campaign's GPU family, or put a region that offers it first in capacity.regions"
        )
    return zone
