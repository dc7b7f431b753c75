"""Converge the HyperPod side: the SageMaker cluster on the training plan, orchestrated by our EKS cluster.

SageMaker has no boto3 waiter for HyperPod clusters (botocore sagemaker waiters: endpoints, notebooks,
jobs, images only), so this polls ``DescribeCluster`` with the one wait helper (``capserve.tasks.waiting``).
"""

from __future__ import annotations

from botocore.exceptions import BotoCoreError, ClientError
from prefect.cache_policies import NO_CACHE

from capserve.core.cluster import hyperpod as build
from capserve.core.cluster.naming import ClusterNames
from capserve.core.cluster.settings import BringUpSettings
from capserve.core.errors import PermanentError
from capserve.core.lease import Lease
from capserve.tasks import aws
from capserve.tasks.cluster.common import has_code
from capserve.tasks.resilience import aws_task
from capserve.tasks.waiting import wait_until


@aws_task(name="converge-hyperpod-cluster", cache_policy=NO_CACHE)
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
            sagemaker.describe_cluster(ClusterName=names.hyperpod_cluster)
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

        def check() -> build.HyperPodStatus:
            described = sagemaker.describe_cluster(ClusterName=names.hyperpod_cluster)
            state = build.HyperPodStatus(described["ClusterStatus"])
            if state.is_terminal and state is not build.HyperPodStatus.IN_SERVICE:
                raise PermanentError(f"{what} is {state.value}: {described.get('FailureMessage') or 'no reason given'}")
            return state

        wait_until(
            check,
            done=lambda state: state is build.HyperPodStatus.IN_SERVICE,
            describe=lambda state: f"still {state.value}",
            what=what,
            timeout_s=timeout_s,
            initial_s=settings.poll_seconds,
        )
        return created
    except (ClientError, BotoCoreError) as exc:
        raise aws.convert(exc, what) from exc
