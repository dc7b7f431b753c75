"""The sandbox's VPC: nodes and pods reach only what moto's routes and security groups let them (reachability.py).

Each test builds a VPC in moto with boto3, makes an EKS cluster and node groups through the EKS API
(the sandbox's EKS stand-in), and watches what the fake Kubernetes' nodes and pods then observe.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from capserve_sandbox.aws import moto_sandbox
from capserve_sandbox.aws_ext import eks as eks_ext
from capserve_sandbox.kube import FakeKube, fake_kube
from capserve_sandbox.kube.network import CNI_NOT_READY
from kubernetes import client as k8s
from pydantic import SecretStr

from capserve.core.cluster.settings import KubeSettings
from capserve.core.errors import PermanentError
from capserve.core.weights.settings import WeightsSettings
from capserve.tasks import kube as tasks_kube
from capserve.tasks.netcheck import prove_gpu_network
from tests.sandbox.conftest import GPU_TAINT, condition, container_status, get, pod, until

REGION = "us-east-2"
AWS_CLI = "public.ecr.aws/aws-cli/aws-cli:2.27.50"
STAGING_IMAGE = WeightsSettings().staging_tool_image
QUICK = KubeSettings(request_timeout_s=10, watch_window_s=5)


@pytest.fixture(scope="module")
def aws() -> Iterator[None]:
    with moto_sandbox(REGION):
        yield


@pytest.fixture
def kube(aws: None) -> Iterator[FakeKube]:
    eks_ext.reset()
    with fake_kube(time_scale=600) as server:
        eks_ext.attach_fake_kube(server)
        yield server
    eks_ext.reset()


@pytest.fixture
def api(kube: FakeKube) -> Iterator[k8s.ApiClient]:
    client = tasks_kube.api_client(kube.url, kube.ca_data, lambda: SecretStr(kube.token))
    yield client
    client.close()


@dataclass
class Vpc:
    vpc: str
    public: list[str]  # two public subnets (a, b): control plane and system nodes
    private: str  # the GPU subnet in zone a
    private_table: str
    campaign_sg: str
    nat: str
    s3_endpoint: str


def build_vpc(name: str, *, nat: bool = True, s3_endpoint: bool = True, interface_endpoints: bool = False) -> Vpc:
    """The production layout: public subnets behind an internet gateway, a private GPU subnet behind a
    NAT gateway, an S3 gateway endpoint on the private route table, the campaign's self-referencing group."""
    ec2 = boto3.client("ec2", region_name=REGION)
    vpc = ec2.create_vpc(CidrBlock="10.64.0.0/16")["Vpc"]["VpcId"]
    public = []
    for index, zone in enumerate("ab"):
        subnet = ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.64.{index * 16}.0/20", AvailabilityZone=f"{REGION}{zone}")
        public.append(subnet["Subnet"]["SubnetId"])
        ec2.modify_subnet_attribute(SubnetId=public[-1], MapPublicIpOnLaunch={"Value": True})
    private = ec2.create_subnet(VpcId=vpc, CidrBlock="10.64.128.0/20", AvailabilityZone=f"{REGION}a")
    private_id = private["Subnet"]["SubnetId"]
    igw = ec2.create_internet_gateway()["InternetGateway"]["InternetGatewayId"]
    ec2.attach_internet_gateway(InternetGatewayId=igw, VpcId=vpc)
    public_table = ec2.create_route_table(VpcId=vpc)["RouteTable"]["RouteTableId"]
    ec2.create_route(RouteTableId=public_table, DestinationCidrBlock="0.0.0.0/0", GatewayId=igw)
    for subnet_id in public:
        ec2.associate_route_table(RouteTableId=public_table, SubnetId=subnet_id)
    private_table = ec2.create_route_table(VpcId=vpc)["RouteTable"]["RouteTableId"]
    ec2.associate_route_table(RouteTableId=private_table, SubnetId=private_id)
    nat_id = ""
    if nat:
        allocation = ec2.allocate_address(Domain="vpc")["AllocationId"]
        nat_id = ec2.create_nat_gateway(SubnetId=public[0], AllocationId=allocation)["NatGateway"]["NatGatewayId"]
        ec2.get_waiter("nat_gateway_available").wait(NatGatewayIds=[nat_id], WaiterConfig={"Delay": 0})
        ec2.create_route(RouteTableId=private_table, DestinationCidrBlock="0.0.0.0/0", NatGatewayId=nat_id)
    endpoint = ""
    if s3_endpoint:
        endpoint = ec2.create_vpc_endpoint(
            VpcId=vpc, ServiceName=f"com.amazonaws.{REGION}.s3", VpcEndpointType="Gateway",
            RouteTableIds=[private_table],
        )["VpcEndpoint"]["VpcEndpointId"]
    sg = ec2.create_security_group(GroupName=f"{name}-nodes", Description="campaign", VpcId=vpc)["GroupId"]
    ec2.authorize_security_group_ingress(GroupId=sg, IpPermissions=[{"IpProtocol": "-1", "UserIdGroupPairs": [
        {"GroupId": sg}]}])
    if interface_endpoints:  # what a private cluster needs for the CNI (EC2 API, the region's ECR)
        for service in ("ec2", "ecr.api", "ecr.dkr", "sts"):
            ec2.create_vpc_endpoint(
                VpcId=vpc, ServiceName=f"com.amazonaws.{REGION}.{service}", VpcEndpointType="Interface",
                SubnetIds=[private_id], SecurityGroupIds=[sg], PrivateDnsEnabled=True,
            )
    return Vpc(vpc, public, private_id, private_table, sg, nat_id, endpoint)


def make_cluster(name: str, net: Vpc) -> dict[str, Any]:
    eks = boto3.client("eks", region_name=REGION)
    eks.create_cluster(
        name=name, roleArn="arn:aws:iam::123456789012:role/cluster",
        resourcesVpcConfig={"subnetIds": net.public, "securityGroupIds": [net.campaign_sg],
                            "endpointPrivateAccess": True, "endpointPublicAccess": True},
    )
    while eks.describe_cluster(name=name)["cluster"]["status"] != "ACTIVE":
        pass
    cluster: dict[str, Any] = eks.describe_cluster(name=name)["cluster"]
    return cluster


def node_group(
    cluster: str, group: str, subnets: list[str], *, template: dict[str, Any] | None = None,
    instance_type: str = "m7i.large", taints: list[dict[str, str]] | None = None,
) -> None:
    eks = boto3.client("eks", region_name=REGION)
    extra: dict[str, Any] = {}
    if template is not None:
        made = boto3.client("ec2", region_name=REGION).create_launch_template(
            LaunchTemplateName=f"{cluster}-{group}", LaunchTemplateData=template
        )["LaunchTemplate"]
        extra["launchTemplate"] = {"id": made["LaunchTemplateId"], "version": "1"}
    else:
        extra["instanceTypes"] = [instance_type]
    eks.create_nodegroup(
        clusterName=cluster, nodegroupName=group, subnets=subnets, nodeRole="arn:aws:iam::123456789012:role/node",
        scalingConfig={"minSize": 1, "maxSize": 1, "desiredSize": 1}, labels={"capserve.io/pool": group},
        taints=taints or [], **extra,
    )
    while eks.describe_nodegroup(clusterName=cluster, nodegroupName=group)["nodegroup"]["status"] == "CREATING":
        pass


def gpu_template(groups: list[str], interfaces: int = 17) -> dict[str, Any]:
    layout = [
        {"NetworkCardIndex": card, "DeviceIndex": 0 if card == 0 else 1, "Groups": groups,
         "InterfaceType": "interface" if card == 0 else "efa"}
        for card in range(interfaces)
    ]
    return {"InstanceType": "p6-b300.48xlarge", "NetworkInterfaces": layout}


GPU_TAINTS = [{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}]


def nodes_of(kube: FakeKube, group: str) -> list[dict[str, Any]]:
    return [n for n in kube.objects("nodes") if n["metadata"]["labels"].get("eks.amazonaws.com/nodegroup") == group]


def gpu_pod(name: str, image: str, command: str | None = None) -> dict[str, Any]:
    container = {"command": ["/bin/sh", "-c", command]} if command else {}
    return pod(name, image, restartPolicy="Never", container=container,
               nodeSelector={"capserve.io/pool": "gpu"}, tolerations=[{**GPU_TAINT, "operator": "Equal"}])


def full_cluster(kube: FakeKube, name: str, *, cluster_sg_on_gpus: bool = True, **vpc: bool) -> tuple[Vpc, str]:
    net = build_vpc(name, **vpc)
    cluster = make_cluster(name, net)
    cluster_sg = cluster["resourcesVpcConfig"]["clusterSecurityGroupId"]
    node_group(name, "system", net.public)
    groups = [net.campaign_sg, cluster_sg] if cluster_sg_on_gpus else [net.campaign_sg]
    node_group(name, "gpu", [net.private], template=gpu_template(groups), taints=GPU_TAINTS)
    until(kube, lambda: any(
        p["metadata"]["name"].startswith("coredns") and (condition(p, "Ready") or {}).get("status") == "True"
        for p in kube.objects("pods")
    ), what="CoreDNS ready")
    return net, cluster_sg


# ---------------------------------------------------------------- the cluster security group


def test_eks_gives_each_cluster_a_security_group_that_admits_only_itself(kube: FakeKube) -> None:
    cluster = make_cluster("net-sg", build_vpc("net-sg"))
    group_id = cluster["resourcesVpcConfig"]["clusterSecurityGroupId"]
    group = boto3.client("ec2", region_name=REGION).describe_security_groups(GroupIds=[group_id])["SecurityGroups"][0]
    assert [pair["GroupId"] for rule in group["IpPermissions"] for pair in rule["UserIdGroupPairs"]] == [group_id]
    assert all(not rule["IpRanges"] for rule in group["IpPermissions"])


# ---------------------------------------------------------------- nodes: public IPv4 and the CNI


def test_a_node_with_many_interfaces_behind_only_an_internet_gateway_stays_not_ready(kube: FakeKube) -> None:
    net = build_vpc("net-igw")
    cluster = make_cluster("net-igw", net)
    groups = [net.campaign_sg, cluster["resourcesVpcConfig"]["clusterSecurityGroupId"]]
    # A public subnet (MapPublicIpOnLaunch, 0.0.0.0/0 → igw), 17 interfaces: EC2 gives no public IPv4.
    node_group("net-igw", "gpu", [net.public[0]], template=gpu_template(groups), taints=GPU_TAINTS)
    node = until(kube, lambda: next(iter(nodes_of(kube, "gpu")), None), what="GPU node registered")
    ready = condition(node, "Ready")
    assert ready is not None and (ready["status"], ready["message"]) == ("False", CNI_NOT_READY)
    assert "no public IPv4: it launches with 17 network interfaces" in str(kube.network.cni_failure("gpu"))


def test_the_same_node_with_one_interface_gets_a_public_address_and_becomes_ready(kube: FakeKube) -> None:
    net = build_vpc("net-one")
    cluster = make_cluster("net-one", net)
    groups = [net.campaign_sg, cluster["resourcesVpcConfig"]["clusterSecurityGroupId"]]
    node_group("net-one", "gpu", [net.public[0]], template=gpu_template(groups, interfaces=1), taints=GPU_TAINTS)
    node = until(kube, lambda: next(iter(nodes_of(kube, "gpu")), None), what="GPU node registered")
    assert condition(node, "Ready")["status"] == "True"  # type: ignore[index]


# ---------------------------------------------------------------- pods: images, DNS, S3


def test_an_image_pull_without_a_path_to_the_registry_fails_err_image_pull(kube: FakeKube) -> None:
    full_cluster(kube, "net-pull")
    # A NAT route exists, but take it away: the node keeps its CNI; Docker Hub is now out of reach.
    ec2 = boto3.client("ec2", region_name=REGION)
    table = ec2.describe_route_tables(Filters=[{"Name": "association.subnet-id", "Values": [
        nodes_subnet(kube)]}])["RouteTables"][0]["RouteTableId"]
    ec2.delete_route(RouteTableId=table, DestinationCidrBlock="0.0.0.0/0")
    kube.store.create(kube.store.resource("", "v1", "pods"), "default", gpu_pod("pull", "vllm/vllm-openai:v0.32.0"),
                      "test")

    def pulled_or_failed() -> dict[str, Any] | None:
        status = container_status(get(kube, "pods", "pull"))
        return status if status.get("state", {}).get("waiting", {}).get("reason") == "ErrImagePull" else None

    message = until(kube, pulled_or_failed, what="pull failure")["state"]["waiting"]["message"]
    assert 'Head "https://registry-1.docker.io/v2/vllm/vllm-openai/manifests/v0.32.0"' in message
    assert message.endswith(":443: i/o timeout")


def nodes_subnet(kube: FakeKube) -> str:
    return str(kube.network.pools["gpu"].subnet_id)  # type: ignore[attr-defined]


def run_tool(kube: FakeKube, name: str, command: str, image: str = AWS_CLI) -> tuple[str, str]:
    kube.store.create(kube.store.resource("", "v1", "pods"), "default", gpu_pod(name, image, command), "test")
    phase = until(kube, lambda: get(kube, "pods", name)["status"].get("phase") in ("Succeeded", "Failed")
                  and get(kube, "pods", name)["status"]["phase"], timeout_s=30, what=f"{name} finished")
    return str(phase), kube.kubelet.logs("default", name, None, previous=False, tail=None, timestamps=False)


def test_a_pods_s3_call_without_a_route_fails_could_not_connect(kube: FakeKube) -> None:
    net, _ = full_cluster(kube, "net-s3")
    boto3.client("s3", region_name=REGION).create_bucket(
        Bucket="net-s3-weights", CreateBucketConfiguration={"LocationConstraint": REGION})
    phase, log = run_tool(kube, "s3-ok", "aws s3 ls s3://net-s3-weights/ ; echo listed")
    assert phase == "Succeeded" and "Could not connect" not in log  # the image is on the node now
    ec2 = boto3.client("ec2", region_name=REGION)
    ec2.delete_vpc_endpoints(VpcEndpointIds=[net.s3_endpoint])
    ec2.delete_route(RouteTableId=net.private_table, DestinationCidrBlock="0.0.0.0/0")
    phase, log = run_tool(kube, "s3-cut", "aws s3 ls s3://net-s3-weights/")
    assert phase == "Failed"
    assert f'Could not connect to the endpoint URL: "https://net-s3-weights.s3.{REGION}.amazonaws.com/' in log


def test_a_pods_python_sdk_call_without_a_route_fails_could_not_connect(kube: FakeKube) -> None:
    # The staging Job's image: its python3's botocore goes where the pod's S3 calls would (aws_shim.SDK_HOOK).
    net, _ = full_cluster(kube, "net-sdk")
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket="net-sdk-weights", CreateBucketConfiguration={"LocationConstraint": REGION})
    s3.put_object(Bucket="net-sdk-weights", Key="shard", Body=b"12345")
    get = ("python3 -c \"import boto3; s3 = boto3.client('s3'); "
           "print('got', len(s3.get_object(Bucket='net-sdk-weights', Key='shard')['Body'].read()))\"")
    phase, log = run_tool(kube, "sdk-ok", get, image=STAGING_IMAGE)
    assert phase == "Succeeded" and "got 5" in log, log
    ec2 = boto3.client("ec2", region_name=REGION)
    ec2.delete_vpc_endpoints(VpcEndpointIds=[net.s3_endpoint])
    ec2.delete_route(RouteTableId=net.private_table, DestinationCidrBlock="0.0.0.0/0")
    phase, log = run_tool(kube, "sdk-cut", get, image=STAGING_IMAGE)
    assert phase == "Failed" and "got" not in log
    assert f'Could not connect to the endpoint URL: "https://net-sdk-weights.s3.{REGION}.amazonaws.com/shard"' in log


def test_with_only_the_campaign_group_a_gpu_pod_has_no_dns(kube: FakeKube) -> None:
    full_cluster(kube, "net-dns", cluster_sg_on_gpus=False)  # the launch template as it was
    _, log = run_tool(kube, "dns", "getent hosts kubernetes.default || echo unresolved; "
                                       "aws s3 ls s3://any-bucket/ || true")
    assert "unresolved" in log
    assert f'Could not connect to the endpoint URL: "https://any-bucket.s3.{REGION}.amazonaws.com/' in log


# ---------------------------------------------------------------- the bring-up network proof


def gpu_node_names(kube: FakeKube) -> list[str]:
    return [n["metadata"]["name"] for n in nodes_of(kube, "gpu")]


def test_the_proof_passes_on_the_full_network(kube: FakeKube, api: k8s.ApiClient) -> None:
    full_cluster(kube, "net-proof")
    passed = prove_gpu_network.fn(api, gpu_node_names(kube), REGION, "net-proof", QUICK, timeout_s=30)
    steps = ["dns kubernetes.default", "reach kubernetes.default", f"dns s3.{REGION}.amazonaws.com",
             f"reach s3.{REGION}.amazonaws.com"]
    assert passed == {gpu_node_names(kube)[0]: steps}
    assert [p for p in kube.objects("pods") if p["metadata"]["name"].startswith("capserve-netcheck")] == []


def test_the_proof_names_the_node_and_the_missing_dns_rule(kube: FakeKube, api: k8s.ApiClient) -> None:
    _, cluster_sg = full_cluster(kube, "net-rule")
    # The cluster group's self rule is what lets GPU pods reach CoreDNS: remove it.
    ec2 = boto3.client("ec2", region_name=REGION)
    ec2.revoke_security_group_ingress(GroupId=cluster_sg, IpPermissions=[
        {"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": cluster_sg}]}])
    node = gpu_node_names(kube)[0]
    with pytest.raises(PermanentError, match=rf"{node}: dns kubernetes.default: did not resolve") as raised:
        prove_gpu_network.fn(api, [node], REGION, "net-rule", QUICK, timeout_s=30)
    assert f"dns s3.{REGION}.amazonaws.com: did not resolve" in str(raised.value)


def test_the_proof_names_the_missing_route_to_s3(kube: FakeKube, api: k8s.ApiClient) -> None:
    net, _ = full_cluster(kube, "net-route")
    node = gpu_node_names(kube)[0]
    prove_gpu_network.fn(api, [node], REGION, "net-route", QUICK, timeout_s=30)  # pulls the image while it can
    ec2 = boto3.client("ec2", region_name=REGION)
    ec2.delete_vpc_endpoints(VpcEndpointIds=[net.s3_endpoint])
    ec2.delete_route(RouteTableId=net.private_table, DestinationCidrBlock="0.0.0.0/0")
    with pytest.raises(PermanentError, match=rf"{node}: reach s3.{REGION}.amazonaws.com: curl: \(28\)"):
        prove_gpu_network.fn(api, [node], REGION, "net-route", QUICK, timeout_s=30)


def test_the_proof_names_an_image_pull_that_has_no_path(kube: FakeKube, api: k8s.ApiClient) -> None:
    # Endpoints for EC2, ECR and S3 (the CNI starts), no NAT gateway: no way to public.ecr.aws.
    full_cluster(kube, "net-nat", nat=False, interface_endpoints=True)
    node = gpu_node_names(kube)[0]
    with pytest.raises(PermanentError, match=rf"{node}: image pull failed \(ErrImagePull\).*public.ecr.aws"):
        prove_gpu_network.fn(api, [node], REGION, "net-nat", QUICK, timeout_s=30)



def test_a_headless_rank_without_dns_cannot_resolve_its_leader(kube: FakeKube) -> None:
    full_cluster(kube, "net-lws", cluster_sg_on_gpus=False)  # GPU pods cannot reach CoreDNS
    command = ("vllm serve /mnt/k8s-disks/0/weights --served-model-name m --nnodes 2 --node-rank 1 "
               "--master-addr k3-0.k3.default --tensor-parallel-size 8 --headless")
    kube.store.create(kube.store.resource("", "v1", "pods"), "default",
                      gpu_pod("rank", "vllm/vllm-openai:v0.32.0", command), "test")
    phase = until(kube, lambda: get(kube, "pods", "rank")["status"].get("phase") in ("Succeeded", "Failed")
                  and get(kube, "pods", "rank")["status"]["phase"], timeout_s=30, what="rank finished")
    log = kube.kubelet.logs("default", "rank", None, previous=False, tail=None, timestamps=False)
    assert phase == "Failed"
    assert "socket.gaierror: [Errno -3] Temporary failure in name resolution (k3-0.k3.default)" in log


# ---------------------------------------------------------------- HyperPod instance groups in the VPC


HYPERPOD_SCRIPT_FAILURE = "Lifecycle scripts did not run successfully"


def hyperpod_on(
    kube: FakeKube, api: k8s.ApiClient, name: str, net: Vpc, *, cluster_group: bool = True
) -> dict[str, Any]:
    """An EKS cluster with its system nodes and the HyperPod prerequisites, then a one-instance HyperPod
    cluster in the VPC's private subnet; returns DescribeCluster once it left Creating."""
    from capserve.core.cluster.hyperpod import dependencies, on_create_script

    cluster = make_cluster(name, net)
    node_group(name, "system", net.public)
    tasks_kube.apply_addons(api, dependencies(REGION, name), QUICK)
    bucket = f"sagemaker-{name}"
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": REGION})
    s3.put_object(Bucket=bucket, Key="lifecycle/on_create.sh", Body=on_create_script())
    cluster_sg = cluster["resourcesVpcConfig"]["clusterSecurityGroupId"]
    groups = [net.campaign_sg, cluster_sg] if cluster_group else [net.campaign_sg]
    sagemaker = boto3.client("sagemaker", region_name=REGION)
    sagemaker.create_cluster(
        ClusterName=f"{name}-hp",
        InstanceGroups=[{
            "InstanceGroupName": "gpu", "InstanceType": "ml.p6-b300.48xlarge", "InstanceCount": 1,
            "ExecutionRole": "arn:aws:iam::123456789012:role/hp",
            "LifeCycleConfig": {"SourceS3Uri": f"s3://{bucket}/lifecycle/", "OnCreate": "on_create.sh"},
            "KubernetesConfig": {"Labels": {"capserve.io/pool": "gpu"},
                                 "Taints": [{"Key": "nvidia.com/gpu", "Value": "true", "Effect": "NoSchedule"}]},
        }],
        VpcConfig={"SecurityGroupIds": groups, "Subnets": [net.private]},
        Orchestrator={"Eks": {"ClusterArn": cluster["arn"]}},
    )
    while (described := sagemaker.describe_cluster(ClusterName=f"{name}-hp"))["ClusterStatus"] == "Creating":
        pass  # the sandbox's HyperPod leaves Creating after a few describes
    return described


def test_hyperpod_in_a_subnet_with_no_way_to_s3_fails_on_its_lifecycle_script(
    kube: FakeKube, api: k8s.ApiClient
) -> None:
    # No NAT route, no S3 endpoint: the instances cannot fetch on_create.sh (SageMaker's VPC prerequisites).
    described = hyperpod_on(kube, api, "net-hp-off", build_vpc("net-hp-off", nat=False, s3_endpoint=False))
    assert described["ClusterStatus"] == "Failed"
    assert HYPERPOD_SCRIPT_FAILURE in described["FailureMessage"]
    assert nodes_of(kube, "net-hp-off-hp-gpu") == []


def test_hyperpod_nodes_with_only_an_s3_endpoint_stay_not_ready(kube: FakeKube, api: k8s.ApiClient) -> None:
    # The script comes through the S3 gateway endpoint; no NAT: the VPC CNI reaches neither EC2 nor ECR.
    described = hyperpod_on(kube, api, "net-hp-s3", build_vpc("net-hp-s3", nat=False))
    assert described["ClusterStatus"] == "InService"
    node = until(kube, lambda: next(iter(nodes_of(kube, "net-hp-s3-hp-gpu")), None), what="HyperPod node registered")
    ready = condition(node, "Ready")
    assert ready is not None and (ready["status"], ready["message"]) == ("False", CNI_NOT_READY)
    assert "no path to ec2.us-east-2.amazonaws.com" in str(kube.network.cni_failure("net-hp-s3-hp-gpu"))


def test_hyperpod_nodes_on_the_campaigns_network_pass_the_network_proof(kube: FakeKube, api: k8s.ApiClient) -> None:
    described = hyperpod_on(kube, api, "net-hp-ok", build_vpc("net-hp-ok"))
    assert described["ClusterStatus"] == "InService"
    node = until(kube, lambda: next(iter(nodes_of(kube, "net-hp-ok-hp-gpu")), None), what="HyperPod node registered")
    assert condition(node, "Ready")["status"] == "True"  # type: ignore[index]
    name = node["metadata"]["name"]
    assert prove_gpu_network.fn(api, [name], REGION, "net-hp-ok", QUICK, timeout_s=30)[name][-1] == (
        f"reach s3.{REGION}.amazonaws.com"
    )
    # DeleteCluster terminates the instances: the node leaves the EKS cluster and the VPC model forgets it.
    boto3.client("sagemaker", region_name=REGION).delete_cluster(ClusterName="net-hp-ok-hp")
    assert nodes_of(kube, "net-hp-ok-hp-gpu") == [] and "net-hp-ok-hp-gpu" not in kube.network.pools  # type: ignore[attr-defined]


def test_hyperpod_nodes_without_the_cluster_group_have_no_dns(kube: FakeKube, api: k8s.ApiClient) -> None:
    hyperpod_on(kube, api, "net-hp-sg", build_vpc("net-hp-sg"), cluster_group=False)
    node = until(kube, lambda: next(iter(nodes_of(kube, "net-hp-sg-hp-gpu")), None), what="HyperPod node registered")
    name = node["metadata"]["name"]
    with pytest.raises(PermanentError, match=rf"{name}: dns kubernetes.default: did not resolve"):
        prove_gpu_network.fn(api, [name], REGION, "net-hp-sg", QUICK, timeout_s=30)
