"""Pure request builders of bring-up: layouts, names, deadlines, report section."""

from __future__ import annotations

import base64
import email
from datetime import UTC, datetime, timedelta

import boto3
import pytest
import yaml
from botocore.stub import Stubber

from capserve.core.catalog import get_instance_type
from capserve.core.cluster import eks, hyperpod, iam, network, nvme
from capserve.core.cluster.deadline import bring_up_budget
from capserve.core.cluster.naming import ClusterNames
from capserve.core.cluster.result import ClusterResult
from capserve.core.cluster.settings import BringUpSettings
from capserve.core.errors import DeadlineError
from capserve.core.lease import Lease
from capserve.core.spec import parse_spec
from capserve.core.tags import CAMPAIGN_TAG

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def lease(**changes: object) -> Lease:
    base: dict[str, object] = dict(
        provider="ec2-capacity-block", region="us-east-2", availability_zone="us-east-2b",
        reservation_id="cr-0123456789abcdef0", start=NOW, end=NOW + timedelta(days=1),
        instance_type="p6-b300.48xlarge", instance_count=2, upfront_fee=5000.0,
    )
    return Lease.model_validate({**base, **changes})


def spec(min_serving: int = 120, kind: str = "eks") -> object:
    provider = "existing-reservation"
    capacity = {"provider": provider, "instance_type": "p6-b300.48xlarge", "regions": ["us-east-2"],
                "reservation_id": "cr-0123456789abcdef0"}
    return parse_spec({
        "name": "k3-demo", "model": {"catalog": "kimi-k3"}, "capacity": capacity,
        "cluster": {"kind": kind, "min_serving_minutes": min_serving}, "weights": {"s3_bucket": "capserve-weights"},
    })


def test_p6_b300_card0_is_ena_only_and_efa_on_cards_1_to_16() -> None:
    layout = eks.network_interfaces(get_instance_type("p6-b300.48xlarge"), "sg-1", cluster_security_group_id="sg-c")
    assert len(layout) == 17
    assert layout[0] == {"NetworkCardIndex": 0, "DeviceIndex": 0, "InterfaceType": "interface",
                         "Groups": ["sg-1", "sg-c"], "DeleteOnTermination": True}
    assert [i["NetworkCardIndex"] for i in layout[1:]] == list(range(1, 17))
    assert {(i["InterfaceType"], i["DeviceIndex"]) for i in layout[1:]} == {("efa", 1)}
    assert all("SubnetId" not in i for i in layout)  # the node group supplies subnets


def test_every_gpu_interface_carries_the_cluster_security_group() -> None:
    # EKS adds no cluster group to a template that names groups; CoreDNS on the system nodes admits only it.
    layout = eks.network_interfaces(get_instance_type("p5.48xlarge"), "sg-1", cluster_security_group_id="sg-c")
    assert {tuple(i["Groups"]) for i in layout} == {("sg-1", "sg-c")}


def test_drift_sees_a_version_without_the_cluster_group_and_not_a_reordering() -> None:
    names = ClusterNames(campaign_id="k3-demo")
    instance = get_instance_type("p6-b300.48xlarge")
    wanted = eks.launch_template_data(names, lease(), instance, "sg-1", cluster_security_group_id="sg-c")
    old = {**wanted, "NetworkInterfaces": [{**i, "Groups": ["sg-1"]} for i in wanted["NetworkInterfaces"]]}
    assert eks.launch_template_drift(old, wanted) == ["NetworkInterfaces"]
    echoed = {**wanted, "NetworkInterfaces": [{**i, "Groups": ["sg-c", "sg-1"]} for i in wanted["NetworkInterfaces"]]}
    assert eks.launch_template_drift(echoed, wanted) == []


def test_p5_primary_interface_is_efa() -> None:
    layout = eks.network_interfaces(get_instance_type("p5.48xlarge"), "sg-1", cluster_security_group_id="sg-c")
    assert len(layout) == 32 and layout[0]["InterfaceType"] == "efa" and layout[0]["DeviceIndex"] == 0


def test_launch_template_targets_the_capacity_block() -> None:
    names = ClusterNames(campaign_id="k3-demo")
    request = eks.launch_template_request(names, lease(), get_instance_type("p6-b300.48xlarge"), "sg-1",
                                      cluster_security_group_id="sg-c")
    data = request["LaunchTemplateData"]
    assert data["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    assert data["CapacityReservationSpecification"]["CapacityReservationTarget"] == {
        "CapacityReservationId": "cr-0123456789abcdef0"
    }
    assert data["InstanceType"] == "p6-b300.48xlarge"
    changed = eks.launch_template_request(
        names, lease(reservation_id="cr-0fedcba9876543210"), get_instance_type("p6-b300.48xlarge"), "sg-1",
        cluster_security_group_id="sg-c",
    )
    assert eks.launch_template_drift(data, changed["LaunchTemplateData"]) == ["CapacityReservationSpecification"]
    assert eks.launch_template_drift(data, data) == []


def test_nodegroup_is_capacity_block_sized_to_the_lease() -> None:
    names = ClusterNames(campaign_id="k3-demo")
    request = eks.nodegroup_request(
        names, lease(instance_count=4), node_role_arn="arn:aws:iam::1:role/n", subnet_id="subnet-1",
        launch_template_id="lt-1", launch_template_version="3",
    )
    assert request["capacityType"] == "CAPACITY_BLOCK"
    assert request["scalingConfig"] == {"minSize": 0, "maxSize": 4, "desiredSize": 4}
    assert "instanceTypes" not in request  # the launch template names the type
    assert request["launchTemplate"] == {"id": "lt-1", "version": "3"}
    assert request["labels"][CAMPAIGN_TAG] == "k3-demo" and request["tags"][CAMPAIGN_TAG] == "k3-demo"


def test_hyperpod_request_uses_training_plan_orchestrator_and_deep_checks() -> None:
    plan = "arn:aws:sagemaker:us-east-2:123456789012:training-plan/k3-demo"
    request = hyperpod.cluster_request(
        ClusterNames(campaign_id="k3-demo"), lease(provider="sagemaker-training-plan", reservation_id=plan),
        BringUpSettings(), eks_cluster_arn="arn:aws:eks:us-east-2:1:cluster/c", execution_role_arn="arn:r",
        subnet_id="subnet-1", security_group_id="sg-1", lifecycle_uri="s3://sagemaker-x/lifecycle/",
    )
    group = request["InstanceGroups"][0]
    assert group["InstanceType"] == "ml.p6-b300.48xlarge" and group["TrainingPlanArn"] == plan
    assert group["OnStartDeepHealthChecks"] == ["InstanceStress", "InstanceConnectivity"]
    assert request["Orchestrator"] == {"Eks": {"ClusterArn": "arn:aws:eks:us-east-2:1:cluster/c"}}
    assert hyperpod.HyperPodStatus("Failed").is_terminal and not hyperpod.HyperPodStatus("Creating").is_terminal


def test_names_are_deterministic_and_within_aws_limits() -> None:
    longest = ClusterNames(campaign_id="a" * 40)
    assert longest == ClusterNames(campaign_id="a" * 40)
    assert max(len(r.name) for r in iam.roles_for("hyperpod", longest)) <= 64
    assert len(longest.hyperpod_cluster) <= 63 and len(longest.nodegroup) <= 63


def test_subnet_cidr_cuts_the_vpc_in_sixteen() -> None:
    assert network.subnet_cidr("10.64.0.0/16", 1) == "10.64.16.0/20"
    assert network.subnet_cidr("10.64.0.0/16", network.PRIVATE_CIDR_INDEX) == "10.64.128.0/20"


def test_deadline_refuses_when_serving_time_would_be_too_short() -> None:
    the_spec = spec(min_serving=120)
    # drain = end - 45 min; 120 min of serving must remain after bring-up.
    assert bring_up_budget(the_spec, lease(), NOW) == timedelta(days=1) - timedelta(minutes=165)  # type: ignore[arg-type]
    late = NOW + timedelta(days=1) - timedelta(minutes=160)
    with pytest.raises(DeadlineError, match="min_serving_minutes is 120"):
        bring_up_budget(the_spec, lease(), late)  # type: ignore[arg-type]


def test_report_section_has_exactly_the_contract_keys() -> None:
    result = ClusterResult(kind="eks", name="capserve-k3-demo", region="us-east-2", endpoint="https://x",
                           gpu_pool="capserve-k3-demo-gpu", nodes_ready=2, gpus_allocatable=16)
    assert result.report_section() == {"kind": "eks", "name": "capserve-k3-demo", "nodes_ready": 2,
                                       "gpus_allocatable": 16}
    assert "| eks | capserve-k3-demo |" in result.markdown()


def _stubbed(service: str, operation: str, request: dict[str, object], response: dict[str, object]) -> None:
    """Send ``request`` through a real client with a Stubber: botocore validates it against the service model."""
    client = boto3.client(service, region_name="us-east-2", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(client) as stub:
        stub.add_response(operation, response)
        getattr(client, operation)(**request)


def test_system_nodegroup_is_small_on_demand_untainted_and_labelled() -> None:
    names = ClusterNames(campaign_id="k3-demo")
    request = eks.system_nodegroup_request(
        names, node_role_arn="arn:aws:iam::123456789012:role/n", subnet_ids=["subnet-1", "subnet-2"],
        instance_type="m7i.large", node_count=2,
    )
    assert request["nodegroupName"] == "capserve-k3-demo-system" and len(request["nodegroupName"]) <= 63
    assert request["capacityType"] == "ON_DEMAND" and request["amiType"] == "AL2023_x86_64_STANDARD"
    assert request["instanceTypes"] == ["m7i.large"] and request["subnets"] == ["subnet-1", "subnet-2"]
    assert request["scalingConfig"] == {"minSize": 2, "maxSize": 2, "desiredSize": 2}
    assert "taints" not in request and "launchTemplate" not in request
    assert request["labels"] == {CAMPAIGN_TAG: "k3-demo", "capserve.io/pool": "system"}
    assert request["tags"][CAMPAIGN_TAG] == "k3-demo"
    _stubbed("eks", "create_nodegroup", request, {})


def test_gpu_requests_match_the_service_model() -> None:
    names = ClusterNames(campaign_id="k3-demo")
    template = eks.launch_template_request(names, lease(), get_instance_type("p6-b300.48xlarge"), "sg-1",
                                      cluster_security_group_id="sg-c")
    _stubbed("ec2", "create_launch_template", template, {})
    group = eks.nodegroup_request(
        names, lease(), node_role_arn="arn:aws:iam::1:role/n", subnet_id="subnet-1",
        launch_template_id="lt-1", launch_template_version="3",
    )
    _stubbed("eks", "create_nodegroup", group, {})
    assert group["labels"]["nvidia.com/gpu.present"] == "true"  # what the upstream NVIDIA chart selects on


def test_gpu_user_data_is_a_nodeadm_raid0_node_config_and_part_of_drift() -> None:
    names = ClusterNames(campaign_id="k3-demo")
    data = eks.launch_template_request(names, lease(), get_instance_type("p6-b300.48xlarge"), "sg-1",
                                      cluster_security_group_id="sg-c")[
        "LaunchTemplateData"
    ]
    message = email.message_from_bytes(base64.b64decode(data["UserData"]))
    assert message.get_content_type() == "multipart/mixed"
    parts = [part for part in message.walk() if not part.is_multipart()]
    assert [part.get_content_type() for part in parts] == ["application/node.eks.aws"]
    config = yaml.safe_load(parts[0].get_payload())
    assert config["apiVersion"] == "node.eks.aws/v1alpha1" and config["kind"] == "NodeConfig"
    assert config["spec"] == {"instance": {"localStorage": {"strategy": "RAID0"}}}
    # Deterministic, and a template without it (or with other user data) is drift.
    assert data["UserData"] == nvme.gpu_user_data_base64()
    assert eks.launch_template_drift({**data, "UserData": "e30="}, data) == ["UserData"]
    assert "UserData" in eks.MATERIAL_TEMPLATE_FIELDS
