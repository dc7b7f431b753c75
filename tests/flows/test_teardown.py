"""teardown and reaper flows end to end on the sandbox: a cluster brought up by capserve.flows.bring_up
(moto + EKS/HyperPod extensions + the fake Kubernetes API), then torn down to nothing of the campaign."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import boto3
import pytest
from capserve_sandbox.aws import moto_sandbox
from capserve_sandbox.aws_ext import eks as eks_ext
from capserve_sandbox.kube import FakeKube, fake_kube

from capserve.core.cluster.settings import BringUpSettings, KubeSettings
from capserve.core.lease import Lease
from capserve.core.spec import CampaignSpec, parse_spec
from capserve.core.tags import CAMPAIGN_TAG
from capserve.core.teardown.settings import ReaperSettings, TeardownSettings
from capserve.flows.bring_up import bring_up
from capserve.flows.reaper import reaper
from capserve.flows.teardown import teardown
from capserve.tasks.kube import api_client_for_eks, apply
from tests.clocks import moved_to

REGION = "us-east-2"
UP = BringUpSettings(poll_seconds=0, kube=KubeSettings(nodes_ready_timeout_s=20, addons_ready_timeout_s=20))
DOWN = TeardownSettings(poll_seconds=0, dependency_retry_timeout_s=0, workloads_gone_timeout_s=20)


@pytest.fixture(scope="module")
def kube() -> Iterator[FakeKube]:
    with moto_sandbox(REGION), fake_kube() as server:
        eks_ext.reset()
        eks_ext.attach_fake_kube(server)
        yield server
        eks_ext.reset()


def make_spec(name: str, kind: str = "eks", reservation: str = "cr-0123456789abcdef0") -> CampaignSpec:
    return parse_spec(
        {
            "name": name,
            "model": {"catalog": "tiny-k3"},
            "capacity": {"provider": "existing-reservation", "instance_type": "p6-b300.48xlarge",
                         "regions": [REGION], "reservation_id": reservation},
            "cluster": {"kind": kind},
            "weights": {"s3_bucket": "capserve-weights"},
        }
    )


def make_lease(reservation: str = "cr-0123456789abcdef0") -> Lease:
    now = datetime.now(UTC)
    provider = "sagemaker-training-plan" if reservation.startswith("arn:") else "ec2-capacity-block"
    return Lease(
        provider=provider, region=REGION, availability_zone=f"{REGION}a", reservation_id=reservation,
        start=now - timedelta(hours=1), end=now + timedelta(hours=48), instance_type="p6-b300.48xlarge",
        instance_count=1, upfront_fee=1.0,
    )


def serve_something(kube: FakeKube, campaign: str) -> None:
    """A labelled LoadBalancer Service, as a serving stage would leave one (its ELB outlives the cluster)."""
    api = api_client_for_eks(kube.url, None, f"capserve-{campaign}", REGION)
    apply(api, {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": f"{campaign}-vllm", "namespace": "default", "labels": {CAMPAIGN_TAG: campaign}},
        "spec": {"type": "LoadBalancer", "selector": {"app": "vllm"}, "ports": [{"port": 8000}]},
    })


def services(kube: FakeKube) -> set[str]:
    return {s["metadata"]["name"] for s in kube.objects("services")}


def tagged_vpcs(campaign: str) -> list[str]:
    found = boto3.client("ec2").describe_vpcs(Filters=[{"Name": f"tag:{CAMPAIGN_TAG}", "Values": [campaign]}])
    return [v["VpcId"] for v in found["Vpcs"]]


def roles_of(campaign: str) -> list[str]:
    names = [r["RoleName"] for r in boto3.client("iam").list_roles()["Roles"]]
    return [n for n in names if n.startswith(f"capserve-{campaign}-")]


def test_eks_teardown_dry_run_then_real_then_a_no_op_rerun(kube: FakeKube) -> None:
    spec, other = make_spec("down-eks"), make_spec("down-keep")
    bring_up(spec, make_lease(), UP)
    bring_up(other, make_lease(), UP)
    kept_kube = eks_ext.cluster_kubes()["capserve-down-keep"]  # each cluster has its own Kubernetes
    serve_something(kube, "down-eks")
    serve_something(kept_kube, "down-keep")

    dry = teardown(spec, REGION, reason="manual", dry_run=True, settings=DOWN)
    assert dry.dry_run and "k8s-service/default/down-eks-vllm" in dry.deleted
    assert "eks-cluster/capserve-down-eks" in dry.deleted and dry.already_gone == ()
    assert tagged_vpcs("down-eks") and "down-eks-vllm" in services(kube)  # nothing deleted

    result = teardown(spec, REGION, reason="campaign-finished", settings=DOWN)
    section = result.report_section()
    assert section["reason"] == "campaign-finished" and section["dry_run"] is False
    assert section["deleted"] == list(dry.deleted)
    assert section["deleted"][0] == "k8s-service/default/down-eks-vllm"  # workloads first
    kept = {k["resource"]: k["why"] for k in section["kept"]}  # type: ignore[union-attr]
    assert "s3-bucket/capserve-weights" in kept and "reservation/cr-0123456789abcdef0" in kept
    # Nothing of the campaign is left in the sandbox ...
    assert tagged_vpcs("down-eks") == [] and roles_of("down-eks") == []
    assert "capserve-down-eks" not in boto3.client("eks").list_clusters()["clusters"]
    templates = boto3.client("ec2").describe_launch_templates(
        Filters=[{"Name": f"tag:{CAMPAIGN_TAG}", "Values": ["down-eks"]}])["LaunchTemplates"]
    assert templates == []
    # ... and the other campaign's is all there.
    assert len(tagged_vpcs("down-keep")) == 1 and len(roles_of("down-keep")) == 2
    assert "capserve-down-keep" in boto3.client("eks").list_clusters()["clusters"]
    assert "down-keep-vllm" in services(kept_kube) and "down-eks-vllm" not in services(kube)

    eks_ext.clear_calls()
    again = teardown(spec, REGION, reason="campaign-finished", settings=DOWN)
    assert again.deleted == () and [c for c in eks_ext.calls() if c.action.startswith("Delete")] == []
    assert {"eks-cluster/capserve-down-eks", "eks-nodegroup/capserve-down-eks-gpu", "vpc/capserve-down-eks-vpc",
            "iam-role/capserve-down-eks-eks-node"} <= set(again.already_gone)
    assert "already gone" in again.markdown()


def test_hyperpod_teardown(kube: FakeKube) -> None:
    plan = f"arn:aws:sagemaker:{REGION}:123456789012:training-plan/down-hp"
    spec = make_spec("down-hp", kind="hyperpod", reservation=plan)
    bring_up(spec, make_lease(plan), UP)
    assert len(roles_of("down-hp")) == 3

    result = teardown(spec, REGION, reason="failed-stage", settings=DOWN)
    assert result.deleted[0] == "hyperpod-cluster/capserve-down-hp-hp"
    assert f"reservation/{plan}" in {k.resource for k in result.kept}
    sagemaker = boto3.client("sagemaker")
    assert "capserve-down-hp-hp" not in {c["ClusterName"] for c in sagemaker.list_clusters()["ClusterSummaries"]}
    assert tagged_vpcs("down-hp") == [] and roles_of("down-hp") == []

    again = teardown(spec, REGION, reason="failed-stage", settings=DOWN)
    assert again.deleted == () and "hyperpod-cluster/capserve-down-hp-hp" in again.already_gone


def test_reaper_keeps_young_unknown_leases_and_reaps_old_ones(kube: FakeKube) -> None:
    spec = make_spec("down-reap")
    bring_up(spec, make_lease(), UP)
    settings = ReaperSettings(unknown_lease_grace_hours=24, teardown=DOWN)

    # The reservation the launch template targets is not in the sandbox: the lease is unknown, and the
    # campaign was created just now, so it is within the grace period.
    young = reaper([REGION], dry_run=False, settings=settings)
    mine = {d.campaign_id: d for d in young.decisions}["down-reap"]
    assert not mine.reap and "within the 24 h grace" in mine.why and tagged_vpcs("down-reap")

    with moved_to(datetime.now(UTC) + timedelta(days=2)):
        dry = reaper([REGION], settings=settings)
    mine = {d.campaign_id: d for d in dry.decisions}["down-reap"]
    assert mine.reap and mine.teardown is not None and mine.teardown.dry_run
    assert "eks-cluster/capserve-down-reap" in mine.teardown.deleted and tagged_vpcs("down-reap")

    with moved_to(datetime.now(UTC) + timedelta(days=2)):
        real = reaper([REGION], dry_run=False, settings=settings)
    mine = {d.campaign_id: d for d in real.decisions}["down-reap"]
    assert mine.teardown is not None and mine.teardown.reason == "reaper" and not mine.teardown.dry_run
    assert tagged_vpcs("down-reap") == [] and roles_of("down-reap") == []
    assert "capserve-down-reap" not in boto3.client("eks").list_clusters()["clusters"]


def test_the_reaper_finds_and_deletes_a_leaked_nat_gateway_and_its_elastic_ip(kube: FakeKube) -> None:
    """What is left when a teardown died between the NAT gateway and the VPC: both bill by the hour, and
    nothing else (no cluster, no tagged VPC) says the campaign is still there."""
    ec2 = boto3.client("ec2")

    def tags(kind: str, name: str) -> list[dict[str, object]]:
        pairs = [{"Key": CAMPAIGN_TAG, "Value": "down-leak"}, {"Key": "Name", "Value": name}]
        return [{"ResourceType": kind, "Tags": pairs}]

    vpc = ec2.create_vpc(CidrBlock="10.77.0.0/16")["Vpc"]["VpcId"]  # someone's VPC: not tagged with the campaign
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.77.0.0/20", AvailabilityZone=f"{REGION}a")["Subnet"]
    address = ec2.allocate_address(Domain="vpc", TagSpecifications=tags("elastic-ip", "capserve-down-leak-nat-ip"))
    nat = ec2.create_nat_gateway(
        SubnetId=subnet["SubnetId"], AllocationId=address["AllocationId"],
        TagSpecifications=tags("natgateway", "capserve-down-leak-nat"),
    )["NatGateway"]["NatGatewayId"]

    settings = ReaperSettings(unknown_lease_grace_hours=24, teardown=DOWN)
    with moved_to(datetime.now(UTC) + timedelta(days=2)):
        result = reaper([REGION], dry_run=False, settings=settings)
    mine = {d.campaign_id: d for d in result.decisions}["down-leak"]
    assert mine.reap and mine.teardown is not None and not mine.teardown.dry_run
    assert mine.teardown.deleted == (
        f"nat-gateway/capserve-down-leak-nat ({nat})",
        f"elastic-ip/capserve-down-leak-nat-ip ({address['AllocationId']})",
    )
    assert ec2.describe_nat_gateways(NatGatewayIds=[nat])["NatGateways"][0]["State"] == "deleted"
    leaked = [{"Name": f"tag:{CAMPAIGN_TAG}", "Values": ["down-leak"]}]
    assert ec2.describe_addresses(Filters=leaked)["Addresses"] == []
    assert ec2.describe_vpcs(VpcIds=[vpc])["Vpcs"]  # not the campaign's: left alone


def test_a_teardown_by_a_principal_without_cluster_access_deletes_the_aws_resources(
    kube: FakeKube, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = make_spec("down-other")
    bring_up(spec, make_lease(), UP)
    serve_something(kube, "down-other")
    # The scheduled teardown's principal is not the cluster's creator and has no access entry: the API server
    # refuses it (401), as EKS does.
    iam = boto3.client("iam")
    iam.create_user(UserName="teardown-runner")
    key = iam.create_access_key(UserName="teardown-runner")["AccessKey"]
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key["AccessKeyId"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", key["SecretAccessKey"])
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)

    result = teardown(spec, REGION, reason="drain-deadline", settings=DOWN)

    assert [d for d in result.deleted if d.startswith("k8s-")] == []  # not listed: the cluster takes them along
    assert "eks-cluster/capserve-down-other" in result.deleted
    assert tagged_vpcs("down-other") == [] and roles_of("down-other") == []
    assert "capserve-down-other" not in boto3.client("eks").list_clusters()["clusters"]
