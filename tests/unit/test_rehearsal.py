"""The rehearsal plan (capserve.core.rehearsal): what it runs, what it proves, and when it lets a purchase through."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import botocore.session
import pytest

from capserve.core.capacity.approval import ApprovalRequest
from capserve.core.capacity.offers import Offer
from capserve.core.catalog import get_instance_type
from capserve.core.catalog.hardware import INSTANCE_TYPES
from capserve.core.cluster.eks import launch_template_data, nodegroup_request
from capserve.core.cluster.hyperpod import HYPERPOD_GPU_TYPES
from capserve.core.cluster.naming import ClusterNames
from capserve.core.cost.prices import load_price_table
from capserve.core.errors import SpecError
from capserve.core.lease import Lease
from capserve.core.rehearsal import (
    RehearsalCheck,
    RehearsalCost,
    RehearsalRecord,
    choose_instance_type,
    on_demand_lease,
    rehearsal_campaign_id,
    rehearsal_digest,
    rehearsal_line,
    rehearsal_problem,
    rehearsal_refusal,
    rehearsal_result,
    rehearsal_spec,
)
from capserve.core.spec import CampaignSpec, parse_spec
from capserve.core.stages import StageStatus

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
CIDR = "10.0.0.0/16"


def make_spec(instance_type: str = "p6-b300.48xlarge", **sections: Any) -> CampaignSpec:
    data: dict[str, Any] = {
        "name": "k3-prod",
        "model": {"catalog": "kimi-k3"},
        "capacity": {
            "provider": "ec2-capacity-block", "instance_type": instance_type, "instance_count": 1,
            "regions": ["us-east-2", "us-west-2"], "earliest_start": "now", "latest_end": "now+14d",
            "duration_hours": 24, "max_upfront_fee_usd": 4000, "approval_threshold_usd": 3500,
            "require_rehearsal": True,
        },
        "weights": {"s3_bucket": "k3-prod-weights"},
        **sections,
    }
    return parse_spec(data, now=NOW)


def test_the_default_instance_is_the_cheapest_priced_one_of_the_same_gpu_family() -> None:
    prices = load_price_table()
    assert choose_instance_type(make_spec("p6-b300.48xlarge"), prices).instance_type == "p6-b200.48xlarge"
    assert choose_instance_type(make_spec("p5en.48xlarge"), prices).instance_type == "p5.4xlarge"


def test_a_named_rehearsal_instance_type_is_used() -> None:
    spec = make_spec("p5en.48xlarge", rehearsal={"instance_type": "p5.48xlarge"})
    choice = choose_instance_type(spec, load_price_table())
    assert choice.instance_type == "p5.48xlarge"


def test_a_rehearsal_instance_of_another_gpu_family_is_refused() -> None:
    with pytest.raises(SpecError, match="proves neither the drivers nor the kernels"):
        make_spec("p6-b300.48xlarge", rehearsal={"instance_type": "p5.4xlarge"})


def test_rehearsal_max_minutes_is_bounded() -> None:
    with pytest.raises(SpecError, match="rehearsal.max_minutes"):
        make_spec(rehearsal={"max_minutes": 5})


def test_the_rehearsal_runs_under_its_own_campaign_id() -> None:
    spec = make_spec()
    rehearsal = rehearsal_spec(spec, "p6-b200.48xlarge")
    assert rehearsal.campaign_id == "k3-prod-rh"
    assert rehearsal.model.repo == "capserve-sandbox/tiny-k3"
    assert rehearsal.served_model_name == spec.served_model_name
    assert rehearsal.capacity.regions == ["us-east-2"]
    long_name = rehearsal_campaign_id("a" * 40)
    assert len(long_name) == 40
    assert long_name.endswith("-rh")


def hyperpod_of(spec: CampaignSpec) -> CampaignSpec:
    """The spec with a HyperPod cluster (only the cluster kind matters to these rules, so it is set alone)."""
    return spec.model_copy(update={"cluster": spec.cluster.model_copy(update={"kind": "hyperpod"})})


def test_hyperpod_is_rehearsed_on_an_instance_type_hyperpod_offers() -> None:
    spec = make_spec()
    assert rehearsal_refusal(hyperpod_of(spec)) is None
    choice = choose_instance_type(hyperpod_of(spec), load_price_table())
    # The cheapest Blackwell type on EC2 is one HyperPod offers too; SageMaker's ml. rate is not in the table.
    assert (choice.instance_type, choice.price is not None and choice.price.status) == (
        "p6-b200.48xlarge", "unconfirmed"
    )
    assert "SageMaker's ml. rate" in choice.why


def test_the_hyperpod_types_are_sagemakers_cluster_instance_types() -> None:
    model = botocore.session.get_session().get_service_model("sagemaker")
    offered = {name.removeprefix("ml.") for name in model.shape_for("ClusterInstanceType").enum}
    assert HYPERPOD_GPU_TYPES <= offered
    # Every GPU type of the catalog that SageMaker offers HyperPod is in the set the rehearsal chooses from.
    assert {name for name in INSTANCE_TYPES if name in offered} == HYPERPOD_GPU_TYPES & set(INSTANCE_TYPES)


def test_the_node_group_differs_only_by_capacity_type_and_market_options() -> None:
    spec = make_spec()
    rehearsal = rehearsal_spec(spec, "p6-b200.48xlarge")
    instance = get_instance_type("p6-b200.48xlarge")
    names = ClusterNames(campaign_id=rehearsal.campaign_id)
    on_demand = on_demand_lease(rehearsal, availability_zone="us-east-2a", now=NOW)
    block = Lease(**{**on_demand.model_dump(), "provider": "ec2-capacity-block",
                     "reservation_id": "cr-0123456789abcdef0"})
    od_template = launch_template_data(names, on_demand, instance, "sg-1", cluster_security_group_id="sg-2")
    cb_template = launch_template_data(names, block, instance, "sg-1", cluster_security_group_id="sg-2")
    market = {"InstanceMarketOptions", "CapacityReservationSpecification"}
    assert set(cb_template) - set(od_template) == market
    assert {k: v for k, v in cb_template.items() if k not in market} == od_template
    kwargs: dict[str, Any] = {"node_role_arn": "arn:aws:iam::123456789012:role/n", "subnet_id": "subnet-1",
                              "launch_template_id": "lt-1", "launch_template_version": "1"}
    od_group, cb_group = nodegroup_request(names, on_demand, **kwargs), nodegroup_request(names, block, **kwargs)
    assert (od_group["capacityType"], cb_group["capacityType"]) == ("ON_DEMAND", "CAPACITY_BLOCK")
    assert {k: v for k, v in od_group.items() if k != "capacityType"} == \
        {k: v for k, v in cb_group.items() if k != "capacityType"}


def test_the_digest_follows_what_the_rehearsal_proves() -> None:
    spec = make_spec()
    same = rehearsal_digest(spec, vpc_cidr=CIDR)
    assert rehearsal_digest(make_spec(), vpc_cidr=CIDR) == same
    # The rehearsal's own knobs and the budget do not change what it proves.
    cheaper = make_spec(rehearsal={"max_minutes": 30})
    assert rehearsal_digest(cheaper, vpc_cidr=CIDR) == same
    newer = make_spec(cluster={"kubernetes_version": "1.33"})
    assert rehearsal_digest(newer, vpc_cidr=CIDR) != same
    other_image = make_spec(serving={"image": "vllm/vllm-openai:v0.11.0"})
    assert rehearsal_digest(other_image, vpc_cidr=CIDR) != same
    assert rehearsal_digest(spec, vpc_cidr="10.1.0.0/16") != same


def _record(spec: CampaignSpec, result: str, when: datetime) -> RehearsalRecord:
    return RehearsalRecord(
        campaign_id=spec.campaign_id, rehearsal_id="k3-prod-rh", digest=rehearsal_digest(spec, vpc_cidr=CIDR),
        proves={}, rehearsed_at=when, result=result,  # type: ignore[arg-type]
        checks=(RehearsalCheck(name="plan", status=StageStatus.COMPLETED, started_at=when, ended_at=when, seconds=0),),
        verdict="pass", region="us-east-2", model="capserve-sandbox/tiny-k3",
        cost=RehearsalCost(instance_type="p6-b200.48xlarge", instances=1, minutes=30, usd_per_hour=113.9328,
                           usd=56.97),
    )


def test_only_a_recent_passing_rehearsal_lets_the_purchase_through() -> None:
    spec = make_spec()
    digest = rehearsal_digest(spec, vpc_cidr=CIDR)
    assert rehearsal_problem(spec, _record(spec, "pass", NOW - timedelta(days=2)), digest, now=NOW) is None
    stale = rehearsal_problem(spec, _record(spec, "pass", NOW - timedelta(days=15)), digest, now=NOW)
    assert stale is not None and "older than 14 days" in stale
    failed = rehearsal_problem(spec, _record(spec, "fail", NOW), digest, now=NOW)
    assert failed is not None and "failed" in failed
    missing = rehearsal_problem(spec, None, digest, now=NOW)
    assert missing is not None and "`capserve rehearse <spec.yaml>`" in missing
    optional = spec.model_copy(update={"capacity": spec.capacity.model_copy(update={"require_rehearsal": False})})
    assert rehearsal_problem(optional, None, digest, now=NOW) is None


def test_the_result_passes_only_when_every_check_completed_and_the_gate_passed() -> None:
    done = [RehearsalCheck(name=n, status=StageStatus.COMPLETED, started_at=NOW) for n in ("rollout", "teardown")]
    assert rehearsal_result(done, "pass") == ("pass", "")
    result, why = rehearsal_result(done, "fail")
    assert result == "fail" and "verdict is fail" in why
    result, why = rehearsal_result(done[:1], "pass")
    assert result == "fail" and "teardown did not run" in why


def test_the_approval_form_shows_the_rehearsal() -> None:
    spec = make_spec()
    offer = Offer(
        provider="ec2-capacity-block", offering_id="cb-1", region="us-east-2", availability_zone="us-east-2a",
        instance_type="p6-b300.48xlarge", instance_count=1, start=NOW, end=NOW + timedelta(days=1),
        upfront_fee=3900.0,
    )
    record = _record(spec, "pass", NOW)
    form = ApprovalRequest(campaign_id=spec.campaign_id, offer=offer, approval_threshold_usd=3500, alternatives=0,
                           rehearsal=rehearsal_line(record))
    assert f"| rehearsal | pass on {NOW.isoformat()}" in form.markdown()
