"""The block's ledger, not one run's: each redeploy's downtime is a cause of its own, and paid still adds up."""

from __future__ import annotations

from datetime import datetime

from capserve.core.block_cost import after_the_drain, with_redeploys
from capserve.core.cost import Cause, build_ledger
from capserve.core.redeploy import RedeployEntry
from tests.unit.test_cost_ledger import PRICES, at, inputs, known_day


def redeploy(outcome: str, down_from: datetime | None, ended: datetime) -> RedeployEntry:
    return RedeployEntry.model_validate({
        "from_sha": "a" * 40, "to_sha": "b" * 40, "trigger": "revision-published", "strategy": "recreate",
        "verdict": "pass" if outcome == "promoted" else "fail", "outcome": outcome, "started_at": at("18:00"),
        "ended_at": ended, "down_from": down_from,
    })


def test_each_redeploys_downtime_is_its_own_cause_and_paid_is_still_serving_plus_lost() -> None:
    served = inputs(known_day())
    promoted = redeploy("promoted", at("18:20"), at("19:55"))  # recreate: 95 min from the old pods' deletion
    rolled_back = redeploy("rolled-back", at("02:10", day=1), at("04:00", day=1))  # 110 min, rollback included
    kept = redeploy("rolled-back", None, at("06:00", day=1))  # blue-green: the old revision served throughout
    ledger = build_ledger(with_redeploys(served, [promoted, rolled_back, kept]), PRICES)
    before = build_ledger(served, PRICES)
    # The serving run's ledger served 1215 min; the redeploys took 95 + 110 = 205 of them.
    assert ledger.lost_gpu_minutes[Cause.REDEPLOYS] == (95 + 110) * 8
    assert ledger.serving_gpu_minutes == before.serving_gpu_minutes - (95 + 110) * 8 == (1215 - 205) * 8
    assert ledger.paid_gpu_minutes == ledger.serving_gpu_minutes + sum(ledger.lost_gpu_minutes.values())
    ledger.check()


def test_rebuilding_replaces_the_redeploys_already_counted() -> None:
    once = with_redeploys(inputs(known_day()), [redeploy("promoted", at("18:20"), at("19:55"))])
    again = with_redeploys(once, [redeploy("promoted", at("18:20"), at("19:55"))])
    assert [i.cause for i in again.intervals].count(Cause.REDEPLOYS) == 1


def test_after_the_drain_the_projection_note_gives_way_to_the_drain_run() -> None:
    projected = "Serving after 2026-12-01 13:56 UTC is projected: the report was written then, and the endpoint ..."
    served = inputs(known_day()).model_copy(update={"notes": ["Simulated window.", projected]})
    assert after_the_drain(served, None) == served  # before the drain, serving ahead is still a projection
    settled = after_the_drain(served, at("10:46", day=1))
    assert settled.notes[0] == "Simulated window." and not any("projected" in note for note in settled.notes)
    assert settled.notes[-1].endswith("the drain run ended at 2026-12-04 10:46 UTC (the campaign record).")
    assert settled.intervals == served.intervals  # the figures stay
