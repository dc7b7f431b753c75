"""Converge the HyperPod side: the SageMaker cluster on the training plan, orchestrated by our EKS cluster.

SageMaker has no boto3 waiter for HyperPod clusters (botocore sagemaker waiters: endpoints, notebooks,
jobs, images only), so this polls ``DescribeCluster`` against a monotonic deadline.
"""

from __future__ import annotations

import time

from botocore.exceptions import BotoCoreError, ClientError
from prefect import task
from prefect.cache_policies import NO_CACHE

from capserve.core.cluster import hyperpod as build
from capserve.core.cluster.naming import ClusterNames
from capserve.core.cluster.settings import BringUpSettings
from capserve.core.errors import PermanentError
from capserve.core.lease import Lease
from capserve.tasks import aws
from capserve.tasks.cluster.common import has_code


@task(name="converge-hyperpod-cluster", cache_policy=NO_CACHE)
def converge_hyperpod(
    campaign_id: str,
    lease: Lease,
    settings: BringUpSettings,
    *,
    eks_cluster_arn: str,
    execution_role_arn: str,
    subnet_id: str,
    security_group_id: str,
    timeout_s: float,
) -> tuple[str, ...]:
    """Find the campaign's HyperPod cluster by name or create it; wait until InService. Returns what it created."""
    names = ClusterNames(campaign_id=campaign_id)
    sagemaker = aws.client("sagemaker", lease.region)
    what = f"HyperPod cluster {names.hyperpod_cluster}"
    created: tuple[str, ...] = ()
    try:
        try:
            status = sagemaker.describe_cluster(ClusterName=names.hyperpod_cluster)["ClusterStatus"]
        except ClientError as exc:
            if not has_code(exc, "ResourceNotFound"):
                raise
            lifecycle = settings.hyperpod_lifecycle_s3_uri or build.default_lifecycle_uri(
                aws.client("sts", lease.region).get_caller_identity()["Account"], lease.region
            )
            request = build.cluster_request(
                names,
                lease,
                settings,
                eks_cluster_arn=eks_cluster_arn,
                execution_role_arn=execution_role_arn,
                subnet_id=subnet_id,
                security_group_id=security_group_id,
                lifecycle_uri=lifecycle,
            )
            sagemaker.create_cluster(**request)
            created = (f"hyperpod-cluster/{names.hyperpod_cluster}",)
            status = build.HyperPodStatus.CREATING.value
        deadline = time.monotonic() + timeout_s
        while True:
            state = build.HyperPodStatus(status)
            if state is build.HyperPodStatus.IN_SERVICE:
                return created
            if state.is_terminal:
                described = sagemaker.describe_cluster(ClusterName=names.hyperpod_cluster)
                raise PermanentError(f"{what} is {state.value}: {described.get('FailureMessage') or 'no reason given'}")
            if time.monotonic() >= deadline:
                raise PermanentError(f"{what}: still {state.value} after {timeout_s:g} s")
            time.sleep(settings.poll_seconds)
            status = sagemaker.describe_cluster(ClusterName=names.hyperpod_cluster)["ClusterStatus"]
    except (ClientError, BotoCoreError) as exc:
        raise aws.convert(exc, what) from exc
