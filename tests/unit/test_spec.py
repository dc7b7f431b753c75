from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from spec_changes import changed

from capserve.core.errors import SpecError
from capserve.core.spec import CampaignSpec, load_spec, parse_spec

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)

GOOD: dict[str, Any] = {
    "name": "k3-demo",
    "model": {"catalog": "kimi-k3"},
    "capacity": {
        "provider": "ec2-capacity-block",
        "instance_type": "p6-b300.48xlarge",
        "instance_count": 1,
        "regions": ["us-east-2", "us-west-2"],
        "earliest_start": "now",
        "latest_end": "now+14d",
        "duration_hours": 48,
        "max_upfront_fee_usd": 20000,
        "approval_threshold_usd": 15000,
    },
    "weights": {"s3_bucket": "capserve-weights"},
}


def error_for(data: Any) -> str:
    with pytest.raises(SpecError) as caught:
        parse_spec(data, now=NOW)
    return str(caught.value)


def test_good_spec_resolves_relative_times_and_defaults() -> None:
    spec = parse_spec(GOOD, now=NOW)
    assert isinstance(spec, CampaignSpec)
    assert spec.campaign_id == "k3-demo"
    assert spec.capacity.earliest_start == NOW
    assert spec.capacity.latest_end == NOW + timedelta(days=14)
    assert spec.teardown.drain_before_end_minutes == 34
    assert spec.teardown.hard_teardown_before_end_minutes == 32
    end = NOW + timedelta(days=2)
    assert spec.teardown.teardown_at(end) == end - timedelta(minutes=32)
    assert spec.cluster.kind == "eks"


def test_absolute_times_with_timezone_are_kept() -> None:
    spec = parse_spec(changed(GOOD, capacity__earliest_start="2026-12-01T11:30:00Z"), now=NOW)
    assert spec.capacity.earliest_start == datetime(2026, 12, 1, 11, 30, tzinfo=UTC)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        # 1. a typo in a field name: say where, and what is allowed there
        (
            changed(GOOD, capacity__instnce_count=2),
            "capacity.instnce_count: unknown field; allowed here: provider, instance_type",
        ),
        # 2. out of bounds
        (
            changed(GOOD, capacity__instance_count=100),
            "capacity.instance_count: Input should be less than or equal to 64 (got 100)",
        ),
        # 3. unknown enum value lists the allowed ones
        (
            changed(GOOD, capacity__provider="spot"),
            "capacity.provider: Input should be 'ec2-capacity-block', 'sagemaker-training-plan' or "
            "'existing-reservation'",
        ),
        # 4. a required field is missing
        (changed(GOOD, weights__s3_bucket=...), "weights.s3_bucket: Field required"),
        # 5. name not usable as a tag / label
        (changed(GOOD, name="K3 Demo!"), "name: String should match pattern"),
        # 6. a time without a timezone is ambiguous for a reservation that ends at 11:30 UTC
        (
            changed(GOOD, capacity__earliest_start="2026-12-01T11:30:00"),
            "capacity.earliest_start: '2026-12-01T11:30:00' has no UTC offset",
        ),
        # 7. a Capacity Block longer than 14 days must be whole weeks
        (changed(GOOD, capacity__duration_hours=24 * 15), "Capacity Blocks last whole days up to 14 days"),
        # 8. window shorter than the duration
        (changed(GOOD, capacity__latest_end="now+1d"), "is shorter than duration_hours=48"),
        # 9. teardown inside AWS's own termination lead
        (
            changed(GOOD, teardown={"hard_teardown_before_end_minutes": 20}),
            "teardown.hard_teardown_before_end_minutes: Input should be greater than or equal to 31 (got 20)",
        ),
        # 10. drain after hard teardown
        (
            changed(GOOD, teardown={"drain_before_end_minutes": 40, "hard_teardown_before_end_minutes": 50}),
            "drain (40 min before end) must come before hard teardown",
        ),
        # 11. training plans serve HyperPod only
        (changed(GOOD, capacity__provider="sagemaker-training-plan"), "set cluster.kind to 'hyperpod'"),
        # 12. existing reservation without an id
        (changed(GOOD, capacity__provider="existing-reservation"), "needs 'reservation_id'"),
        # 13. model names neither a catalog entry nor a repo
        (changed(GOOD, model={"revision": "main"}), "model: give 'catalog'"),
        # 14. approval threshold above the budget can never trigger
        (changed(GOOD, capacity__approval_threshold_usd=50000), "approval_threshold_usd is above max_upfront_fee_usd"),
        # 15. a bad Hub repo id
        (changed(GOOD, model={"repo": "not a repo"}), "model.repo: String should match pattern"),
        # 16. not a mapping at all
        (["name", "k3"], "the spec must be a mapping of fields"),
        # 17. thinking turned off for a model that always thinks (gpt-oss): refused before anything is bought
        (
            changed(GOOD, model={"catalog": "gpt-oss-120b"})
            | {"evaluation": {"quality": {"thinking": "off"}}},
            "gpt-oss-120b always thinks",
        ),
    ],
)
def test_bad_specs_name_the_field_and_what_is_allowed(data: Any, expected: str) -> None:
    message = error_for(data)
    assert expected in message
    assert "Traceback" not in message


def test_thinking_off_is_accepted_for_a_model_with_a_switch() -> None:
    spec = parse_spec(changed(GOOD, evaluation={"quality": {"thinking": "off"}}), now=NOW)
    assert spec.evaluation.quality.thinking == "off"


def test_all_problems_are_reported_at_once() -> None:
    data = changed(GOOD, capacity__instance_count=0)
    data["serving"] = {"replicas": 0}
    message = error_for(data)
    assert "capacity.instance_count" in message and "serving.replicas" in message


def test_load_spec_reports_yaml_syntax_with_position(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: k3\nmodel: {catalog: kimi-k3\n")
    with pytest.raises(SpecError, match=r"not valid YAML at line \d+, column \d+"):
        load_spec(path)


def test_load_spec_missing_file_says_so(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="cannot read the spec"):
        load_spec(tmp_path / "nope.yaml")


def test_example_specs_are_valid() -> None:
    examples = Path(__file__).resolve().parents[2] / "examples"
    paths = sorted(examples.glob("*.yaml"))
    assert paths, "the examples/ folder has no specs"
    for path in paths:
        load_spec(path, now=NOW)


def test_admin_principals_are_iam_role_or_user_arns() -> None:
    roles = ["arn:aws:iam::123456789012:role/ops/prefect-worker", "arn:aws:iam::123456789012:user/reaper"]
    spec = parse_spec(changed(GOOD, cluster__admin_principals=roles), now=NOW)
    assert spec.cluster.admin_principals == roles
    assert parse_spec(GOOD, now=NOW).cluster.admin_principals == []


@pytest.mark.parametrize(
    ("arn", "message"),
    [
        ("arn:aws:sts::123456789012:assumed-role/prefect-worker/session-1", "is an STS session ARN: give the IAM ARN"),
        ("arn:aws:iam::123456789012:role/aws-service-role/eks.amazonaws.com/AWSServiceRoleForAmazonEKS",
         "service-linked role"),
        ("arn:aws:iam::1234:role/x", "is not an IAM role or user ARN"),
        ("prefect-worker", "is not an IAM role or user ARN"),
    ],
)
def test_bad_admin_principals_say_what_to_give(arn: str, message: str) -> None:
    with pytest.raises(SpecError, match=f"cluster.admin_principals: .*{message}"):
        parse_spec(changed(GOOD, cluster__admin_principals=[arn]), now=NOW)
