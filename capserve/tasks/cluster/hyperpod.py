"""Converge the HyperPod side: its prerequisites, then the SageMaker cluster on the training plan,
orchestrated by our EKS cluster (docs/hyperpod.md).

Before CreateCluster: the lifecycle script is in S3 (``converge_lifecycle_scripts``: the campaign's
``sagemaker-`` bucket, created, tagged and filled here; or the folder the settings name, checked) and
the HyperPod dependencies are on the EKS cluster (applied by the bring-up flow). A missing script is a
PermanentError before anything is asked of SageMaker: the real service only finds out once instances
on the paid plan fail to provision ("Lifecycle scripts did not run successfully").

SageMaker has no boto3 waiter for HyperPod clusters (botocore sagemaker waiters: endpoints, notebooks,
jobs, images only), so this polls ``DescribeCluster`` with the one wait helper (``capserve.tasks.waiting``).
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from prefect.cache_policies import NO_CACHE
from pydantic import BaseModel, ConfigDict, Field

from capserve.core.cluster import hyperpod as build
from capserve.core.cluster.naming import ClusterNames
from capserve.core.cluster.settings import BringUpSettings
from capserve.core.errors import PermanentError
from capserve.core.lease import Lease
from capserve.tasks import aws
from capserve.tasks.buckets import create_bucket_request
from capserve.tasks.cluster.common import has_code
from capserve.tasks.resilience import aws_task
from capserve.tasks.waiting import wait_until

# HeadBucket / HeadObject have no body: a missing one surfaces as the bare HTTP status code.
_ABSENT = ("404", "NoSuchBucket", "NotFound", "NoSuchKey")


class LifecycleScripts(BaseModel):
    """Where the lifecycle scripts are (``SourceS3Uri``) and what this run created."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    uri: str = Field(min_length=6, max_length=1024, description="SourceS3Uri: s3://sagemaker-…/folder/.")
    created: tuple[str, ...] = Field(default=(), description="'kind/name' of what this run created.")


@aws_task(name="converge-hyperpod-lifecycle-scripts", cache_policy=NO_CACHE)
def converge_lifecycle_scripts(
    campaign_id: str, region: str, settings: BringUpSettings, *, hugepages_2mi_pages: int = 0
) -> LifecycleScripts:
    """The lifecycle script in S3 before CreateCluster.

    Default: the campaign's bucket ``sagemaker-<campaign>-<account>`` in ``region`` (created and tagged
    as the campaign's, so teardown deletes it), with capserve's ``on_create.sh`` uploaded (again when it
    differs), rendered to pre-allocate ``hugepages_2mi_pages`` 2 MiB huge pages (a layout that spans
    nodes). With ``settings.hyperpod_lifecycle_s3_uri``: that folder is the user's; the entrypoint
    script must already be there, and setting up huge pages is then its job (docs/hyperpod.md §2).
    """
    s3 = aws.client("s3", region)
    script = settings.hyperpod_on_create_script
    if settings.hyperpod_lifecycle_s3_uri:
        uri = settings.hyperpod_lifecycle_s3_uri
        bucket, _ = build.split_s3_uri(uri)
        key = build.script_key(uri, script)
        try:
            s3.head_object(Bucket=bucket, Key=key)
        except ClientError as exc:
            if aws.error_code(exc) in _ABSENT:
                raise PermanentError(
                    f"the HyperPod lifecycle script s3://{bucket}/{key} does not exist: upload it, or unset "
                    "bring_up.hyperpod_lifecycle_s3_uri to use capserve's own on_create.sh"
                ) from exc
            raise aws.convert(exc, f"HyperPod lifecycle script s3://{bucket}/{key}") from exc
        return LifecycleScripts(uri=uri)
    account = aws.client("sts", region).get_caller_identity()["Account"]
    bucket = build.lifecycle_bucket(campaign_id, account)
    uri = build.lifecycle_uri(bucket)
    key = build.script_key(uri, script)
    body = build.on_create_script(hugepages_2mi_pages=hugepages_2mi_pages)
    created: list[str] = []
    what = f"HyperPod lifecycle bucket {bucket}"
    try:
        try:
            s3.head_bucket(Bucket=bucket)
        except ClientError as exc:
            if aws.error_code(exc) not in _ABSENT:
                raise
            try:
                s3.create_bucket(**create_bucket_request(bucket, region))
            except ClientError as create_exc:
                if aws.error_code(create_exc) != "BucketAlreadyOwnedByYou":
                    raise
            created.append(f"s3-bucket/{bucket}")
        _ours(s3, bucket, campaign_id, fresh=bool(created))
        if _current(s3, bucket, key) != body:
            s3.put_object(Bucket=bucket, Key=key, Body=body, ContentType="text/x-shellscript")
    except (ClientError, BotoCoreError) as exc:
        raise aws.convert(exc, what) from exc
    return LifecycleScripts(uri=uri, created=tuple(created))


@aws_task(name="preflight-hyperpod-lifecycle-scripts", cache_policy=NO_CACHE)
def lifecycle_problem(campaign_id: str, region: str, settings: BringUpSettings) -> str | None:
    """Before anything is bought (read-only): can bring-up put or find the lifecycle script? None when it can.

    The settings' folder must hold the entrypoint script; the campaign's own bucket name must be free, or
    already the campaign's (bucket names are global: another account may own it).
    """
    s3 = aws.client("s3", region)
    try:
        if settings.hyperpod_lifecycle_s3_uri:
            uri = settings.hyperpod_lifecycle_s3_uri
            bucket, _ = build.split_s3_uri(uri)
            key = build.script_key(uri, settings.hyperpod_on_create_script)
            try:
                s3.head_object(Bucket=bucket, Key=key)
            except ClientError as exc:
                if aws.error_code(exc) in (*_ABSENT, "403"):
                    return (
                        f"the HyperPod lifecycle script s3://{bucket}/{key} cannot be read ({aws.error_code(exc)}): "
                        "upload it, or unset bring_up.hyperpod_lifecycle_s3_uri to use capserve's own on_create.sh"
                    )
                raise
            return None
        account = aws.client("sts", region).get_caller_identity()["Account"]
        bucket = build.lifecycle_bucket(campaign_id, account)
        try:
            s3.head_bucket(Bucket=bucket)
        except ClientError as exc:
            if aws.error_code(exc) in _ABSENT:
                return None
            if aws.error_code(exc) == "403":
                return (
                    f"the HyperPod lifecycle bucket name {bucket} belongs to another account: rename the campaign "
                    "or set bring_up.hyperpod_lifecycle_s3_uri to a sagemaker- folder of your own"
                )
            raise
        try:
            _ours(s3, bucket, campaign_id, fresh=False)
        except PermanentError as exc:
            return str(exc)
        return None
    except (ClientError, BotoCoreError) as exc:
        raise aws.convert(exc, "HyperPod lifecycle script preflight") from exc


def _ours(s3: Any, bucket: str, campaign_id: str, *, fresh: bool) -> None:
    """Tag a bucket this run made; refuse one of the campaign's name that another campaign (or nobody) tagged."""
    tags_wanted = build.lifecycle_bucket_tags(campaign_id, bucket)
    if fresh:
        s3.put_bucket_tagging(Bucket=bucket, Tagging={"TagSet": tags_wanted})
        return
    try:
        found = s3.get_bucket_tagging(Bucket=bucket).get("TagSet", [])
    except ClientError as exc:
        if aws.error_code(exc) != "NoSuchTagSet":
            raise
        found = []
    tags = {t["Key"]: t.get("Value", "") for t in found}
    if not build.is_lifecycle_bucket_of(tags, campaign_id):
        raise PermanentError(
            f"bucket {bucket} exists but is not tagged as campaign {campaign_id}'s HyperPod lifecycle bucket: "
            "delete it or set bring_up.hyperpod_lifecycle_s3_uri to a folder of your own"
        )


def _current(s3: Any, bucket: str, key: str) -> bytes | None:
    try:
        body: bytes = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError as exc:
        if aws.error_code(exc) in _ABSENT:
            return None
        raise
    return body


def eks_cluster_security_group(cluster_name: str, region: str) -> str | None:
    """``resourcesVpcConfig.clusterSecurityGroupId`` of the EKS cluster (EKS API reference, DescribeCluster).

    Read defensively: a stand-in (or an old API answer) may leave it out; then HyperPod gets the campaign
    group only, which must then admit the control plane and system nodes by its own rules.
    """
    try:
        cluster = aws.client("eks", region).describe_cluster(name=cluster_name)["cluster"]
    except (ClientError, BotoCoreError) as exc:
        raise aws.convert(exc, f"EKS cluster {cluster_name}") from exc
    group = (cluster.get("resourcesVpcConfig") or {}).get("clusterSecurityGroupId")
    return str(group) if group else None


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
    lifecycle_uri: str,
    timeout_s: float,
    spans_nodes: bool = False,
) -> tuple[str, ...]:
    """Find the campaign's HyperPod cluster by name or create it; wait until InService. Returns what it created.

    ``spans_nodes``: the layout spans nodes, so the instances get deep health checks (``build.deep_health_checks``).
    """
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
            cluster_group = eks_cluster_security_group(eks_cluster_arn.rsplit("/", 1)[-1], lease.region)
            request = build.cluster_request(
                names,
                lease,
                settings,
                eks_cluster_arn=eks_cluster_arn,
                execution_role_arn=execution_role_arn,
                subnet_id=subnet_id,
                security_group_ids=build.cluster_security_groups(security_group_id, cluster_group),
                lifecycle_uri=lifecycle_uri,
                spans_nodes=spans_nodes,
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
