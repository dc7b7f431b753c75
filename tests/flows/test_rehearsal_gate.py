"""capacity.require_rehearsal in the acquire flow, against the sandbox: no passing rehearsal of the spec, no purchase.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from capserve.core.capacity.settings import CapacitySettings
from capserve.core.rehearsal import RehearsalCheck, RehearsalCost, RehearsalRecord, rehearsal_digest, rehearsal_proof
from capserve.core.settings import RecordSettings
from capserve.core.spec import CampaignSpec, parse_spec
from capserve.core.stages import Stage, StageStatus
from capserve.flows.acquire import acquire
from capserve.sandbox.aws import moto_sandbox
from capserve.sandbox.aws_ext import capacity as ext
from capserve.sandbox.clock import CLOCK
from capserve.tasks.locations import record_ref
from capserve.tasks.record_store import read_record, save_rehearsal
from capserve.tasks.settings import settings_from_environment

FAST = CapacitySettings(poll_initial_seconds=0.01, poll_max_seconds=0.05, approval_timeout_seconds=1)


@pytest.fixture(scope="module")
def sandbox() -> Iterator[None]:
    with moto_sandbox("us-east-2"):
        yield


@pytest.fixture(autouse=True)
def clean(sandbox: None) -> Iterator[None]:
    ext.reset()
    CLOCK.reset()
    ext.SETTINGS.auto_activate = True
    yield
    ext.reset()
    CLOCK.reset()


def make_spec(name: str, **capacity: Any) -> CampaignSpec:
    data: dict[str, Any] = {
        "name": name,
        "model": {"catalog": "kimi-k3"},
        "capacity": {
            "provider": "ec2-capacity-block", "instance_type": "p6-b300.48xlarge", "instance_count": 1,
            "regions": ["us-east-2", "us-west-2"], "earliest_start": "now", "latest_end": "now+14d",
            "duration_hours": 24, "max_upfront_fee_usd": 4000, "approval_threshold_usd": 3500,
            "require_rehearsal": True, **capacity,
        },
        "weights": {"s3_bucket": f"{name}-bucket"},
    }
    return parse_spec(data)


def record_rehearsal(spec: CampaignSpec, result: str) -> None:
    """A rehearsal record of ``spec`` as `capserve rehearse` writes it, next to the campaign record."""
    vpc_cidr = settings_from_environment().bring_up.vpc_cidr
    now = CLOCK.now()
    record = RehearsalRecord(
        campaign_id=spec.campaign_id, rehearsal_id=f"{spec.campaign_id}-rh",
        digest=rehearsal_digest(spec, vpc_cidr=vpc_cidr), proves=rehearsal_proof(spec, vpc_cidr=vpc_cidr),
        rehearsed_at=now, result=result,  # type: ignore[arg-type]
        checks=(RehearsalCheck(name="bring_up", status=StageStatus.COMPLETED, started_at=now - timedelta(minutes=9),
                               ended_at=now, seconds=540.0),),
        verdict="pass" if result == "pass" else "fail", region="us-east-2", model="capserve-sandbox/tiny-k3",
        cost=RehearsalCost(instance_type="p6-b200.48xlarge", instances=1, minutes=20.0),
        why="" if result == "pass" else "evaluate failed",
    )
    save_rehearsal.fn(record_ref(spec, RecordSettings()).location, record)


def test_without_a_rehearsal_it_refuses_before_any_purchase_call() -> None:
    spec = make_spec("gate-none")
    result = acquire(spec, settings=FAST)
    assert result.outcome == "rehearsal-required"
    assert result.lease is None
    assert "`capserve rehearse <spec.yaml>`" in result.message
    assert ext.calls("purchase_capacity_block", include_dry_run=True) == []
    stored = read_record(record_ref(spec, RecordSettings()))
    assert stored is not None
    entry = stored.record.stage(Stage.ACQUIRE)
    assert entry is not None and entry.status is StageStatus.STOPPED


def test_a_failed_rehearsal_does_not_count() -> None:
    spec = make_spec("gate-failed")
    record_rehearsal(spec, "fail")
    result = acquire(spec, settings=FAST)
    assert result.outcome == "rehearsal-required"
    assert ext.calls("purchase_capacity_block", include_dry_run=True) == []


def test_a_rehearsal_of_another_spec_does_not_count() -> None:
    spec = make_spec("gate-changed")
    record_rehearsal(spec, "pass")
    changed = make_spec("gate-changed", regions=["us-west-2", "us-east-2"])  # another home region: another digest
    result = acquire(changed, settings=FAST)
    assert result.outcome == "rehearsal-required"
    assert ext.calls("purchase_capacity_block", include_dry_run=True) == []


def test_with_a_passing_rehearsal_of_the_same_spec_it_buys() -> None:
    spec = make_spec("gate-passed")
    record_rehearsal(spec, "pass")
    result = acquire(spec, settings=FAST)
    assert result.outcome == "bought"
    assert len(ext.calls("purchase_capacity_block")) == 1
