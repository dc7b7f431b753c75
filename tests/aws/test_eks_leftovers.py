"""What EKS and Kubernetes controllers make for a cluster without the campaign tag, found in the sandbox's AWS."""

from __future__ import annotations

import boto3

from capserve.tasks.eks_leftovers import eks_made_resources

REGION = "us-east-2"
CLUSTER = "capserve-k3-demo"



def test_nothing_made_for_the_cluster_lists_nothing(sandbox: None) -> None:
    assert eks_made_resources("capserve-nothing-here", REGION) == []


def test_what_eks_and_controllers_made_is_listed_and_nothing_else(sandbox: None) -> None:
    ec2 = boto3.client("ec2", region_name=REGION)
    vpc = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.9.1.0/24", AvailabilityZone=f"{REGION}a")["Subnet"]["SubnetId"]
    owned = [{"Key": f"kubernetes.io/cluster/{CLUSTER}", "Value": "owned"}]
    cluster_sg = ec2.create_security_group(
        GroupName=f"eks-cluster-sg-{CLUSTER}", Description="EKS", VpcId=vpc,
        TagSpecifications=[{"ResourceType": "security-group",
                            "Tags": [{"Key": "aws:eks:cluster-name", "Value": CLUSTER}, *owned]}],
    )["GroupId"]
    lb_sg = ec2.create_security_group(
        GroupName="k8s-elb-a1b2", Description="lb", VpcId=vpc,
        TagSpecifications=[{"ResourceType": "security-group", "Tags": owned}],
    )["GroupId"]
    ec2.create_security_group(GroupName="someone-else", Description="not ours", VpcId=vpc)
    eni = ec2.create_network_interface(SubnetId=subnet, Description=f"Amazon EKS {CLUSTER}")["NetworkInterface"]
    volume = ec2.create_volume(
        AvailabilityZone=f"{REGION}a", Size=10, TagSpecifications=[{"ResourceType": "volume", "Tags": owned}]
    )["VolumeId"]
    elb = boto3.client("elbv2", region_name=REGION)
    lb = elb.create_load_balancer(
        Name="k8s-serving-a1b2", Subnets=[subnet], Scheme="internal", Type="network",
        Tags=[{"Key": "elbv2.k8s.aws/cluster", "Value": CLUSTER},
              {"Key": "service.k8s.aws/resource", "Value": "capserve/serving"}],
    )["LoadBalancers"][0]["LoadBalancerArn"]
    elb.create_load_balancer(Name="not-ours", Subnets=[subnet], Scheme="internal", Type="network")
    boto3.client("logs", region_name=REGION).create_log_group(logGroupName=f"/aws/eks/{CLUSTER}/cluster")

    found = eks_made_resources(CLUSTER, REGION)

    assert sorted(found) == sorted([
        f"network-interface/{eni['NetworkInterfaceId']}: EKS control-plane interface",
        f"security-group/{cluster_sg}: EKS cluster security group",
        f"security-group/{lb_sg}: made by a Kubernetes controller (load balancer)",
        f"ebs-volume/{volume}: made by the EBS CSI driver (available)",
        f"load-balancer/{lb}: made for capserve/serving",
        f"log-group//aws/eks/{CLUSTER}/cluster: EKS control-plane logs",
    ])
