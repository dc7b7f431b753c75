"""The bring_up flow end to end on the sandbox: moto (+ EKS/HyperPod extensions) and the fake Kubernetes API."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from capserve_sandbox.aws import moto_sandbox
from capserve_sandbox.aws_ext import eks as eks_ext
from capserve_sandbox.kube import FakeKube, fake_kube
from capserve_sandbox.kube.instances import node_shape
from pydantic import SecretStr

from capserve.core.cluster import eks as eks_build
from capserve.core.cluster.settings import BringUpSettings, KubeSettings
from capserve.core.errors import DeadlineError, PermanentError
from capserve.core.lease import Lease
from capserve.core.spec import CampaignSpec, parse_spec
from capserve.core.timeline import TimeFigures
from capserve.flows.bring_up import bring_up
from capserve.tasks.manifests import recording

REGION = "us-east-2"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FAST = BringUpSettings(poll_seconds=0, kube=KubeSettings(nodes_ready_timeout_s=20, addons_ready_timeout_s=20))
FIGURES = TimeFigures()  # the time model the bring-up predicts the join with


@pytest.fixture(scope="module")
def aws() -> Iterator[None]:
    with moto_sandbox(REGION):
        yield


@pytest.fixture
def kube(aws: None) -> Iterator[FakeKube]:
    eks_ext.reset()
    with fake_kube() as server:
        yield server
    eks_ext.reset()


def make_spec(name: str, kind: str = "eks", reservation: str = "cr-0123456789abcdef0", **cluster: Any) -> CampaignSpec:
    return parse_spec(
        {
            "name": name,
            "model": {"catalog": "tiny-k3"},
            "capacity": {"provider": "existing-reservation", "instance_type": "p6-b300.48xlarge",
                         "regions": [REGION], "reservation_id": reservation},
            "cluster": {"kind": kind, **cluster},
            "weights": {"s3_bucket": "capserve-weights"},
        }
    )


def make_lease(reservation: str = "cr-0123456789abcdef0", count: int = 2, hours_left: float = 48) -> Lease:
    now = datetime.now(UTC)
    provider = "sagemaker-training-plan" if reservation.startswith("arn:") else "ec2-capacity-block"
    return Lease(
        provider=provider, region=REGION, availability_zone=f"{REGION}a", reservation_id=reservation,
        start=now - timedelta(hours=1), end=now + timedelta(hours=hours_left), instance_type="p6-b300.48xlarge",
        instance_count=count, upfront_fee=1.0,
    )


def test_eks_bring_up_then_a_rerun_creates_nothing(kube: FakeKube, tmp_path: Path) -> None:
    eks_ext.attach_fake_kube(kube)
    spec, lease = make_spec("flow-eks"), make_lease()
    with recording(tmp_path / "manifests"):
        result = bring_up(spec, lease, FAST)
    section = result.report_section()
    join = section.pop("node_join")
    assert section == {"kind": "eks", "name": "capserve-flow-eks", "nodes_ready": 2, "gpus_allocatable": 16}
    # The nodes' join as the API server stamped it, beside the time model's figure for a p6-b300 node group.
    assert join["predicted_s"] == FIGURES.launch_and_join_s, join
    assert join["ready_at"] <= join["usable_at"] and join["measured_s"] > 0, join
    assert "eks-nodegroup/capserve-flow-eks-gpu" in result.created and result.endpoint == kube.url
    # The system node group came up before the add-ons: on-demand CPU nodes for CoreDNS and the controllers.
    assert "eks-nodegroup/capserve-flow-eks-system" in result.created
    assert result.system_pool is not None
    assert (result.system_pool.instance_type, result.system_pool.node_count) == ("m7i.large", 2)
    assert "2 × m7i.large on demand" in result.markdown()
    assert set(result.node_storage_bytes) == set(result.node_names)
    # The GPU node group is in the private subnet; the control plane and the system nodes in public ones.
    network = result.network
    assert network is not None and network.gpu_subnet_id not in network.control_plane_subnet_ids
    eks = boto3.client("eks")
    gpu_group = eks.describe_nodegroup(clusterName="capserve-flow-eks", nodegroupName="capserve-flow-eks-gpu")
    assert gpu_group["nodegroup"]["subnets"] == [network.gpu_subnet_id]
    system = eks.describe_nodegroup(clusterName="capserve-flow-eks", nodegroupName="capserve-flow-eks-system")
    assert system["nodegroup"]["subnets"] == list(network.control_plane_subnet_ids)
    cluster = eks.describe_cluster(name="capserve-flow-eks")["cluster"]["resourcesVpcConfig"]
    assert cluster["subnetIds"] == list(network.control_plane_subnet_ids)
    assert f"NAT gateway {network.nat_gateway_id}" in result.markdown() and "| private |" in result.markdown()
    # The GPU interfaces carry the campaign group and the cluster group EKS made (CoreDNS admits only that).
    assert result.gpu_interface_security_groups == (network.security_group_id, cluster["clusterSecurityGroupId"])
    # The network proof ran on each GPU node (and cleaned up after itself).
    proofs = {e["involvedObject"]["name"] for e in kube.objects("events") if e["reason"] == "Scheduled"
              and e["involvedObject"]["name"].startswith("capserve-netcheck-")}
    assert len(proofs) == 2 and not [p for p in kube.objects("pods") if p["metadata"]["name"] in proofs]
    # The add-ons the serving stage needs were applied.
    daemonsets = {o["metadata"]["name"] for o in kube.objects("daemonsets", "apps")}
    assert any("nvidia" in name for name in daemonsets) and any("efa" in name for name in daemonsets)
    assert "fsx-csi-node" not in daemonsets  # weights on NVMe: no FSx CSI driver to pull and wait for
    # LWS as its release installs it, written to the report folder (the Secret's data redacted) ...
    written = {path.name.split("-", 1)[1] for path in (tmp_path / "manifests").glob("*.yaml")}
    assert {"MutatingWebhookConfiguration-lws-mutating-webhook-configuration.yaml",
            "ValidatingWebhookConfiguration-lws-validating-webhook-configuration.yaml",
            "Secret-lws-system-lws-webhook-server-cert.yaml", "Service-lws-system-lws-webhook-service.yaml",
            "Deployment-lws-system-lws-controller-manager.yaml"} <= written
    # ... proven by a dry-run create through its webhooks, which stored nothing.
    assert kube.objects("leaderworkersets", "leaderworkerset.x-k8s.io") == []
    assert kube.cluster.lws_manager.ready()

    eks_ext.clear_calls()
    again = bring_up(spec, lease, FAST)
    assert again.created == () and again.nodes_ready == 2
    assert [c for c in eks_ext.calls() if c.action.startswith(("Create", "Attach", "Associate"))] == []
    assert len(kube.objects("nodes")) == 4  # 2 GPU + 2 system nodes: no second node group, no second set


@pytest.mark.parametrize(
    ("failure", "cause"), [("no-gpus", "GPUs not advertised"), ("never-ready", "NotReady")]
)
def test_a_broken_node_ends_the_stage_naming_node_and_cause(kube: FakeKube, failure: str, cause: str) -> None:
    eks_ext.attach_fake_kube(kube, failure=failure)
    settings = FAST.model_copy(update={"kube": KubeSettings(nodes_ready_timeout_s=2, addons_ready_timeout_s=20)})
    with pytest.raises(PermanentError) as raised:
        bring_up(make_spec(f"flow-{failure}"), make_lease(count=1), settings)
    message = str(raised.value)
    assert "not ready after 2 s" in message and cause in message
    gpu_nodes = [n for n in kube.objects("nodes") if n["metadata"]["labels"].get("capserve.io/pool") == "gpu"]
    assert gpu_nodes[0]["metadata"]["name"] in message


def test_without_the_cluster_group_on_the_gpu_interfaces_the_network_proof_fails(
    kube: FakeKube, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The launch template as it was: the campaign group only, so GPU pods cannot reach CoreDNS.
    monkeypatch.setattr(eks_build, "node_security_groups", lambda campaign, cluster: [campaign])
    eks_ext.attach_fake_kube(kube)
    expected = r"network proof failed on 1 of 1 GPU node\(s\): ip-[0-9-]+\.ec2\.internal: dns kubernetes.default"
    with pytest.raises(PermanentError, match=expected):
        bring_up(make_spec("flow-nodns"), make_lease(count=1), FAST)


def test_hyperpod_bring_up_on_a_training_plan(kube: FakeKube) -> None:
    eks_ext.attach_fake_kube(kube)
    plan = f"arn:aws:sagemaker:{REGION}:123456789012:training-plan/flow-hp"
    result = bring_up(make_spec("flow-hp", kind="hyperpod", reservation=plan), make_lease(plan, count=1), FAST)
    assert (result.kind, result.nodes_ready, result.gpus_allocatable) == ("hyperpod", 1, 8)
    assert "hyperpod-cluster/capserve-flow-hp-hp" in result.created
    # HyperPod's instances go in the private GPU subnet too.
    described = boto3.client("sagemaker").describe_cluster(ClusterName="capserve-flow-hp-hp")
    assert result.network is not None and described["VpcConfig"]["Subnets"] == [result.network.gpu_subnet_id]
    # The report names the groups HyperPod's interfaces carry: the campaign's and the EKS cluster group.
    assert result.gpu_interface_security_groups == tuple(described["VpcConfig"]["SecurityGroupIds"])
    assert len(result.gpu_interface_security_groups) == 2
    # Its prerequisites came first: the chart's dependencies on the EKS cluster, the script in a sagemaker- bucket.
    assert "s3-bucket/sagemaker-flow-hp-123456789012" in result.created
    daemonsets = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in kube.objects("daemonsets", "apps")}
    assert ("aws-hyperpod", "health-monitoring-agent") in daemonsets
    # A HyperPod node is no nodeadm node: its NVMe is at /opt/dlami/nvme, and there is no /mnt/k8s-disks.
    (node,) = result.node_names
    assert kube.kubelet.layout.host_path(node, "/opt/dlami/nvme").is_dir()
    assert not kube.kubelet.layout.host_path(node, "/mnt/k8s-disks/0").exists()
    # HyperPod spells the node's instance type its own way; one node gets no deep health checks.
    (labels,) = [n["metadata"]["labels"] for n in kube.objects("nodes") if n["metadata"]["name"] == node]
    assert labels["node.kubernetes.io/instance-type"] == "ml.p6-b300.48xlarge"
    assert "OnStartDeepHealthChecks" not in described["InstanceGroups"][0]
    # The lifecycle script moved the kubelet's directory onto the NVMe: ephemeral storage is the array's.
    (storage,) = [n["status"]["capacity"]["ephemeral-storage"] for n in kube.objects("nodes")
                  if n["metadata"]["name"] == node]
    assert storage == node_shape("p6-b300.48xlarge", local_storage="RAID0").capacity()["ephemeral-storage"]


def test_a_two_node_hyperpod_layout_gets_its_huge_pages_from_the_lifecycle_script(kube: FakeKube) -> None:
    # Two nodes per replica: the vLLM pods request hugepages-2Mi for EFA. HyperPod has no launch template,
    # so capserve's lifecycle script allocates them; without it readiness would find none on either node.
    eks_ext.attach_fake_kube(kube)
    plan = f"arn:aws:sagemaker:{REGION}:123456789012:training-plan/flow-hp2"
    result = bring_up(make_spec("flow-hp2", kind="hyperpod", reservation=plan), make_lease(plan, count=2), FAST)
    assert (result.kind, result.nodes_ready) == ("hyperpod", 2)
    script = boto3.client("s3").get_object(Bucket="sagemaker-flow-hp2-123456789012", Key="lifecycle/on_create.sh")
    assert b"\nsysctl -w vm.nr_hugepages=5128\n" in script["Body"].read()
    capacity = {n["metadata"]["name"]: n["status"]["capacity"].get("hugepages-2Mi") for n in kube.objects("nodes")
                if n["metadata"]["name"] in result.node_names}
    assert capacity == dict.fromkeys(result.node_names, "10256Mi")
    # The layout crosses nodes: HyperPod tests EFA and NCCL between them first, and the EFA plugin runs on
    # nodes labelled ml.<type> (readiness waited for their vpc.amazonaws.com/efa).
    described = boto3.client("sagemaker").describe_cluster(ClusterName="capserve-flow-hp2-hp")
    assert described["InstanceGroups"][0]["OnStartDeepHealthChecks"] == ["InstanceStress", "InstanceConnectivity"]
    efa = {n["metadata"]["labels"]["node.kubernetes.io/instance-type"]: n["status"]["allocatable"].get(
        "vpc.amazonaws.com/efa") for n in kube.objects("nodes") if n["metadata"]["name"] in result.node_names}
    assert efa == {"ml.p6-b300.48xlarge": "16"}
    predicted = result.report_section()["node_join"]["predicted_s"]
    assert predicted == FIGURES.launch_and_join_s + FIGURES.deep_health_checks_s


BIND_MOUNT_SCRIPT = Path(__file__).parents[1] / "data" / "hyperpod" / "on_create_bind_mount.sh"


def test_the_hyperpod_example_with_a_script_that_mounts_over_the_kubelet_directory_never_gets_nodes(
    kube: FakeKube, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The lifecycle script capserve shipped before: it bind-mounts an empty directory over /var/lib/kubelet,
    # hiding the kubeconfig the AMI keeps there. HyperPod reports the cluster InService; no node ever joins.
    from capserve.core.cluster import hyperpod as hyperpod_build

    old = BIND_MOUNT_SCRIPT.read_text()
    monkeypatch.setattr(hyperpod_build, "on_create_script",
                        lambda hugepages_2mi_pages=0: old.replace("#CAPSERVE_HUGEPAGES\n", "").encode())
    eks_ext.attach_fake_kube(kube)
    data = yaml.safe_load((EXAMPLES / "kimi-k3-hyperpod-sandbox.yaml").read_text())
    spec = parse_spec({**data, "name": "flow-hpold"})
    plan = f"arn:aws:sagemaker:{REGION}:123456789012:training-plan/flow-hpold"
    settings = FAST.model_copy(update={"kube": KubeSettings(nodes_ready_timeout_s=5, addons_ready_timeout_s=20)})
    with pytest.raises(PermanentError, match="not ready after 5 s"):
        bring_up(spec, make_lease(plan, count=1), settings)
    described = boto3.client("sagemaker").describe_cluster(ClusterName="capserve-flow-hpold-hp")
    assert described["ClusterStatus"] == "InService"
    assert [n for n in kube.objects("nodes") if n["metadata"]["labels"].get("capserve.io/pool") == "gpu"] == []


def test_sandbox_hyperpod_refuses_an_eks_cluster_without_the_hyperpod_dependencies(kube: FakeKube) -> None:
    import boto3
    from botocore.exceptions import ClientError

    from capserve.tasks import kube as tasks_kube

    eks_ext.attach_fake_kube(kube)
    eks = boto3.client("eks", region_name=REGION)
    arn = eks.create_cluster(name="bare-eks", roleArn="arn:aws:iam::123456789012:role/r",
                             resourcesVpcConfig={"subnetIds": []})["cluster"]["arn"]
    while eks.describe_cluster(name="bare-eks")["cluster"]["status"] != "ACTIVE":
        pass  # the sandbox's EKS turns ACTIVE after a few describes
    group = {"InstanceGroupName": "gpu", "InstanceType": "ml.p6-b300.48xlarge", "InstanceCount": 1,
             "ExecutionRole": "arn:aws:iam::123456789012:role/x",
             "LifeCycleConfig": {"SourceS3Uri": "s3://sagemaker-x/lifecycle/", "OnCreate": "on_create.sh"}}
    sagemaker = boto3.client("sagemaker", region_name=REGION)
    request = {"ClusterName": "bare-hp", "InstanceGroups": [group], "Orchestrator": {"Eks": {"ClusterArn": arn}}}
    with pytest.raises(ClientError, match="install the HyperPod dependencies Helm chart first") as refused:
        sagemaker.create_cluster(**request)
    assert refused.value.response["Error"]["Code"] == "ValidationException"
    from capserve.core.cluster.hyperpod import dependencies  # capserve's vendored chart objects

    api = tasks_kube.api_client(kube.url, None, lambda: SecretStr(kube.token))
    tasks_kube.apply_addons(api, dependencies(REGION, "bare"), KubeSettings())
    assert sagemaker.create_cluster(**request)["ClusterArn"].startswith("arn:aws:sagemaker:")


def test_bring_up_refuses_when_the_drain_is_too_near(aws: None) -> None:
    eks_ext.clear_calls()
    spec = make_spec("flow-late", min_serving_minutes=120)
    with pytest.raises(DeadlineError, match="min_serving_minutes is 120"):
        bring_up(spec, make_lease(hours_left=2), FAST)  # drain at end-45min leaves 75 min
    assert eks_ext.calls() == []  # refused before touching AWS
