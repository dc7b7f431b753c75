"""Nodes join as EKS makes them: shapes from EC2's data, storage from nodeadm, devices from the plugins."""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from importlib import resources
from typing import Any

import boto3
import kubernetes_validate
import pytest
from capserve_sandbox.aws import moto_sandbox
from capserve_sandbox.aws_ext import eks as eks_ext
from capserve_sandbox.aws_ext.nodeadm import NodeConfigError, hugepages_2mi, local_storage_strategy, root_volume_gib
from capserve_sandbox.clock import CLOCK
from capserve_sandbox.kube import FakeKube, NodeFailure, fake_kube
from capserve_sandbox.kube.instances import CPU_TYPES, GPU_NETWORK, NVME_DISKS, max_pods, node_shape
from capserve_sandbox.kube.nodes import node_object
from kubernetes import client as k8s

from capserve.core.catalog.hardware import INSTANCE_TYPES
from capserve.core.cluster.addons import AddonOptions, efa_device_plugin, nvidia_device_plugin
from capserve.core.cluster.nvme import gpu_user_data_base64, parse_quantity
from capserve.tasks import kube as tasks_kube
from tests.sandbox.conftest import GPU_LABELS, GPU_TAINT, get, until

GIB = 2**30


def nodeconfig(strategy: str, *, mime: bool = True) -> str:
    config = (
        "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\n"
        f"spec:\n  instance:\n    localStorage:\n      strategy: {strategy}\n"
    )
    if not mime:
        return base64.b64encode(config.encode()).decode()
    text = (
        'MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="B"\n\n'
        f"--B\nContent-Type: text/x-shellscript\n\n#!/bin/sh\necho hi\n\n"
        f"--B\nContent-Type: application/node.eks.aws\n\n{config}\n--B--\n"
    )
    return base64.b64encode(text.encode()).decode()


# ----------------------------------------------------------------------------- shapes


def moto_instance_types() -> dict[str, Any]:
    data = resources.files("moto.ec2").joinpath("resources/instance_types.json.gz").read_bytes()
    types: dict[str, Any] = json.loads(gzip.decompress(data))
    return types


def test_instance_figures_match_ec2s_data() -> None:
    ec2 = moto_instance_types()
    for name, cpu in CPU_TYPES.items():
        info = ec2[name]
        assert info["VCpuInfo"]["DefaultVCpus"] == cpu.vcpus, name
        assert info["MemoryInfo"]["SizeInMiB"] == cpu.memory_mib, name
        assert info["NetworkInfo"]["NetworkCards"][0]["MaximumNetworkInterfaces"] == cpu.card0_interfaces, name
        assert info["NetworkInfo"]["Ipv4AddressesPerInterface"] == cpu.ipv4_per_interface, name
    for name, (interfaces, addresses) in GPU_NETWORK.items():
        info = ec2[name]
        assert info["InstanceStorageInfo"]["Disks"][0]["Count"] == NVME_DISKS[name], name
        assert info["NetworkInfo"]["NetworkCards"][0]["MaximumNetworkInterfaces"] == interfaces, name
        assert info["NetworkInfo"]["Ipv4AddressesPerInterface"] == addresses, name
    assert set(GPU_NETWORK) == set(INSTANCE_TYPES)


def test_allocatable_follows_nodeadms_reservations() -> None:
    small = node_shape("m7i.large")
    assert max_pods(3, 10) == small.max_pods == 29  # eni-max-pods.txt: m7i.large 29
    allocatable = small.allocatable()
    assert allocatable["cpu"] == "1930m"  # 2000m - (60m + 10m)
    assert allocatable["memory"] == f"{(8192 - (255 + 11 * 29) - 100) * 1024}Ki"
    assert allocatable["ephemeral-storage"] == str(20 * GIB - GIB - 2 * GIB)  # 20 GiB root - 1 GiB - 10 %
    gpu = node_shape("p6-b300.48xlarge", local_storage="RAID0")
    assert gpu.ephemeral_bytes == INSTANCE_TYPES["p6-b300.48xlarge"].local_nvme_bytes
    assert gpu.capacity()["hugepages-2Mi"] == "0Mi"  # none unless the boot configuration allocates them
    paged = node_shape("p6-b300.48xlarge", local_storage="RAID0", hugepages_2mi=5128)
    assert paged.allocatable()["hugepages-2Mi"] == "10256Mi"
    assert parse_quantity(gpu.allocatable()["memory"]) - parse_quantity(paged.allocatable()["memory"]) == 10256 * 2**20
    assert node_shape("p6-b300.48xlarge").ephemeral_bytes == 20 * GIB
    assert node_shape("p6-b300.48xlarge", local_storage="RAID10").ephemeral_bytes == gpu.ephemeral_bytes // 2
    with pytest.raises(ValueError, match="no node shape for instance type 'x1.huge'"):
        node_shape("x1.huge")


@pytest.mark.parametrize("version", ["1.33", "1.34"])
def test_node_objects_validate_strict(version: str) -> None:
    shape = node_shape("p6-b300.48xlarge")
    for ready in (True, False):
        for failure in (None, *NodeFailure):
            made = node_object(
                "ip-10-64-0-10.ec2.internal",
                "gpu",
                shape=shape,
                labels=GPU_LABELS,
                taints=[GPU_TAINT],
                failure=failure,
                health_labels=True,
                ready=ready,
                zone="us-east-2a",
                devices={"nvidia.com/gpu": 8},
            )
            kubernetes_validate.validate(made, version, strict=True)
            not_ready = any(t["key"] == "node.kubernetes.io/not-ready" for t in made["spec"]["taints"])
            assert not_ready == (not ready or failure is NodeFailure.NEVER_READY)


# ----------------------------------------------------------------------------- devices


def test_gpus_and_efa_appear_only_once_their_device_plugins_run(kube: FakeKube, api: k8s.ApiClient) -> None:
    (name,) = kube.provision_nodes("gpu", 1, labels=GPU_LABELS, taints=[GPU_TAINT])
    allocatable = get(kube, "nodes", name)["status"]["allocatable"]
    assert "nvidia.com/gpu" not in allocatable and "vpc.amazonaws.com/efa" not in allocatable
    options = AddonOptions(campaign_id="t", gpu_node_labels=GPU_LABELS)
    for manifest in nvidia_device_plugin(options):
        tasks_kube.apply(api, manifest)
    until(kube, lambda: get(kube, "nodes", name)["status"]["allocatable"].get("nvidia.com/gpu") == "8")
    assert "vpc.amazonaws.com/efa" not in get(kube, "nodes", name)["status"]["allocatable"]
    for manifest in efa_device_plugin(options):
        tasks_kube.apply(api, manifest)
    until(kube, lambda: get(kube, "nodes", name)["status"]["allocatable"].get("vpc.amazonaws.com/efa") == "16")
    # The plugin goes away: the resource stays registered, with nothing allocatable.
    k8s.AppsV1Api(api).delete_namespaced_daemon_set("nvidia-device-plugin-daemonset", "kube-system")
    until(kube, lambda: get(kube, "nodes", name)["status"]["allocatable"].get("nvidia.com/gpu") == "0")


def test_a_node_whose_driver_is_broken_advertises_no_gpu(kube: FakeKube, api: k8s.ApiClient) -> None:
    (name,) = kube.provision_nodes("gpu", 1, labels=GPU_LABELS, failure="no-gpus")
    for manifest in nvidia_device_plugin(AddonOptions(campaign_id="t", gpu_node_labels=GPU_LABELS)):
        tasks_kube.apply(api, manifest)
    until(kube, lambda: get(kube, "nodes", name)["status"]["allocatable"].get("nvidia.com/gpu") == "0")


def test_builtin_plugins_advertise_at_registration(kube: FakeKube) -> None:
    (name,) = kube.provision_nodes("gpu", 1, device_plugins="builtin")
    assert get(kube, "nodes", name)["status"]["allocatable"]["nvidia.com/gpu"] == "8"


# ----------------------------------------------------------------------------- nodeadm


def test_nodeadm_local_storage_from_user_data() -> None:
    assert local_storage_strategy(nodeconfig("RAID0")) == "RAID0"
    assert local_storage_strategy(nodeconfig("Mount", mime=False)) == "Mount"
    assert local_storage_strategy(base64.b64encode(b"#!/bin/bash\necho no nodeconfig\n").decode()) is None
    assert local_storage_strategy(None) is None
    with pytest.raises(NodeConfigError, match="'RAID5' is not one of RAID0, RAID10, Mount"):
        local_storage_strategy(nodeconfig("RAID5"))
    broken = base64.b64encode(
        b'MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="B"\n\n--B\n'
        b"Content-Type: application/node.eks.aws\n\nkind: Pod\n--B--\n"
    ).decode()
    with pytest.raises(NodeConfigError, match="not a node.eks.aws NodeConfig"):
        local_storage_strategy(broken)
    assert root_volume_gib([{"DeviceName": "/dev/xvda", "Ebs": {"VolumeSize": 200}}]) == 200
    assert root_volume_gib([{"DeviceName": "/dev/xvdb", "Ebs": {"VolumeSize": 200}}]) == 20


def test_nodeadm_huge_pages_are_what_the_user_datas_script_allocates() -> None:
    assert hugepages_2mi(gpu_user_data_base64(hugepages_2mi_pages=5128)) == 5128
    assert hugepages_2mi(gpu_user_data_base64()) == 0  # nodeadm's NodeConfig alone allocates none
    assert hugepages_2mi(nodeconfig("RAID0", mime=False)) == 0
    script = b"#!/bin/bash\nsysctl -w vm.nr_hugepages=64\nsysctl -w vm.nr_hugepages=128\n"
    assert hugepages_2mi(base64.b64encode(script).decode()) == 128  # the last write wins
    assert hugepages_2mi(None) == 0


# ----------------------------------------------------------------------------- EKS node groups


@pytest.fixture(scope="module")
def aws() -> Iterator[None]:
    with moto_sandbox("us-east-2"):
        yield


@pytest.fixture
def eks_kube(aws: None) -> Iterator[FakeKube]:
    eks_ext.reset()
    with fake_kube(time_scale=600) as server:
        eks_ext.attach_fake_kube(server)
        eks_ext.BEHAVIOUR.describes_until_active = 1
        yield server
    eks_ext.reset()


def cluster(name: str) -> str:
    ec2, eks = boto3.client("ec2"), boto3.client("eks")
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.0.0/24", AvailabilityZone="us-east-2a")["Subnet"]["SubnetId"]
    # A public subnet: single-interface nodes get a public IPv4 and reach EC2 and ECR (the CNI starts).
    ec2.modify_subnet_attribute(SubnetId=subnet, MapPublicIpOnLaunch={"Value": True})
    gateway = ec2.create_internet_gateway()["InternetGateway"]["InternetGatewayId"]
    ec2.attach_internet_gateway(InternetGatewayId=gateway, VpcId=vpc)
    main = ec2.describe_route_tables(Filters=[{"Name": "vpc-id", "Values": [vpc]},
                                              {"Name": "association.main", "Values": ["true"]}])["RouteTables"][0]
    ec2.create_route(RouteTableId=main["RouteTableId"], DestinationCidrBlock="0.0.0.0/0", GatewayId=gateway)
    eks.create_cluster(
        name=name, roleArn="arn:aws:iam::123456789012:role/c", resourcesVpcConfig={"subnetIds": [subnet]}
    )
    assert eks.describe_cluster(name=name)["cluster"]["status"] == "ACTIVE"
    return str(subnet)


def nodegroup(cluster_name: str, name: str, subnet: str, **extra: Any) -> dict[str, Any]:
    eks = boto3.client("eks")
    eks.create_nodegroup(
        clusterName=cluster_name,
        nodegroupName=name,
        scalingConfig={"minSize": 0, "maxSize": 1, "desiredSize": 1},
        subnets=[subnet],
        nodeRole="arn:aws:iam::123456789012:role/n",
        **extra,
    )
    group: dict[str, Any] = eks.describe_nodegroup(clusterName=cluster_name, nodegroupName=name)["nodegroup"]
    return group


def template(
    name: str, user_data: str | None, root_gib: int | None = None, interfaces: list[dict[str, Any]] | None = None
) -> str:
    data: dict[str, Any] = {"InstanceType": "p6-b300.48xlarge"}
    if interfaces:
        data["NetworkInterfaces"] = interfaces
    if user_data:
        data["UserData"] = user_data
    if root_gib:
        data["BlockDeviceMappings"] = [{"DeviceName": "/dev/xvda", "Ebs": {"VolumeSize": root_gib}}]
    made = boto3.client("ec2").create_launch_template(LaunchTemplateName=name, LaunchTemplateData=data)
    return str(made["LaunchTemplate"]["LaunchTemplateId"])


def pool_node(kube: FakeKube, pool: str) -> dict[str, Any]:
    [found] = [n for n in kube.objects("nodes") if n["metadata"]["labels"]["eks.amazonaws.com/nodegroup"] == pool]
    return found


def test_node_groups_join_with_their_storage_and_eks_runs_coredns(eks_kube: FakeKube) -> None:
    subnet = cluster("nodes")
    assert {d["metadata"]["name"] for d in eks_kube.objects("deployments", "apps")} == {"coredns"}
    raid = template("raid", nodeconfig("RAID0"))
    assert nodegroup("nodes", "raid", subnet, launchTemplate={"id": raid})["status"] == "ACTIVE"
    plain = template("plain", None, root_gib=100)
    nodegroup(
        "nodes",
        "plain",
        subnet,
        launchTemplate={"id": plain},
        taints=[{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}],
    )
    nodegroup("nodes", "system", subnet, instanceTypes=["m7i.large"], labels={"capserve.io/pool": "system"})
    paged = template("paged", gpu_user_data_base64(hugepages_2mi_pages=5128))
    nodegroup("nodes", "paged", subnet, launchTemplate={"id": paged})
    nvme = INSTANCE_TYPES["p6-b300.48xlarge"].local_nvme_bytes
    assert pool_node(eks_kube, "raid")["status"]["capacity"]["ephemeral-storage"] == f"{nvme // 1024}Ki"
    # Huge pages: only the template whose user data allocates them boots with them.
    assert pool_node(eks_kube, "raid")["status"]["allocatable"]["hugepages-2Mi"] == "0Mi"
    assert pool_node(eks_kube, "paged")["status"]["allocatable"]["hugepages-2Mi"] == "10256Mi"
    plain_node = pool_node(eks_kube, "plain")
    assert plain_node["status"]["capacity"]["ephemeral-storage"] == f"{100 * GIB // 1024}Ki"
    assert plain_node["spec"]["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
    system = pool_node(eks_kube, "system")
    assert system["metadata"]["labels"]["node.kubernetes.io/instance-type"] == "m7i.large"
    assert system["status"]["allocatable"]["pods"] == "29"
    until(
        eks_kube,
        lambda: get(eks_kube, "deployments", "coredns", "apps", "kube-system")["status"].get("readyReplicas") == 2,
    )


def test_user_data_nodeadm_rejects_fails_the_node_group(eks_kube: FakeKube) -> None:
    subnet = cluster("broken")
    bad = template("bad", nodeconfig("RAID5"))
    group = nodegroup("broken", "gpu", subnet, launchTemplate={"id": bad})
    assert group["status"] == "CREATE_FAILED"
    [issue] = group["health"]["issues"]
    assert issue["code"] == "NodeCreationFailure" and "RAID5" in issue["message"]
    assert eks_kube.objects("nodes") == []


def test_a_template_with_efa_on_p6_b300s_ena_only_card_0_launches_nothing(eks_kube: FakeKube) -> None:
    subnet = cluster("efa")
    efa_card0 = [{"NetworkCardIndex": 0, "DeviceIndex": 0, "InterfaceType": "efa"}]
    group = nodegroup("efa", "gpu", subnet, launchTemplate={"id": template("efa0", None, interfaces=efa_card0)})
    assert group["status"] == "CREATE_FAILED"
    [issue] = group["health"]["issues"]
    assert issue["code"] == "AsgInstanceLaunchFailures" and "card 0 takes interface, not efa" in issue["message"]
    assert eks_kube.objects("nodes") == []
    # The documented layout (ENA on card 0, efa-only at device 0 on cards 1-16) launches.
    good = [{"NetworkCardIndex": 0, "DeviceIndex": 0, "InterfaceType": "interface"},
            *({"NetworkCardIndex": c, "DeviceIndex": 0, "InterfaceType": "efa-only"} for c in range(1, 17))]
    assert nodegroup("efa", "ok", subnet, launchTemplate={"id": template("efa-ok", None, interfaces=good)})[
        "status"] == "ACTIVE"


def test_ec2s_end_of_block_termination_takes_only_that_instance_types_nodes(kube: FakeKube) -> None:
    gpu = kube.provision_nodes("gpu", 2, instance_type="p6-b300.48xlarge", labels=GPU_LABELS, taints=[GPU_TAINT])
    system = kube.provision_nodes("system", 1, instance_type="m7i.xlarge")
    assert sorted(kube.terminate_instances("p6-b300.48xlarge")) == sorted(gpu)
    left = {node["metadata"]["name"] for node in kube.objects("nodes")}
    assert set(system) <= left and not set(gpu) & left
    assert kube.terminate_instances("p6-b300.48xlarge") == []  # nothing left to terminate


def test_deleting_a_node_group_removes_its_nodes_and_stops_their_pods(eks_kube: FakeKube) -> None:
    subnet = cluster("gone")
    nodegroup("gone", "keep", subnet, instanceTypes=["m7i.large"])
    nodegroup("gone", "drop", subnet, instanceTypes=["m7i.large"])
    dropped = pool_node(eks_kube, "drop")["metadata"]["name"]
    eks_kube.store.create(eks_kube.store.resource("", "v1", "pods"), "default", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "on-drop", "namespace": "default"},
        "spec": {"nodeName": dropped, "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]},
    }, "test")

    boto3.client("eks").delete_nodegroup(clusterName="gone", nodegroupName="drop")

    assert [n["metadata"]["labels"]["eks.amazonaws.com/nodegroup"] for n in eks_kube.objects("nodes")] == ["keep"]
    until(eks_kube, lambda: not [p for p in eks_kube.objects("pods") if p["metadata"]["name"] == "on-drop"],
          what="the pod on the deleted node garbage-collected")


def test_a_node_registers_and_turns_ready_at_the_sandbox_clocks_time(kube: FakeKube) -> None:
    # On a simulated block the block's clock is hours ahead of wall time: the API server stamps with it, as
    # Kubernetes on AWS stamps with the time the block is at.
    ahead = CLOCK.advance(timedelta(hours=7))
    try:
        (name,) = kube.provision_nodes("gpu", 1, device_plugins="builtin")
        made = get(kube, "nodes", name)
        registered = datetime.fromisoformat(made["metadata"]["creationTimestamp"].replace("Z", "+00:00"))
        (ready,) = [c for c in made["status"]["conditions"] if c["type"] == "Ready"]
        turned = datetime.fromisoformat(ready["lastTransitionTime"].replace("Z", "+00:00"))
        assert abs(registered - ahead) < timedelta(seconds=5) and abs(turned - ahead) < timedelta(seconds=5)
    finally:
        CLOCK.reset()
