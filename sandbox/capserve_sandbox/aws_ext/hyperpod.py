"""moto extension for SageMaker HyperPod clusters, as bring-up needs them.

Stock moto 5.2.5 (docs/sandbox.md §2.2) rejects ``ml.p6-*`` types with a stale allowlist,
drops ``Orchestrator``/``NodeRecovery``, is born ``InService``, and fails with HTTP 500 when the
optional ``ThreadsPerCore`` is absent. These operations replace moto's cluster operations:

- the instance type is checked against botocore's own ``ClusterInstanceType`` enum (so it tracks AWS);
- ``Orchestrator.Eks.ClusterArn`` must name an ACTIVE cluster of the sandbox's EKS;
- the cluster goes ``Creating`` → ``InService`` on the same rule as EKS (describes or sandbox clock,
  see ``eks.BEHAVIOUR``); at that moment each instance group's nodes are announced to ``eks.NODE_HOOKS``
  so the fake Kubernetes server of the orchestrator cluster provisions them;
- ``describe_cluster`` of an unknown name raises ``ResourceNotFound``, as SageMaker does;
- the prerequisites are enforced (docs/hyperpod.md §6): an orchestrator EKS cluster without the
  HyperPod dependencies (the Helm chart's objects, looked up in the fake Kubernetes server through
  ``eks.KUBE_OBJECT_HOOKS``) is refused with a ValidationException, and a lifecycle entrypoint script
  that is not in (moto's) S3 makes the cluster ``Failed`` once its instances would have come up, with
  the FailureMessage SageMaker gives then;
- each node is announced with the instance group's ``ExecutionRole``: the sandbox kubelet makes that
  node's tool containers act as that role for S3 (``capserve_sandbox.kube.aws_shim``);
- the instances sit in the VPC as the request says (``reachability.private_attachment``): the subnet of
  the group's ``OverrideVpcConfig`` or the cluster's ``VpcConfig`` (HyperPod puts every instance in one
  subnet of the list; the sandbox takes the first), those security groups, and no public IPv4. Every
  instance fetches the lifecycle script from S3 through that subnet ("Without internet access, instance
  groups cannot store or retrieve lifecycle scripts": SageMaker developer guide, "Setting up SageMaker
  HyperPod with a custom Amazon VPC"), so a subnet with neither an S3 gateway endpoint nor a way out
  makes the cluster ``Failed`` with the lifecycle FailureMessage; the nodes then see the VPC as an EKS
  node group's do (the VPC CNI, image pulls, S3, DNS: docs/aws-network.md §9);
- each group's lifecycle script is played on a stand-in node when the instances come up
  (``capserve_sandbox.aws_ext.lifecycle``): a non-zero exit makes the cluster ``Failed`` with the lifecycle
  FailureMessage; a script that hides or loses the kubelet's kubeconfig in ``/var/lib/kubelet`` leaves
  instances that run (InService) but never join the EKS cluster; the kubelet's directory on the NVMe or not
  decides whether the node's ephemeral storage is the NVMe or the root volume;
- HyperPod nodes carry ``node.kubernetes.io/instance-type: ml.<type>``, HyperPod's spelling of the type;
- each node has the 2 MiB huge pages its group's lifecycle script allocates (its ``sysctl -w
  vm.nr_hugepages=<n>`` line, read from S3 when the instances come up: ``nodeadm.script_hugepages_2mi``);
- ``DeleteCluster`` terminates the instances: their nodes leave the orchestrator cluster (``eks.NODE_GONE_HOOKS``).

State hangs off moto's SageMaker backend, so ``/moto-api/reset`` clears it.
"""

from __future__ import annotations

import functools
import logging
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import botocore.session
from moto.core.exceptions import JsonRESTError
from moto.core.responses import ActionResult
from moto.eks.models import eks_backends
from moto.s3.models import s3_backends
from moto.sagemaker.models import sagemaker_backends
from moto.sagemaker.responses import SageMakerResponse

from capserve_sandbox.aws_ext import eks as eks_ext
from capserve_sandbox.aws_ext import lifecycle, reachability
from capserve_sandbox.aws_ext.nodeadm import script_hugepages_2mi
from capserve_sandbox.clock import CLOCK

log = logging.getLogger(__name__)

_INSTALLED = False
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"


class ResourceNotFound(JsonRESTError):
    def __init__(self, message: str) -> None:
        super().__init__("ResourceNotFound", message)


class ValidationException(JsonRESTError):
    def __init__(self, message: str) -> None:
        super().__init__("ValidationException", message)


class ResourceInUse(JsonRESTError):
    def __init__(self, message: str) -> None:
        super().__init__("ResourceInUse", message)


@dataclass
class _HyperPodCluster:
    name: str
    arn: str
    request: dict[str, Any]
    created: datetime
    status: str = "Creating"
    describes: int = 0
    nodes: list[dict[str, Any]] = field(default_factory=list)
    failure: str | None = None  # the FailureMessage the cluster gets instead of InService


@functools.cache
def _valid_instance_types() -> frozenset[str]:
    """From botocore's SageMaker model, read once (decompressing and decoding it cost ~0.07 s of CPU per
    CreateCluster)."""
    model = botocore.session.get_session().get_service_model("sagemaker")
    shape: Any = model.shape_for("ClusterInstanceType")
    return frozenset(shape.enum)


def _clusters(response: SageMakerResponse) -> dict[str, _HyperPodCluster]:
    backend: Any = sagemaker_backends[response.current_account][response.region]
    if not hasattr(backend, "_capserve_hyperpod"):
        backend._capserve_hyperpod = {}
    clusters: dict[str, _HyperPodCluster] = backend._capserve_hyperpod
    return clusters


def _find(response: SageMakerResponse, name_or_arn: str) -> _HyperPodCluster:
    name = name_or_arn.rsplit("/", 1)[-1]
    found = _clusters(response).get(name)
    if found is None:
        raise ResourceNotFound(f"Cluster {name} not found")
    return found


def _check_orchestrator(response: SageMakerResponse, orchestrator: dict[str, Any] | None) -> str | None:
    arn = ((orchestrator or {}).get("Eks") or {}).get("ClusterArn")
    if arn is None:
        return None
    name = arn.rsplit("/", 1)[-1]
    cluster = eks_backends[response.current_account][response.region].clusters.get(name)
    if cluster is None or cluster.status != "ACTIVE":
        raise ValidationException(f"EKS cluster {arn} does not exist or is not ACTIVE")
    return str(name)


# The objects of the HyperPod dependencies chart (aws/sagemaker-hyperpod-cli, helm_chart/HyperPodHelmChart)
# that its readme marks required for HyperPod resiliency, which bring-up turns on (NodeRecovery=Automatic,
# deep health checks): (group, plural, namespace, name) as the fake Kubernetes store keys them. Named here
# from the chart's templates, not read from capserve's vendored copy, so the two are checked against each other.
HYPERPOD_DEPENDENCIES: tuple[tuple[str, str, str | None, str], ...] = (
    ("", "namespaces", None, "aws-hyperpod"),  # deep-health-check/templates/aws-hyperpod-namespace.yaml
    ("", "serviceaccounts", "aws-hyperpod", "deep-health-check-service-account"),
    ("apps", "daemonsets", "aws-hyperpod", "health-monitoring-agent"),  # health-monitoring-agent.yaml
    ("rbac.authorization.k8s.io", "clusterrolebindings", None, "health-monitoring-agent"),
    ("rbac.authorization.k8s.io", "clusterrolebindings", None, "job-auto-restart"),  # job-auto-restart-rbac.yaml
    ("rbac.authorization.k8s.io", "clusterrolebindings", None, "hyperpod-patching"),  # hyperpod-patching
)

# What DescribeCluster reports when an instance's lifecycle script is missing or fails, as SageMaker words it
# (quoted in the troubleshooting reports of aws-samples/awsome-distributed-training for HyperPod).
LIFECYCLE_FAILURE = (
    "Instance {instance} failed to provision with the following error: \"Lifecycle scripts did not run "
    "successfully. Ensure the scripts exist in provided S3 path, are accessible, and run without errors. "
    "Please see CloudWatch logs for lifecycle script execution details.\" Note that multiple instances may "
    "be impacted."
)


def _check_dependencies(cluster_name: str) -> None:
    """The SageMaker guide ("Installing packages on the Amazon EKS cluster using Helm"): the chart is required
    before CreateCluster; without it "the creation process [may fail] entirely". The wording is the sandbox's.
    Without a fake Kubernetes server attached (plain moto tests) there is nothing to look in."""
    for lookup in list(eks_ext.KUBE_OBJECT_HOOKS):
        missing = [key for key in HYPERPOD_DEPENDENCIES if not lookup(cluster_name, key)]
        if missing:
            what = ", ".join(f"{plural}/{(ns + '/') if ns else ''}{name}" for _, plural, ns, name in missing)
            raise ValidationException(
                f"The Amazon EKS cluster {cluster_name} is not set up for SageMaker HyperPod: install the "
                f"HyperPod dependencies Helm chart first (missing: {what})"
            )


def _script(response: SageMakerResponse, group: dict[str, Any]) -> bytes | None:
    """``LifeCycleConfig.OnCreate`` under ``SourceS3Uri`` in (moto's) S3, or None when it is not there."""
    config = group.get("LifeCycleConfig") or {}
    bucket, _, folder = str(config.get("SourceS3Uri", "")).removeprefix("s3://").partition("/")
    key = f"{folder.rstrip('/')}/{config.get('OnCreate', '')}".lstrip("/")
    backend: Any = s3_backends[response.current_account]["aws"]
    try:
        found = backend.get_object(bucket, key)
    except Exception:  # noqa: BLE001 - moto raises MissingBucket / MissingKey
        return None
    return None if found is None else bytes(found.value)


def _script_hugepages(response: SageMakerResponse, group: dict[str, Any]) -> int:
    """The 2 MiB huge pages the group's lifecycle script allocates (it runs before the node joins, so the
    kubelet reports them); read as the EKS nodes' user data is (``nodeadm.script_hugepages_2mi``)."""
    script = _script(response, group)
    return script_hugepages_2mi(script.decode("utf-8", "replace")) if script else 0


def _play_lifecycle(response: SageMakerResponse, group: dict[str, Any]) -> lifecycle.LifecycleOutcome | None:
    """The group's lifecycle script played on a stand-in node (``lifecycle.play``); None when there is none."""
    script = _script(response, group)
    return lifecycle.play(script) if script is not None else None


# Why a HyperPod instance has no public IPv4, for the sandbox's messages.
NO_PUBLIC_IP = "SageMaker attaches HyperPod instances to your VPC through interfaces that get no public IPv4"


def _pool(cluster: _HyperPodCluster, group: dict[str, Any]) -> str:
    return f"{cluster.name}-{group['InstanceGroupName']}"


def _vpc_config(cluster: _HyperPodCluster, group: dict[str, Any]) -> dict[str, Any]:
    """The group's ``OverrideVpcConfig``, else the cluster's ``VpcConfig`` (ClusterInstanceGroupSpecification)."""
    config: dict[str, Any] = group.get("OverrideVpcConfig") or cluster.request.get("VpcConfig") or {}
    return config


def _attachment(
    response: SageMakerResponse, cluster: _HyperPodCluster, group: dict[str, Any], eks_name: str | None
) -> reachability.PoolAttachment | None:
    """Where the group's instances sit in the VPC (None: no subnet moto knows, so no VPC to model)."""
    config = _vpc_config(cluster, group)
    subnets = [str(s) for s in config.get("Subnets") or []]
    if not subnets or eks_ext.subnet_zone(response.current_account, response.region, subnets[0]) is None:
        return None
    groups = [str(g) for g in config.get("SecurityGroupIds") or []]
    return reachability.private_attachment(
        response.current_account, response.region, eks_name or "", subnets[0], groups, NO_PUBLIC_IP
    )


def _lifecycle_unreachable(response: SageMakerResponse, cluster: _HyperPodCluster, eks_name: str | None) -> str | None:
    """Why an instance could not fetch its lifecycle script from S3 through its subnet (None: it can)."""
    host = f"s3.{response.region}.amazonaws.com"
    for group in cluster.request["InstanceGroups"]:
        at = _attachment(response, cluster, group, eks_name)
        why = reachability.MotoNetwork().path(at, host) if at is not None else None
        if why:
            return f"instance group {group['InstanceGroupName']}: {why}"
    return None


def _advance(response: SageMakerResponse, cluster: _HyperPodCluster) -> None:
    if cluster.status != "Creating":
        return
    cluster.describes += 1
    if not eks_ext.activation_due(cluster.created, cluster.describes):
        return
    eks_name = _check_orchestrator(response, cluster.request.get("Orchestrator"))
    if cluster.failure is None:
        unreachable = _lifecycle_unreachable(response, cluster, eks_name)
        if unreachable:
            # SageMaker says only that the scripts did not run; the sandbox logs which path was missing.
            log.warning("sandbox HyperPod cluster %s: no path to the lifecycle script (%s)", cluster.name, unreachable)
            cluster.failure = LIFECYCLE_FAILURE.format(instance="i-" + uuid.uuid4().hex[:17])
    if cluster.failure is not None:
        cluster.status = "Failed"
        return
    groups = cluster.request["InstanceGroups"]
    outcomes = {group["InstanceGroupName"]: _play_lifecycle(response, group) for group in groups}
    failed = {name: outcome for name, outcome in outcomes.items() if outcome is not None and outcome.exit_code != 0}
    if failed:
        for name, bad in failed.items():
            log.warning("sandbox HyperPod cluster %s, instance group %s: the lifecycle script exited %d:\n%s",
                        cluster.name, name, bad.exit_code, bad.log_tail)
        cluster.failure = LIFECYCLE_FAILURE.format(instance="i-" + uuid.uuid4().hex[:17])
        cluster.status = "Failed"
        return
    cluster.status = "InService"
    for group in cluster.request["InstanceGroups"]:
        for _ in range(group["InstanceCount"]):
            cluster.nodes.append(
                {
                    "InstanceGroupName": group["InstanceGroupName"],
                    "InstanceId": "i-" + uuid.uuid4().hex[:17],
                    "InstanceType": group["InstanceType"],
                    "InstanceStatus": {"Status": "Running", "Message": ""},
                    "LaunchTime": CLOCK.now(),
                }
            )
        if eks_name is None:
            continue
        outcome = outcomes[group["InstanceGroupName"]]
        if outcome is not None and outcome.why_not_joined:
            # SageMaker sees its instances run; Kubernetes never hears of them (docs/hyperpod.md §6).
            log.warning("sandbox HyperPod cluster %s, instance group %s: %s", cluster.name,
                        group["InstanceGroupName"], outcome.why_not_joined)
            continue
        kube = group.get("KubernetesConfig") or {}
        subnets = _vpc_config(cluster, group).get("Subnets") or []
        eks_ext.fire_node_hooks(
            eks_ext.NodePoolActivated(
                cluster_name=eks_name,
                pool=_pool(cluster, group),
                count=group["InstanceCount"],
                instance_type=group["InstanceType"].removeprefix("ml."),  # the node's shape (EC2's spelling)
                # HyperPod labels its nodes with the instance group and with its own spelling of the instance
                # type, ml.<type> (docs/hyperpod.md §6); the health labels are the fake Kubernetes server's
                # (hyperpod=True), so its "health-check-failed" failure applies.
                labels={
                    **kube.get("Labels", {}),
                    "sagemaker.amazonaws.com/instance-group-name": group["InstanceGroupName"],
                    INSTANCE_TYPE_LABEL: group["InstanceType"],
                },
                taints=[
                    {"key": t["Key"], "value": t.get("Value", ""), "effect": t["Effect"]}
                    for t in kube.get("Taints", [])
                ],
                zone=eks_ext.subnet_zone(response.current_account, response.region, subnets[0]) if subnets else None,
                hyperpod=True,
                # Ephemeral storage is the NVMe when the lifecycle script moved the kubelet's directory onto
                # /opt/dlami/nvme, else the root volume; /opt/sagemaker is the extra EBS volume. No
                # /mnt/k8s-disks: these are not nodeadm nodes.
                local_storage="RAID0" if outcome is None or outcome.kubelet_on_nvme else None,
                host_directories=("opt/dlami/nvme", "opt/sagemaker"),
                instance_role_arn=group.get("ExecutionRole"),
                hugepages_2mi=_script_hugepages(response, group),
                network=_attachment(response, cluster, group, eks_name),
            )
        )


def _group_details(cluster: _HyperPodCluster) -> list[dict[str, Any]]:
    details = []
    for group in cluster.request["InstanceGroups"]:
        count = group["InstanceCount"] if cluster.status == "InService" else 0
        detail = {key: value for key, value in group.items() if key != "InstanceCount"}
        detail.update(
            CurrentCount=count,
            TargetCount=group["InstanceCount"],
            Status="InService" if cluster.status == "InService" else "Creating",
        )
        details.append(detail)
    return details


def create_cluster(self: SageMakerResponse) -> ActionResult:
    name = self._get_param("ClusterName")
    clusters = _clusters(self)
    if name in clusters:
        raise ResourceInUse(f"Resource Already Exists: Cluster with name {name} already exists.")
    groups = self._get_param("InstanceGroups") or []
    valid = _valid_instance_types()
    for group in groups:
        if group.get("InstanceType") not in valid:
            raise ValidationException(f"InstanceType {group.get('InstanceType')!r} is not a HyperPod cluster type")
        uri = (group.get("LifeCycleConfig") or {}).get("SourceS3Uri", "s3://sagemaker-")
        if not uri.startswith("s3://sagemaker-"):
            raise ValidationException(f"SourceS3Uri {uri} does not start with 's3://sagemaker-'")
    eks_name = _check_orchestrator(self, self._get_param("Orchestrator"))
    if eks_name is not None:
        _check_dependencies(eks_name)
    arn = f"arn:aws:sagemaker:{self.region}:{self.current_account}:cluster/{uuid.uuid4().hex[:12]}"
    request = {
        "InstanceGroups": groups,
        "VpcConfig": self._get_param("VpcConfig"),
        "Orchestrator": self._get_param("Orchestrator"),
        "NodeRecovery": self._get_param("NodeRecovery") or "Automatic",
        "Tags": self._get_param("Tags") or [],
    }
    cluster = _HyperPodCluster(name=name, arn=arn, request=request, created=CLOCK.now())
    if not all(_script(self, group) is not None for group in groups):
        cluster.failure = LIFECYCLE_FAILURE.format(instance="i-" + uuid.uuid4().hex[:17])
    clusters[name] = cluster
    return ActionResult({"ClusterArn": arn})


def describe_cluster(self: SageMakerResponse) -> ActionResult:
    cluster = _find(self, self._get_param("ClusterName"))
    _advance(self, cluster)
    body = {
        "ClusterArn": cluster.arn,
        "ClusterName": cluster.name,
        "ClusterStatus": cluster.status,
        "CreationTime": cluster.created,
        "InstanceGroups": _group_details(cluster),
        "VpcConfig": cluster.request["VpcConfig"],
        "NodeRecovery": cluster.request["NodeRecovery"],
    }
    if cluster.status == "Failed" and cluster.failure:
        body["FailureMessage"] = cluster.failure
    if cluster.request.get("Orchestrator"):
        body["Orchestrator"] = cluster.request["Orchestrator"]
    return ActionResult(body)


def list_clusters(self: SageMakerResponse) -> ActionResult:
    summaries = [
        {"ClusterArn": c.arn, "ClusterName": c.name, "CreationTime": c.created, "ClusterStatus": c.status}
        for c in _clusters(self).values()
    ]
    return ActionResult({"ClusterSummaries": summaries})


def list_cluster_nodes(self: SageMakerResponse) -> ActionResult:
    cluster = _find(self, self._get_param("ClusterName"))
    return ActionResult({"ClusterNodeSummaries": list(cluster.nodes)})


def delete_cluster(self: SageMakerResponse) -> ActionResult:
    cluster = _find(self, self._get_param("ClusterName"))
    del _clusters(self)[cluster.name]
    eks_name = ((cluster.request.get("Orchestrator") or {}).get("Eks") or {}).get("ClusterArn", "").rsplit("/", 1)[-1]
    if cluster.status == "InService" and eks_name:
        # SageMaker terminates the instances: their nodes leave the EKS cluster, as a node group's do.
        for group in cluster.request["InstanceGroups"]:
            for hook in list(eks_ext.NODE_GONE_HOOKS):
                hook(eks_name, _pool(cluster, group))
    return ActionResult({"ClusterArn": cluster.arn})


_MOTO_LIST_TAGS = SageMakerResponse.list_tags


def list_tags(self: SageMakerResponse) -> ActionResult | Any:
    """ListTags for HyperPod cluster ARNs (moto answers 500 for them); other ARNs go to moto.

    DescribeCluster carries no tags (SageMaker API reference), so ListTags is how teardown and the
    reaper check that a HyperPod cluster is the campaign's.
    """
    arn = str(self._get_param("ResourceArn") or "")
    if ":cluster/" not in arn:
        return _MOTO_LIST_TAGS(self)
    for cluster in _clusters(self).values():
        if cluster.arn == arn:
            return ActionResult({"Tags": cluster.request["Tags"]})
    raise ResourceNotFound(f"{arn} does not exist")


def install() -> None:
    """Replace moto's HyperPod cluster operations once per process."""
    global _INSTALLED
    if _INSTALLED:
        return
    eks_ext.install()
    operations = (create_cluster, describe_cluster, list_clusters, list_cluster_nodes, delete_cluster, list_tags)
    for operation in operations:
        setattr(SageMakerResponse, operation.__name__, operation)
    _INSTALLED = True
