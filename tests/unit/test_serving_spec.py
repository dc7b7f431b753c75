"""The spec's serving fields the rollout reads: strict, bounded, described."""

from __future__ import annotations

import pytest

from capserve.core.errors import SpecError
from capserve.core.spec import ServingSpec, parse_spec

BASE = {
    "name": "k3-demo",
    "model": {"catalog": "kimi-k3"},
    "capacity": {"provider": "existing-reservation", "instance_type": "p6-b300.48xlarge", "regions": ["us-east-2"],
                 "reservation_id": "cr-0123456789abcdef0"},
    "weights": {"s3_bucket": "capserve-weights"},
}


def test_defaults_reach_nothing_outside_the_cluster() -> None:
    serving = ServingSpec()
    assert (serving.endpoint_access, serving.compile_cache, serving.startup_budget_minutes) == (
        "port-forward", True, None
    )
    for name, field in ServingSpec.model_fields.items():
        assert field.description, name


@pytest.mark.parametrize(
    ("serving", "path"),
    [
        ({"endpoint_access": "internet-facing"}, "serving.endpoint_access"),
        ({"startup_budget_minutes": 2}, "serving.startup_budget_minutes"),
        ({"startup_budget_minutes": 100_000}, "serving.startup_budget_minutes"),
        ({"compile_cache": "maybe"}, "serving.compile_cache"),
        ({"warm_cache": True}, "serving.warm_cache: unknown field"),
    ],
)
def test_bad_serving_fields_name_the_field(serving: dict[str, object], path: str) -> None:
    with pytest.raises(SpecError, match=path):
        parse_spec({**BASE, "serving": serving})


def test_a_budget_override_is_accepted() -> None:
    spec = parse_spec({**BASE, "serving": {"startup_budget_minutes": 120}})
    assert spec.serving.endpoint_access == "port-forward" and spec.serving.startup_budget_minutes == 120


def test_an_internal_nlb_is_refused_with_what_is_supported_and_why() -> None:
    # Nothing installs the AWS Load Balancer Controller: the Service would sit <pending> while a report
    # said an NLB was made.
    with pytest.raises(SpecError, match=r"serving.endpoint_access: 'internal-nlb' is not supported: .*AWS Load "
                                        r"Balancer Controller.*use 'port-forward'"):
        parse_spec({**BASE, "serving": {"endpoint_access": "internal-nlb"}})


def test_fsx_is_refused_with_what_is_supported_and_why() -> None:
    with pytest.raises(SpecError, match=r"weights.node_target: 'fsx' is not supported: capserve creates no FSx "
                                        r"for Lustre file system.*use 'nvme'"):
        parse_spec({**BASE, "weights": {"s3_bucket": "capserve-weights", "node_target": "fsx"}})
