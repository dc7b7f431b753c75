"""Preflight's decisions from plain facts: each check, and one message listing every problem."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from spec_changes import spec_file

from capserve.core.catalog import get_instance_type, get_model
from capserve.core.cluster.settings import BringUpSettings
from capserve.core.errors import SpecError
from capserve.core.planner.plan import ServingPlan, plan_serving
from capserve.core.preflight import (
    PreflightError,
    PreflightFacts,
    ReservationWindow,
    _minutes,
    bucket_name_problems,
    check_preflight,
    preflight_problems,
    time_needed,
)
from capserve.core.spec import CampaignSpec, load_spec
from capserve.core.timeline import s3_to_node_bytes_per_s

NOW = datetime(2026, 12, 1, 5, 0, tzinfo=UTC)
REGIONS = ("us-east-1", "us-east-2", "us-west-2", "eu-west-1")
BRING_UP = BringUpSettings()


def spec_of(tmp_path: Path, **changes: Any) -> CampaignSpec:
    return load_spec(spec_file(tmp_path, **changes))


@pytest.fixture(scope="module")
def plan() -> ServingPlan:
    p6 = get_instance_type("p6-b300.48xlarge")
    return plan_serving(get_model("kimi-k3"), p6, context_length=262144, concurrency=8)


def good_facts(**changes: Any) -> PreflightFacts:
    base: dict[str, Any] = {
        "now": NOW,
        "known_regions": REGIONS,
        "offering_regions": {"us-east-2": None, "us-west-2": None},
        "staging_dir": "/data/staging",
        "staging_free_bytes": 4 * 10**12,
        "download_bytes": 1_560_000_000_000,
        "bucket_names": ("capserve-demo-weights",),
    }
    return PreflightFacts(**{**base, **changes})


def test_good_facts_pass(tmp_path: Path, plan: ServingPlan) -> None:
    spec = spec_of(tmp_path)
    assert preflight_problems(spec, plan, good_facts(), bring_up=BRING_UP) == []
    check_preflight(spec, plan, good_facts(), bring_up=BRING_UP)  # does not raise


def test_a_region_unknown_to_the_partition_is_named(tmp_path: Path, plan: ServingPlan) -> None:
    spec = spec_of(tmp_path, capacity__regions=["zz-north-1", "us-west-2"])
    problems = preflight_problems(spec, plan, good_facts(offering_regions={"us-west-2": None}), bring_up=BRING_UP)
    assert len(problems) == 1
    assert "'zz-north-1' is not a region of this AWS partition" in problems[0]


def test_a_region_without_the_instance_type_is_a_problem_only_when_no_region_offers_it(
    tmp_path: Path, plan: ServingPlan
) -> None:
    spec = spec_of(tmp_path)
    some = good_facts(offering_regions={"us-east-2": "p6-b300.48xlarge is not offered in us-east-2", "us-west-2": None})
    assert preflight_problems(spec, plan, some, bring_up=BRING_UP) == []
    none = good_facts(offering_regions={
        "us-east-2": "p6-b300.48xlarge is not offered in us-east-2",
        "us-west-2": "the account cannot use us-west-2 (OptInRequired): enable the region or drop it",
    })
    [problem] = preflight_problems(spec, plan, none, bring_up=BRING_UP)
    assert "no region of capacity.regions offers p6-b300.48xlarge" in problem
    assert "OptInRequired" in problem and "not offered in us-east-2" in problem


def test_report_folder_urls_and_variables_are_reported(tmp_path: Path, plan: ServingPlan) -> None:
    facts = good_facts(
        out_dir_problem="report folder /ro is not writable (Read-only file system): give a folder you can write to",
        url_problems=("endpoint_url: 'ftp://x' is not a valid URL",),
        unset_variables=("MY_KEY",),
    )
    problems = preflight_problems(spec_of(tmp_path), plan, facts, bring_up=BRING_UP)
    assert problems[0].startswith("report folder /ro is not writable")
    assert problems[1].startswith("endpoint_url:")
    assert problems[2] == "environment variable MY_KEY is not set (or empty): export it first"


def test_too_little_disk_names_what_is_needed_and_the_plans_figure(tmp_path: Path, plan: ServingPlan) -> None:
    facts = good_facts(staging_free_bytes=500 * 10**9, download_bytes=1_560_000_000_000, present_bytes=60 * 10**9)
    [problem] = preflight_problems(spec_of(tmp_path), plan, facts, bring_up=BRING_UP)
    assert "1.50 TB must be downloaded to /data/staging" in problem
    assert "60.0 GB already there" in problem
    assert f"the plan counts {plan.weight_bytes / 10**12:.2f} TB of weights for kimi-k3" in problem
    assert "only 500.0 GB is free" in problem
    # What is already downloaded does not have to fit again.
    enough = good_facts(staging_free_bytes=500 * 10**9, download_bytes=10**12, present_bytes=600 * 10**9)
    assert preflight_problems(spec_of(tmp_path), plan, enough, bring_up=BRING_UP) == []


def test_without_the_hubs_listing_the_plans_figure_is_what_must_fit(tmp_path: Path, plan: ServingPlan) -> None:
    facts = good_facts(staging_free_bytes=plan.weight_bytes - 1, download_bytes=None)
    assert len(preflight_problems(spec_of(tmp_path), plan, facts, bring_up=BRING_UP)) == 1


@pytest.mark.parametrize(
    ("name", "rule"),
    [
        ("ab", "3 to 63"),
        ("a" * 64, "3 to 63"),
        ("my..bucket", "'..'"),
        ("my.-bucket", "'..'"),
        ("192.168.1.1", "IP address"),
        ("xn--bucket", "'xn--'"),
        ("sthree-data", "'sthree-'"),
        ("data-s3alias", "'-s3alias'"),
        ("data--ol-s3", "'--ol-s3'"),
    ],
)
def test_bucket_names_follow_s3s_rules(name: str, rule: str) -> None:
    [problem] = bucket_name_problems(name)
    assert rule in problem and repr(name) in problem


def test_a_good_bucket_name_has_no_problem() -> None:
    assert bucket_name_problems("capserve-records-123456789012-us-east-2") == []


def test_too_many_instances_for_one_capacity_block(tmp_path: Path, plan: ServingPlan) -> None:
    spec = spec_of(tmp_path).model_copy(deep=True)
    capacity = spec.capacity.model_copy(update={"instance_count": 65})
    bigger = spec.model_copy(update={"capacity": capacity})
    [problem] = preflight_problems(bigger, plan, good_facts(), bring_up=BRING_UP)
    assert "65 instances do not fit one Capacity Block (at most 64)" in problem


def test_a_reservation_too_short_for_bring_up_startup_and_evaluation(tmp_path: Path, plan: ServingPlan) -> None:
    spec = spec_of(tmp_path, serving__startup_budget_minutes=600, capacity__duration_hours=24)
    assert preflight_problems(spec, plan, good_facts(), bring_up=BRING_UP) == []
    # 24 h − 34 min of drain margin is less than 30 + 45 min of bring-up + the S3 → node copy (docs/timeline.md)
    # + 1440 min of startup + the gate's 10 min.
    longer = spec_of(tmp_path, serving__startup_budget_minutes=1440, capacity__duration_hours=24)
    [problem] = preflight_problems(longer, plan, good_facts(), bring_up=BRING_UP)
    assert problem.startswith("a 24 h reservation (capacity.duration_hours) leaves 1406 min before the drain point")
    staging = _minutes(time_needed(longer, plan, BRING_UP)["S3 → node staging"])
    assert (
        f"bring-up 75 min + S3 → node staging {staging} + vLLM startup 1440 min + gate (smoke + quality) 10 min"
        in problem
    )
    assert "ask for a longer reservation" in problem


def test_an_existing_reservation_is_judged_on_what_is_left_of_it(tmp_path: Path, plan: ServingPlan) -> None:
    data = {"capacity__provider": "existing-reservation", "capacity__reservation_id": "cr-0123456789abcdef0"}
    spec = spec_of(tmp_path, **data)
    ending_soon = ReservationWindow(
        reservation_id="cr-0123456789abcdef0", state="active",
        start=NOW - timedelta(days=1), end=NOW + timedelta(hours=2),
    )
    [serving, problem] = preflight_problems(spec, plan, good_facts(reservation=ending_soon), bring_up=BRING_UP)
    assert serving.startswith("cluster.min_serving_minutes 120: reservation cr-0123456789abcdef0")
    assert problem.startswith("reservation cr-0123456789abcdef0 (active, ends 2026-12-01T07:00:00+00:00) leaves 86 min")
    later = ending_soon.model_copy(update={"end": NOW + timedelta(days=2)})
    assert preflight_problems(spec, plan, good_facts(reservation=later), bring_up=BRING_UP) == []
    missing = good_facts(reservation_problem="cr-0123456789abcdef0 does not exist in us-east-2: check the id")
    assert preflight_problems(spec, plan, missing, bring_up=BRING_UP) == [
        "capacity.reservation_id: cr-0123456789abcdef0 does not exist in us-east-2: check the id"
    ]


def test_min_serving_minutes_that_bring_up_would_refuse_on_the_block_is_refused_before_buying(
    tmp_path: Path, plan: ServingPlan
) -> None:
    # A 24 h block leaves 1406 min before drain; bring-up may take 75 min, so 1331 min of serving remain. The
    # spec's own check (1380 <= 1406) passes, and bring-up's rule (core/cluster/deadline.py) would stop on the block.
    spec = spec_of(tmp_path, cluster__min_serving_minutes=1380, capacity__duration_hours=24)
    assert preflight_problems(spec, plan, good_facts(), bring_up=BRING_UP) == [
        "cluster.min_serving_minutes 1380: a 24 h reservation (capacity.duration_hours) leaves 1406 min before the "
        "drain point and bring-up may take up to 75 min, so only 1331 min of serving would remain and bring-up would "
        "refuse on the paid block: lower cluster.min_serving_minutes or ask for a longer reservation"
    ]
    fits = spec_of(tmp_path, cluster__min_serving_minutes=1331, capacity__duration_hours=24)
    assert preflight_problems(fits, plan, good_facts(), bring_up=BRING_UP) == []


def test_time_needed_is_the_waits_and_budgets_by_part(tmp_path: Path, plan: ServingPlan) -> None:
    eks = time_needed(spec_of(tmp_path), plan, BRING_UP)["bring-up"]
    assert eks == timedelta(minutes=75)
    # The gate before traffic books its budget; the load profile runs after the switch, while serving.
    assert time_needed(spec_of(tmp_path), plan, BRING_UP)["gate (smoke + quality)"] == timedelta(minutes=10)


def test_time_needed_counts_copying_the_weights_onto_the_nodes(tmp_path: Path, plan: ServingPlan) -> None:
    # docs/timeline.md §1: each node's bytes ÷ the copy's rate (the slowest of S3's 8 GB/s, the network and the
    # NVMe array's writes), × 1.5.
    node_bytes = plan.weight_bytes_per_gpu * plan.gpus_per_node
    rate = s3_to_node_bytes_per_s(plan.instance_type)
    parts = time_needed(spec_of(tmp_path), plan, BRING_UP)
    assert parts["S3 → node staging"] == timedelta(seconds=math.ceil(node_bytes / rate * 1.5))
    assert "Hub → S3 staging" not in parts  # a block not yet started: the checkpoint reaches S3 before it


def test_an_open_window_also_pays_for_bringing_the_checkpoint_into_s3(tmp_path: Path, plan: ServingPlan) -> None:
    data = {"capacity__provider": "existing-reservation", "capacity__reservation_id": "cr-0123456789abcdef0"}
    spec = spec_of(tmp_path, **data)
    started = ReservationWindow(
        reservation_id="cr-0123456789abcdef0", state="active",
        start=NOW - timedelta(hours=1), end=NOW + timedelta(hours=3),
    )  # fmt: skip
    problem = preflight_problems(spec, plan, good_facts(reservation=started), bring_up=BRING_UP)[-1]
    # docs/timeline.md §1: the weights stage's Hub → S3 rate, 0.5 GB/s, × 1.5.
    hub = math.ceil(plan.weight_bytes / 0.5e9 * 1.5)
    assert f"Hub → S3 staging {math.ceil(hub / 60)} min" in problem
    not_yet = started.model_copy(update={"start": NOW + timedelta(hours=1), "end": NOW + timedelta(hours=3)})
    later = preflight_problems(spec, plan, good_facts(reservation=not_yet), bring_up=BRING_UP)
    assert not any("Hub → S3 staging" in p for p in later)


def test_every_problem_in_one_error_that_is_bad_input(tmp_path: Path, plan: ServingPlan) -> None:
    spec = spec_of(tmp_path, capacity__regions=["zz-north-1", "us-west-2"])
    facts = good_facts(
        offering_regions={"us-west-2": None},
        unset_variables=("MY_KEY",),
        staging_free_bytes=10**9,
        bucket_names=("my..bucket",),
    )
    with pytest.raises(PreflightError) as caught:
        check_preflight(spec, plan, facts, bring_up=BRING_UP)
    assert isinstance(caught.value, SpecError)
    message = str(caught.value)
    assert message.startswith("preflight of campaign k3-demo found 4 problem(s); nothing was bought or created:")
    for part in ("zz-north-1", "MY_KEY", "local disk", "my..bucket"):
        assert part in message
    assert len(caught.value.problems) == 4


def test_a_hyperpod_lifecycle_script_bring_up_cannot_put_or_find_is_a_problem_before_buying(
    tmp_path: Path, plan: ServingPlan
) -> None:
    why = "the HyperPod lifecycle bucket name sagemaker-demo-123456789012 belongs to another account: rename it"
    problems = preflight_problems(spec_of(tmp_path), plan, good_facts(lifecycle_problem=why), bring_up=BRING_UP)
    assert problems == [why]
