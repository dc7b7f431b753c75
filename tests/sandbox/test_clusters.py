"""Each sandbox EKS cluster has its own Kubernetes, as on AWS: its own endpoint, objects and nodes (docs/sandbox.md)."""

from __future__ import annotations

from collections.abc import Iterator

import boto3
import pytest
from capserve_sandbox.aws_ext import capacity as capacity_ext
from capserve_sandbox.aws_ext import eks as eks_ext
from capserve_sandbox.kube import FakeKube, fake_kube
from kubernetes import client as k8s
from urllib3.exceptions import MaxRetryError

from capserve.tasks import kube as tasks_kube
from tests.sandbox.test_nodes import aws, cluster, nodegroup  # noqa: F401  # aws: the fixture

CONFIG_MAP = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "mine", "namespace": "default"}}


@pytest.fixture
def first(aws: None) -> Iterator[FakeKube]:  # noqa: F811 - the fixture imported above
    eks_ext.reset()
    with fake_kube(time_scale=600) as server:
        eks_ext.attach_fake_kube(server)
        eks_ext.BEHAVIOUR.describes_until_active = 1
        yield server
    eks_ext.reset()


def client_for(name: str) -> k8s.ApiClient:
    """capserve's own client, from what DescribeCluster says (endpoint and CA), as bring-up builds it."""
    found = boto3.client("eks").describe_cluster(name=name)["cluster"]
    return tasks_kube.api_client_for_eks(found["endpoint"], None, name, "us-east-2")


def node_groups(api: k8s.ApiClient) -> set[str]:
    return {n.metadata.labels["eks.amazonaws.com/nodegroup"] for n in k8s.CoreV1Api(api).list_node().items}


def test_two_clusters_answer_at_their_own_endpoints_with_disjoint_objects_and_nodes(first: FakeKube) -> None:
    subnet_a, subnet_b = cluster("team-a"), cluster("team-b")
    nodegroup("team-a", "gpu-a", subnet_a, instanceTypes=["m7i.large"])
    nodegroup("team-b", "gpu-b", subnet_b, instanceTypes=["m7i.large"])
    a, b = client_for("team-a"), client_for("team-b")
    assert a.configuration.host != b.configuration.host

    k8s.CoreV1Api(a).create_namespaced_config_map("default", CONFIG_MAP)

    assert [c.metadata.name for c in k8s.CoreV1Api(a).list_namespaced_config_map("default").items] == ["mine"]
    assert k8s.CoreV1Api(b).list_namespaced_config_map("default").items == []
    # Each node group's instances joined their own cluster, and only it; each cluster runs its own CoreDNS.
    assert (node_groups(a), node_groups(b)) == ({"gpu-a"}, {"gpu-b"})
    for api in (a, b):
        assert [d.metadata.name for d in k8s.AppsV1Api(api).list_namespaced_deployment("kube-system").items] == [
            "coredns"
        ]
    assert set(eks_ext.cluster_kubes()) == {"team-a", "team-b"}


def test_deleting_a_cluster_takes_its_kubernetes_and_leaves_the_others(first: FakeKube) -> None:
    subnet_a, _ = cluster("gone-a"), cluster("kept-b")
    nodegroup("gone-a", "pool", subnet_a, instanceTypes=["m7i.large"])
    a, b = client_for("gone-a"), client_for("kept-b")
    eks = boto3.client("eks")

    eks.delete_nodegroup(clusterName="gone-a", nodegroupName="pool")
    eks.delete_cluster(name="gone-a")

    a.configuration.retries = False
    with pytest.raises(MaxRetryError):  # its endpoint no longer answers
        k8s.CoreV1Api(a).list_namespace(_request_timeout=5)
    assert "default" in {n.metadata.name for n in k8s.CoreV1Api(b).list_namespace().items}
    assert set(eks_ext.cluster_kubes()) == {"kept-b"}
    # A new cluster gets a new, empty Kubernetes, even under the deleted one's name.
    cluster("gone-a")
    again = client_for("gone-a")
    assert k8s.CoreV1Api(again).list_node().items == [] and node_groups(b) == set()


def test_the_end_of_a_block_takes_the_nodes_launched_into_it_and_no_other_clusters(first: FakeKube) -> None:
    # Two campaigns' node groups of the same instance type, each launched into its own block.
    ec2 = boto3.client("ec2")
    for name, block in (("block-a", "cr-0aaaaaaaaaaaaaaaa"), ("block-b", "cr-0bbbbbbbbbbbbbbbb")):
        subnet = cluster(name)
        template = ec2.create_launch_template(LaunchTemplateName=name, LaunchTemplateData={
            "InstanceType": "m7i.large",
            "CapacityReservationSpecification": {"CapacityReservationTarget": {"CapacityReservationId": block}},
        })["LaunchTemplate"]["LaunchTemplateId"]
        nodegroup(name, "gpu", subnet, launchTemplate={"id": template})
    a, b = client_for("block-a"), client_for("block-b")

    # EC2 terminates block a's instances at its end − 30 min (capacity.py calls every termination hook so).
    for terminate in capacity_ext.TERMINATION_HOOKS:
        terminate({"CapacityReservationId": "cr-0aaaaaaaaaaaaaaaa", "InstanceType": "m7i.large"})

    assert (node_groups(a), node_groups(b)) == (set(), {"gpu"})
