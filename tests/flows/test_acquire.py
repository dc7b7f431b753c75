"""The acquire flow end to end against the sandbox (moto + the capacity extension) and the Prefect test harness."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from capserve_sandbox.aws import moto_sandbox
from capserve_sandbox.aws_ext import capacity as ext
from capserve_sandbox.clock import CLOCK
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterState, FlowRunFilterStateType
from prefect.client.schemas.objects import StateType
from prefect.flow_runs import resume_flow_run

from capserve.core.capacity.adoption import lease_from_reservation
from capserve.core.capacity.ranking import rank_offers
from capserve.core.capacity.result import AcquireResult
from capserve.core.capacity.settings import CapacitySettings
from capserve.core.errors import PermanentError
from capserve.core.lease import Lease
from capserve.core.rehearsal import RehearsalCheck, RehearsalCost, RehearsalRecord, rehearsal_digest, rehearsal_proof
from capserve.core.settings import RecordSettings
from capserve.core.spec import CampaignSpec, parse_spec
from capserve.core.stages import Stage, StageStatus
from capserve.flows.acquire import acquire
from capserve.tasks.capacity.purchase import purchase
from capserve.tasks.capacity.search import search_offers, search_zones
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
    ext.SETTINGS.auto_activate = True  # as the demo runs it: scheduled → active without waiting
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
            **capacity,
        },
        "weights": {"s3_bucket": f"{name}-bucket"},
    }
    return parse_spec(data)


def test_buys_once_records_the_lease_and_a_rerun_adopts() -> None:
    spec = make_spec("acq-buy")
    result = acquire(spec, settings=FAST)
    assert result.outcome == "bought" and result.state is not None and result.state.value == "active"
    assert result.lease is not None and result.ranking is not None and result.ranking.chosen is not None
    assert result.lease.upfront_fee == result.ranking.chosen.upfront_fee
    sections = result.report_sections()
    assert sections["lease"] == result.lease.report_section()
    assert sum(1 for c in sections["offers_considered"] if c["chosen"]) == 1  # type: ignore[union-attr]
    assert "**chosen**" in result.markdown()
    stored = read_record(record_ref(spec, RecordSettings()))
    assert stored is not None and stored.record.lease == result.lease
    assert stored.record.purchase == result and result.bought_by  # the purchase whole, with the run that bought

    again = acquire(spec, settings=FAST)
    assert again.outcome == "adopted" and again.lease is not None
    assert again.lease.reservation_id == result.lease.reservation_id and again.lease.adopted
    assert again.lease.upfront_fee == result.lease.upfront_fee  # read back from the purchase's tag
    assert len(ext.calls("purchase_capacity_block")) == 1
    # The adoption replaced the record's lease, not its purchase: a report of the adopting run can still tell it.
    stored = read_record(record_ref(spec, RecordSettings()))
    assert stored is not None and stored.record.lease == again.lease and stored.record.purchase == result
    told = again.with_purchase(stored.record.purchase)
    assert (told.ranking, told.bought_by, told.adopted_by) == (result.ranking, result.bought_by, again.adopted_by)


def test_dry_run_checks_permissions_and_buys_nothing() -> None:
    result = acquire(make_spec("acq-dry"), dry_run=True, settings=FAST)
    assert result.outcome == "dry-run" and result.stopped
    assert ext.calls("purchase_capacity_block") == []
    assert len(ext.calls("purchase_capacity_block", include_dry_run=True)) == 1


def test_nothing_matching_says_why_per_region() -> None:
    ext.SETTINGS.regions_without_capacity.add("us-west-2")
    with pytest.raises(PermanentError) as caught:
        acquire(make_spec("acq-none", max_upfront_fee_usd=100, approval_threshold_usd=50), settings=FAST)
    text = str(caught.value)
    assert "us-east-2:" in text and "over budget" in text
    assert "us-west-2: no offers" in text
    assert ext.calls("purchase_capacity_block", include_dry_run=True) == []


def test_an_existing_reservation_is_validated_and_adopted() -> None:
    spec = make_spec("acq-existing")
    offer = search_offers.fn(spec.capacity)[0]
    bought = purchase.fn(offer, "someone-else")
    existing = make_spec(
        "acq-existing", provider="existing-reservation", reservation_id=bought.reservation_id,
        regions=[offer.region], earliest_start=None, latest_end=None, duration_hours=None, max_upfront_fee_usd=None,
    )
    result = acquire(existing, settings=FAST)
    assert result.outcome == "adopted" and result.lease is not None
    assert result.lease.provider == "existing-reservation" and result.lease.reservation_id == bought.reservation_id
    wrong = existing.model_copy(
        update={"capacity": existing.capacity.model_copy(update={"instance_type": "p5.48xlarge"})}
    )
    with pytest.raises(PermanentError, match="fix capacity.instance_type"):
        acquire(wrong, settings=FAST)
    assert len(ext.calls("purchase_capacity_block")) == 1  # only the setup purchase


def _resume_when_paused(answer: dict[str, Any], done: threading.Event) -> None:
    """Play the approver: wait for the run to pause, then answer through Prefect's API."""
    with get_client(sync_client=True) as client:
        while not done.is_set():
            paused = client.read_flow_runs(
                flow_run_filter=FlowRunFilter(
                    state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.PAUSED]))
                )
            )
            if paused:
                resume_flow_run(paused[0].id, run_input=answer)
                return
            time.sleep(0.5)


def test_a_rejected_purchase_stops_cleanly_with_nothing_bought() -> None:
    spec = make_spec("acq-reject", approval_threshold_usd=100)
    done = threading.Event()
    results: list[AcquireResult] = []
    # The answer names the offer it is about (the UI form carries it as initial data). Ranking is a
    # deterministic function of the sandbox's offers, so the approver can work out the same choice.
    chosen = rank_offers(search_offers.fn(spec.capacity), spec.capacity, regions=spec.capacity.regions,
                         gpus_per_instance=8, zones=search_zones.fn(spec.capacity)).chosen
    assert chosen is not None
    answer = {"approved": False, "offering_id": chosen.offering_id, "approver": "alice", "note": "too early"}
    approver = threading.Thread(target=_resume_when_paused, args=(answer, done))
    approver.start()
    try:
        results.append(acquire(spec, settings=FAST.model_copy(update={"approval_timeout_seconds": 120})))
    finally:
        done.set()
        approver.join()
    [result] = results
    assert result.outcome == "rejected" and result.lease is None
    assert "alice" in result.message and "nothing was bought" in result.message
    # What the offers weighed would have bought (the approval form showed the same table).
    assert result.forecasts and result.forecasts[0].label == chosen.label()
    assert 0 < result.forecasts[0].expected_utilisation < 1
    assert ext.calls("purchase_capacity_block", include_dry_run=True) == []
    stored = read_record(record_ref(spec, RecordSettings()))
    assert stored is not None and stored.record.stages["acquire"].status == "stopped"
    [approval] = stored.record.approvals  # who decided, when, and why: kept for good
    assert (approval.approved, approval.approver, approval.note) == (False, "alice", "too early")
    assert approval.subject == chosen.offering_id


def test_an_unanswered_approval_times_out_with_nothing_bought() -> None:
    result = acquire(make_spec("acq-timeout", approval_threshold_usd=100), settings=FAST)
    assert result.outcome == "approval-timed-out" and result.stopped
    assert ext.calls("purchase_capacity_block", include_dry_run=True) == []


def _bound_lease(spec: CampaignSpec) -> Lease:
    """A lease as a scheduled serve run finds it in the record: bought by the campaign run earlier."""
    offer = search_offers.fn(spec.capacity)[0]
    bought = purchase.fn(offer, spec.campaign_id)
    return lease_from_reservation(bought, provider="ec2-capacity-block", adopted=False, fee=offer.upfront_fee)


def test_a_run_bound_to_a_live_reservation_adopts_exactly_it() -> None:
    spec = make_spec("acq-bound-live")
    lease = _bound_lease(spec)
    searched = len(ext.calls("describe_capacity_block_offerings"))
    result = acquire(spec, settings=FAST, bound=lease)
    assert (result.outcome, result.lease and result.lease.reservation_id) == ("adopted", lease.reservation_id)
    assert len(ext.calls("describe_capacity_block_offerings")) == searched  # it never looked for offers


def test_a_run_bound_to_an_ended_reservation_stops_without_searching_or_buying() -> None:
    spec = make_spec("acq-bound-ended")
    lease = _bound_lease(spec)
    searched = len(ext.calls("describe_capacity_block_offerings"))
    CLOCK.advance(lease.end - CLOCK.now() + timedelta(hours=1))  # the worker was down past the block's end
    result = acquire(spec, settings=FAST, bound=lease)
    assert (result.outcome, result.lease) == ("expired", None)
    assert f"started for reservation {lease.reservation_id}" in result.message and "never buys" in result.message
    assert len(ext.calls("describe_capacity_block_offerings")) == searched
    assert len(ext.calls("purchase_capacity_block", include_dry_run=True)) == 1  # only the setup purchase


def test_a_run_bound_to_a_reservation_aws_does_not_know_stops_without_buying() -> None:
    spec = make_spec("acq-bound-gone")
    lease = _bound_lease(spec).model_copy(update={"reservation_id": "cr-0000000000000dead"})
    result = acquire(spec, settings=FAST, bound=lease)
    assert result.outcome == "expired" and "cr-0000000000000dead does not exist in" in result.message
    assert len(ext.calls("purchase_capacity_block", include_dry_run=True)) == 1


def test_a_run_bound_to_a_reservation_in_another_zone_than_recorded_stops_without_buying() -> None:
    # The cluster's private subnet was built for the recorded zone: GPU nodes cannot launch into the block elsewhere.
    spec = make_spec("acq-bound-moved")
    lease = _bound_lease(spec)
    elsewhere = next(z for z in (f"{lease.region}a", f"{lease.region}b") if z != lease.availability_zone)
    result = acquire(spec, settings=FAST, bound=lease.model_copy(update={"availability_zone": elsewhere}))
    assert result.outcome == "expired" and f"the record says {elsewhere}" in result.message
    assert len(ext.calls("purchase_capacity_block", include_dry_run=True)) == 1


def test_an_offer_taken_by_another_buyer_before_the_purchase_is_searched_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Two campaigns started together rank the same offers: here the other one buys our choice between our search
    # and our purchase. Ours gets EC2's NotFound for it, nothing is bought, and it buys the next one instead.
    import capserve.flows.acquire as acquire_module

    spec = make_spec("acq-taken")
    real_preflight = acquire_module.preflight_purchase
    taken: list[str] = []

    def another_buyer_first(offer: Any, campaign_id: str) -> None:
        if not taken:
            taken.append(offer.offering_id)
            purchase.fn(offer, "acq-other")  # the other campaign's purchase lands first
        real_preflight(offer, campaign_id)

    monkeypatch.setattr(acquire_module, "preflight_purchase", another_buyer_first)
    result = acquire(spec, settings=FAST)

    assert result.outcome == "bought" and result.lease is not None
    assert result.ranking is not None and result.ranking.chosen is not None
    assert result.ranking.chosen.offering_id != taken[0]
    bought = sorted(r["tags"]["capserve.io/campaign"] for r in ext.reservations())
    assert bought == ["acq-other", "acq-taken"]  # one block each: ours was bought once, after the second search


# ----------------------------------------------------------------------------- capacity.require_rehearsal
# No passing rehearsal of this very spec (capserve rehearse), no purchase call.


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
    spec = make_spec("gate-none", require_rehearsal=True)
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
    spec = make_spec("gate-failed", require_rehearsal=True)
    record_rehearsal(spec, "fail")
    result = acquire(spec, settings=FAST)
    assert result.outcome == "rehearsal-required"
    assert ext.calls("purchase_capacity_block", include_dry_run=True) == []


def test_a_rehearsal_of_another_spec_does_not_count() -> None:
    spec = make_spec("gate-changed", require_rehearsal=True)
    record_rehearsal(spec, "pass")
    # Another home region: another digest.
    changed = make_spec("gate-changed", require_rehearsal=True, regions=["us-west-2", "us-east-2"])
    result = acquire(changed, settings=FAST)
    assert result.outcome == "rehearsal-required"
    assert ext.calls("purchase_capacity_block", include_dry_run=True) == []


def test_with_a_passing_rehearsal_of_the_same_spec_it_buys() -> None:
    spec = make_spec("gate-passed", require_rehearsal=True)
    record_rehearsal(spec, "pass")
    result = acquire(spec, settings=FAST)
    assert result.outcome == "bought"
    assert len(ext.calls("purchase_capacity_block")) == 1
