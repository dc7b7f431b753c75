"""moto extension for SageMaker HyperPod clusters, as bring-up needs them.

Stock moto 5.2.5 (docs/sandbox.md §2.2) rejects ``ml.p6-*`` types with a stale allowlist,
drops ``Orchestrator``/``NodeRecovery``, is born ``InService``, and fails with HTTP 500 when the
optional ``ThreadsPerCore`` is absent. These operations replace moto's cluster operations:

- the instance type is checked against botocore's own ``ClusterInstanceType`` enum (so it tracks AWS);
- ``Orchestrator.Eks.ClusterArn`` must name an ACTIVE cluster of the sandbox's EKS;
- the cluster goes ``Creating`` → ``InService`` on the same rule as EKS (describes or sandbox clock,
  see ``eks.BEHAVIOUR``); at that moment each instance group's nodes are announced to ``eks.NODE_HOOKS``
  so the fake Kubernetes server of the orchestrator cluster provisions them;
- ``describe_cluster`` of an unknown name raises ``ResourceNotFound``, as SageMaker does.

State hangs off moto's SageMaker backend, so ``/moto-api/reset`` clears it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import botocore.session
from moto.core.exceptions import JsonRESTError
from moto.core.responses import ActionResult
from moto.eks.models import eks_backends
from moto.sagemaker.models import sagemaker_backends
from moto.sagemaker.responses import SageMakerResponse

from capserve.sandbox.aws_ext import eks as eks_ext
from capserve.sandbox.clock import CLOCK

_INSTALLED = False


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


def _valid_instance_types() -> set[str]:
    model = botocore.session.get_session().get_service_model("sagemaker")
    shape: Any = model.shape_for("ClusterInstanceType")
    return set(shape.enum)


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


def _advance(response: SageMakerResponse, cluster: _HyperPodCluster) -> None:
    if cluster.status != "Creating":
        return
    cluster.describes += 1
    if not eks_ext.activation_due(cluster.created, cluster.describes):
        return
    cluster.status = "InService"
    eks_name = _check_orchestrator(response, cluster.request.get("Orchestrator"))
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
        kube = group.get("KubernetesConfig") or {}
        subnets = (cluster.request.get("VpcConfig") or {}).get("Subnets") or []
        eks_ext.fire_node_hooks(
            eks_ext.NodePoolActivated(
                cluster_name=eks_name,
                pool=f"{cluster.name}-{group['InstanceGroupName']}",
                count=group["InstanceCount"],
                instance_type=group["InstanceType"].removeprefix("ml."),
                # HyperPod labels its nodes with the instance group; the health labels are the fake
                # Kubernetes server's (hyperpod=True), so its "health-check-failed" failure applies.
                labels={
                    **kube.get("Labels", {}),
                    "sagemaker.amazonaws.com/instance-group-name": group["InstanceGroupName"],
                },
                taints=[
                    {"key": t["Key"], "value": t.get("Value", ""), "effect": t["Effect"]}
                    for t in kube.get("Taints", [])
                ],
                zone=eks_ext.subnet_zone(response.current_account, response.region, subnets[0]) if subnets else None,
                hyperpod=True,
                # Sandbox assumption (not verified against a HyperPod node): kubelet's storage sits on the
                # instance-store NVMe, as with nodeadm's RAID0 on EKS (docs/sandbox-kubelet.md).
                local_storage="RAID0",
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
    _check_orchestrator(self, self._get_param("Orchestrator"))
    arn = f"arn:aws:sagemaker:{self.region}:{self.current_account}:cluster/{uuid.uuid4().hex[:12]}"
    request = {
        "InstanceGroups": groups,
        "VpcConfig": self._get_param("VpcConfig"),
        "Orchestrator": self._get_param("Orchestrator"),
        "NodeRecovery": self._get_param("NodeRecovery") or "Automatic",
        "Tags": self._get_param("Tags") or [],
    }
    clusters[name] = _HyperPodCluster(name=name, arn=arn, request=request, created=CLOCK.now())
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
