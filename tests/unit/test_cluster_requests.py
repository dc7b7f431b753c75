"""Pure request builders of bring-up: layouts, names, deadlines, report section."""

from __future__ import annotations

import base64
import dataclasses
import email
from datetime import UTC, datetime, timedelta

import boto3
import pytest
import yaml
from botocore.stub import Stubber

from capserve.core.catalog import get_instance_type
from capserve.core.cluster import eks, hyperpod, iam, network, nvme
from capserve.core.cluster.deadline import bring_up_budget
from capserve.core.cluster.efa import (
    NO_EFA,
    NetworkFacts,
    catalog_network_facts,
    described_network_facts,
    efa_needs,
    interface_layout,
    layout_problems,
    layout_shortfall,
)
from capserve.core.cluster.naming import ClusterNames
from capserve.core.cluster.result import ClusterResult
from capserve.core.cluster.settings import BringUpSettings
from capserve.core.errors import DeadlineError, PermanentError
from capserve.core.lease import ON_DEMAND, ON_DEMAND_RESERVATION, Lease
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


def described(instance_type: str) -> NetworkFacts:
    """What DescribeInstanceTypes answers for the type (moto's snapshot of EC2's answer)."""
    ec2 = boto3.client("ec2", region_name="us-east-2", aws_access_key_id="x", aws_secret_access_key="x")
    answer = {"InstanceTypes": [_moto_instance_type(instance_type)]}
    with Stubber(ec2) as stub:
        stub.add_response("describe_instance_types", answer, {"InstanceTypes": [instance_type]})
        found = ec2.describe_instance_types(InstanceTypes=[instance_type])["InstanceTypes"][0]
    return described_network_facts(found)


def _moto_instance_type(name: str) -> dict[str, object]:
    from moto.ec2.models.instance_types import INSTANCE_TYPES

    entry: dict[str, object] = INSTANCE_TYPES[name]
    return entry


def layout(instance_type: str, *, uses_efa: bool) -> list[dict[str, object]]:
    return eks.network_interfaces(described(instance_type), "sg-1", cluster_security_group_id="sg-c",
                                  uses_efa=uses_efa)


def test_p6_b300_across_nodes_is_ena_on_card0_and_efa_only_at_device_0_on_cards_1_to_16() -> None:
    interfaces = layout("p6-b300.48xlarge", uses_efa=True)
    assert interfaces[0] == {"NetworkCardIndex": 0, "DeviceIndex": 0, "InterfaceType": "interface",
                             "Groups": ["sg-1", "sg-c"], "DeleteOnTermination": True}
    assert [i["NetworkCardIndex"] for i in interfaces[1:]] == list(range(1, 17))
    assert {(i["InterfaceType"], i["DeviceIndex"]) for i in interfaces[1:]} == {("efa-only", 0)}
    assert all("SubnetId" not in i for i in interfaces)  # the node group supplies subnets
    assert layout_problems(described("p6-b300.48xlarge"), interfaces) == []


def test_a_one_node_layout_attaches_only_the_card_0_ena_interface() -> None:
    for instance_type in ("p6-b300.48xlarge", "p5.48xlarge"):
        assert [(i["NetworkCardIndex"], i["DeviceIndex"], i["InterfaceType"])
                for i in layout(instance_type, uses_efa=False)] == [(0, 0, "interface")]


def test_p5_card_0_takes_its_efa_only_interface_at_device_1() -> None:
    interfaces = layout("p5.48xlarge", uses_efa=True)
    places = [(i["NetworkCardIndex"], i["DeviceIndex"], i["InterfaceType"]) for i in interfaces]
    assert places[:3] == [(0, 0, "interface"), (0, 1, "efa-only"), (1, 0, "efa-only")]
    assert len(places) == 33 and sum(kind == "efa-only" for _, _, kind in places) == 32
    assert layout_problems(described("p5.48xlarge"), interfaces) == []


def test_ec2_refuses_efa_on_an_ena_only_card_an_efa_only_primary_and_too_many_cards_or_efas() -> None:
    facts = described("p6-b300.48xlarge")

    def nic(card: int, device: int, kind: str) -> dict[str, object]:
        return {"NetworkCardIndex": card, "DeviceIndex": device, "InterfaceType": kind}

    assert layout_problems(facts, [nic(0, 0, "efa")]) == [
        "network card 0, device 0: p6-b300.48xlarge's card 0 takes interface, not efa"
    ]
    assert "cannot be the primary network interface" in layout_problems(facts, [nic(0, 0, "efa-only")])[-1]
    beyond = layout_problems(facts, [nic(0, 0, "interface"), nic(17, 0, "efa-only")])
    assert beyond == ["network card 17, device 0: p6-b300.48xlarge has 17 network card(s)"]
    many = [nic(0, 0, "interface"), *(nic(c, 0, "efa-only") for c in range(1, 17)), nic(1, 1, "efa")]
    assert layout_problems(facts, many) == ["17 EFA interfaces, but p6-b300.48xlarge takes at most 16"]


def test_preflight_refuses_a_type_ec2_describes_with_fewer_efa_interfaces_than_the_pods_request() -> None:
    b300 = get_instance_type("p6-b300.48xlarge")
    facts = described("p6-b300.48xlarge")
    assert layout_shortfall(facts, b300, 2) is None and layout_shortfall(facts, b300, 1) is None
    fewer = dataclasses.replace(facts, maximum_efa_interfaces=8)
    problem = layout_shortfall(fewer, b300, 2)
    assert problem is not None and problem.startswith("capacity.instance_type: ")
    assert "with 8 EFA interface(s) (EfaInfo.MaximumEfaInterfaces 8), but each pod of the plan requests 16" in problem
    assert layout_shortfall(fewer, b300, 1) is None  # one node uses no EFA


def test_the_catalog_fallback_agrees_with_ec2s_description() -> None:
    for instance_type in ("p6-b300.48xlarge", "p6-b200.48xlarge", "p5.48xlarge", "p5en.48xlarge"):
        facts = catalog_network_facts(get_instance_type(instance_type))
        assert interface_layout(facts, uses_efa=True) == interface_layout(described(instance_type), uses_efa=True)


def test_every_gpu_interface_carries_the_cluster_security_group() -> None:
    # EKS adds no cluster group to a template that names groups; CoreDNS on the system nodes admits only it.
    interfaces = layout("p5.48xlarge", uses_efa=True)
    assert {tuple(i["Groups"]) for i in interfaces} == {("sg-1", "sg-c")}


def test_drift_sees_a_version_without_the_cluster_group_and_not_a_reordering() -> None:
    names = ClusterNames(campaign_id="k3-demo")
    instance = get_instance_type("p6-b300.48xlarge")
    wanted = eks.launch_template_data(names, lease(), instance, "sg-1", cluster_security_group_id="sg-c")
    old = {**wanted, "NetworkInterfaces": [{**i, "Groups": ["sg-1"]} for i in wanted["NetworkInterfaces"]]}
    assert eks.launch_template_drift(old, wanted) == ["NetworkInterfaces"]
    echoed = {**wanted, "NetworkInterfaces": [{**i, "Groups": ["sg-c", "sg-1"]} for i in wanted["NetworkInterfaces"]]}
    assert eks.launch_template_drift(echoed, wanted) == []


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
        subnet_id="subnet-1", security_group_ids=["sg-1", "sg-eks"], lifecycle_uri="s3://sagemaker-x/lifecycle/",
        spans_nodes=True,
    )
    group = request["InstanceGroups"][0]
    assert group["LifeCycleConfig"] == {"SourceS3Uri": "s3://sagemaker-x/lifecycle/", "OnCreate": "on_create.sh"}
    assert request["VpcConfig"] == {"SecurityGroupIds": ["sg-1", "sg-eks"], "Subnets": ["subnet-1"]}
    assert group["InstanceType"] == "ml.p6-b300.48xlarge" and group["TrainingPlanArn"] == plan
    assert group["OnStartDeepHealthChecks"] == ["InstanceStress", "InstanceConnectivity"]
    assert request["Orchestrator"] == {"Eks": {"ClusterArn": "arn:aws:eks:us-east-2:1:cluster/c"}}
    assert hyperpod.HyperPodStatus("Failed").is_terminal and not hyperpod.HyperPodStatus("Creating").is_terminal


def test_an_on_demand_hyperpod_group_names_no_training_plan() -> None:
    # A rehearsal's lease: SageMaker takes the instances from its on-demand pool (HyperPod guide, capacity requests).
    request = hyperpod.cluster_request(
        ClusterNames(campaign_id="k3-demo-rh"), lease(provider=ON_DEMAND, reservation_id=ON_DEMAND_RESERVATION),
        BringUpSettings(), eks_cluster_arn="arn:aws:eks:us-east-2:1:cluster/c", execution_role_arn="arn:r",
        subnet_id="subnet-1", security_group_ids=["sg-1"], lifecycle_uri="s3://sagemaker-x/lifecycle/",
        spans_nodes=False,
    )
    assert "TrainingPlanArn" not in request["InstanceGroups"][0]


def test_a_one_node_hyperpod_layout_asks_for_no_deep_health_checks() -> None:
    # They test EFA and NCCL between nodes and take plan time (docs/timeline.md): a layout on one node has
    # nothing of that to test.
    request = hyperpod.cluster_request(
        ClusterNames(campaign_id="k3-demo"), lease(provider="sagemaker-training-plan",
                                                   reservation_id="arn:aws:sagemaker:us-east-2:1:training-plan/x"),
        BringUpSettings(), eks_cluster_arn="arn:aws:eks:us-east-2:1:cluster/c", execution_role_arn="arn:r",
        subnet_id="subnet-1", security_group_ids=["sg-1"], lifecycle_uri="s3://sagemaker-x/lifecycle/",
        spans_nodes=False,
    )
    assert "OnStartDeepHealthChecks" not in request["InstanceGroups"][0]


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
    # drain = end - 34 min; 120 min of serving must remain after bring-up.
    assert bring_up_budget(the_spec, lease(), NOW) == timedelta(days=1) - timedelta(minutes=154)  # type: ignore[arg-type]
    late = NOW + timedelta(days=1) - timedelta(minutes=149)
    with pytest.raises(DeadlineError, match="min_serving_minutes is 120"):
        bring_up_budget(the_spec, lease(), late)  # type: ignore[arg-type]


def test_report_section_has_exactly_the_contract_keys() -> None:
    result = ClusterResult(kind="eks", name="capserve-k3-demo", region="us-east-2", endpoint="https://x",
                           gpu_pool="capserve-k3-demo-gpu", nodes_ready=2, gpus_allocatable=16)
    assert result.report_section() == {"kind": "eks", "name": "capserve-k3-demo", "nodes_ready": 2,
                                       "gpus_allocatable": 16, "node_join": None}
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


def test_hyperpod_nodes_get_the_eks_cluster_security_group_beside_the_campaigns() -> None:
    assert hyperpod.cluster_security_groups("sg-campaign", "sg-eks") == ["sg-campaign", "sg-eks"]
    # A DescribeCluster without clusterSecurityGroupId (or naming the campaign's group) adds nothing.
    assert hyperpod.cluster_security_groups("sg-campaign", None) == ["sg-campaign"]
    assert hyperpod.cluster_security_groups("sg-campaign", "sg-campaign") == ["sg-campaign"]


def test_the_lifecycle_bucket_starts_with_sagemaker_and_fits_s3s_name_limit() -> None:
    bucket = hyperpod.lifecycle_bucket("a" * 40, "123456789012")
    assert bucket.startswith("sagemaker-") and len(bucket) <= 63
    uri = hyperpod.lifecycle_uri(bucket)
    assert uri == f"s3://{bucket}/lifecycle/"
    assert hyperpod.script_key(uri, "on_create.sh") == "lifecycle/on_create.sh"
    assert hyperpod.on_create_script().startswith(b"#!/bin/bash\n")


def test_the_lifecycle_script_allocates_huge_pages_only_for_a_layout_that_spans_nodes() -> None:
    single, spanning = hyperpod.on_create_script(), hyperpod.on_create_script(hugepages_2mi_pages=5128)
    assert b"vm.nr_hugepages" not in single and hyperpod.HUGEPAGES_MARKER.encode() not in single
    # The same lines as the EKS nodes' user data, once, before the script's last step.
    assert spanning.count(nvme.hugepages_commands(5128).encode()) == 1
    assert spanning.index(b"sysctl -w vm.nr_hugepages=5128\n") < spanning.index(b"capserve on_create.sh: done")
    assert spanning == hyperpod.on_create_script(hugepages_2mi_pages=5128)  # deterministic: no re-upload


def test_hyperpod_dependencies_are_the_charts_resiliency_objects_with_the_regional_agent_image() -> None:
    objects = hyperpod.dependencies("us-west-2", "k3-demo")
    kinds = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objects}
    assert ("Namespace", None, "aws-hyperpod") in kinds
    assert ("DaemonSet", "aws-hyperpod", "health-monitoring-agent") in kinds
    assert ("ClusterRoleBinding", None, "hyperpod-patching") in kinds
    assert ("ClusterRoleBinding", None, "job-auto-restart") in kinds
    agent = next(o for o in objects if o["kind"] == "DaemonSet" and o["metadata"]["name"] == "health-monitoring-agent")
    image = agent["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == "905418368575.dkr.ecr.us-west-2.amazonaws.com/hyperpod-health-monitoring-agent:1.0.1892.0_1.0.424.0"
    assert all(o["metadata"]["labels"][CAMPAIGN_TAG] == "k3-demo" for o in objects)
    # A region the chart has no registry for falls back to us-east-1's, as the chart's helper does.
    assert hyperpod.health_monitoring_agent_image("me-south-1").startswith("767398015722.dkr.ecr.us-east-1.")


def test_the_execution_role_reads_the_weights_prefix_and_writes_only_compile_caches() -> None:
    from capserve_sandbox.kube.iam_eval import allowed, document

    policies = iam.hyperpod_inline_policies(
        "aws", weights_bucket="capserve-w", weights_prefix="capserve/weights", compile_cache=True
    )
    docs = [document(text) for text in policies.values()]

    def may(action: str, resource: str) -> bool:
        return allowed(docs, action, resource, account="123456789012")

    assert may("s3:GetObject", "arn:aws:s3:::capserve-w/capserve/weights/org/model/sha/model.safetensors")
    assert may("s3:ListBucket", "arn:aws:s3:::capserve-w")
    assert not may("s3:GetObject", "arn:aws:s3:::capserve-w/elsewhere/file")
    assert not may("s3:GetObject", "arn:aws:s3:::other-bucket/capserve/weights/file")
    assert may("s3:PutObject", "arn:aws:s3:::capserve-w/capserve/weights/compile-cache/key/node-0/x")
    assert not may("s3:PutObject", "arn:aws:s3:::capserve-w/capserve/weights/org/model/sha/model.safetensors")
    assert may("eks-auth:AssumeRoleForPodIdentity", "arn:aws:eks:us-east-2:123456789012:cluster/c")


def test_node_data_paths_follow_the_cluster_kind() -> None:
    from capserve.core.weights.settings import WeightsSettings

    eks_paths = WeightsSettings()
    assert eks_paths.nvme_path == "/mnt/k8s-disks/0/capserve/weights"
    on_hyperpod = eks_paths.for_cluster("hyperpod")
    assert on_hyperpod.nvme_path == "/opt/dlami/nvme/capserve/weights"
    assert on_hyperpod.compile_cache_path == "/opt/dlami/nvme/capserve/cache"
    assert on_hyperpod.for_cluster("eks") == eks_paths
    with pytest.raises(ValueError, match="unknown cluster kind 'gke'"):
        eks_paths.for_cluster("gke")


def test_the_room_check_names_hyperpods_lifecycle_script_as_the_fix() -> None:
    fix = "HyperPod lifecycle script must mount the instance-store NVMe at /opt/dlami/nvme"
    with pytest.raises(PermanentError, match=fix):
        nvme.check_node_room({"n1": 10**12}, {"n1": 500 * 10**9}, margin_bytes=0, kind="hyperpod")


def test_multi_node_user_data_allocates_the_efa_huge_pages_before_the_kubelet_starts() -> None:
    names = ClusterNames(campaign_id="k3-demo")
    instance = get_instance_type("p6-b200.48xlarge")
    needs = efa_needs(instance, nodes_per_replica=2)
    data = eks.launch_template_request(
        names, lease(), instance, "sg-1", cluster_security_group_id="sg-c",
        hugepages_2mi_pages=needs.hugepages_2mi_pages,
    )["LaunchTemplateData"]
    message = email.message_from_bytes(base64.b64decode(data["UserData"]))
    parts = [part for part in message.walk() if not part.is_multipart()]
    assert [part.get_content_type() for part in parts] == ["application/node.eks.aws", "text/x-shellscript"]
    script = parts[1].get_payload()
    assert script.startswith("#!/bin/bash\n") and "sysctl -w vm.nr_hugepages=5128\n" in script
    assert f"> {nvme.HUGEPAGES_SYSCTL_FILE}" in script  # kept for reboots
    # A one-node layout's nodes allocate none (and its template differs: a new version if the plan changes).
    single = eks.launch_template_data(names, lease(), instance, "sg-1", cluster_security_group_id="sg-c",
                                      hugepages_2mi_pages=0)
    assert single["UserData"] == nvme.gpu_user_data_base64()
    assert eks.launch_template_drift(single, data) == ["UserData"]


def test_efa_is_needed_only_by_layouts_across_nodes() -> None:
    b300 = get_instance_type("p6-b300.48xlarge")
    assert efa_needs(b300, 1) == NO_EFA and not NO_EFA.used
    across = efa_needs(b300, 2)
    assert (across.devices, across.hugepages_2mi_pages, across.hugepages_mib) == (16, 5128, 5120)
    with pytest.raises(ValueError, match="more than the 5128 pages"):
        efa_needs(b300, 2, hugepages_mib=20_000)
