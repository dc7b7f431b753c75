"""The block's ledger, not one run's: each redeploy's downtime is a cause of its own, and paid still adds up."""

from __future__ import annotations

from datetime import datetime

from capserve.core.block_cost import with_redeploys
from capserve.core.cost.causes import Cause
from capserve.core.cost.ledger import build_ledger
from capserve.core.redeploy import RedeployEntry, down_phases
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


def test_a_redeploys_downtime_shows_its_phases_in_the_ledger_and_still_adds_up() -> None:
    """A warm redeploy: the old pods go at 18:20, vLLM starts at 18:22 and is ready at 18:25 (found its compile
    cache), the gate ends at 18:40. The ledger counts the same 20 minutes, split stop / start / gate."""
    phases = down_phases(at("18:20"), at("18:40"), ready_at=at("18:25"), start_s=180.0, cache="hit")
    promoted = redeploy("promoted", at("18:20"), at("18:40")).model_copy(update={"phases": phases})
    assert [(p.name, p.seconds / 60) for p in phases] == [("stop", 2.0), ("start", 3.0), ("gate", 15.0)]
    assert phases[1].note == "warm compile cache"

    ledger = build_ledger(with_redeploys(inputs(known_day()), [promoted]), PRICES)

    assert ledger.lost_gpu_minutes[Cause.REDEPLOYS] == 20 * 8
    ledger.check()
    shown = ledger.markdown()
    assert "### Redeploys' downtime, by phase" in shown
    assert "| 3.0 | redeploy to bbbbbbbb (promoted): start 3.0 min (warm compile cache) |" in shown
    assert "| 15.0 | redeploy to bbbbbbbb (promoted): gate 15.0 min" in shown
    assert promoted.report_entry()["downtime_phases"][1] == {"phase": "start", "minutes": 3.0,
                                                             "note": "warm compile cache"}


def test_a_rollback_after_a_failed_gate_is_its_own_phase() -> None:
    phases = down_phases(at("18:20"), at("19:00"), ready_at=at("18:30"), start_s=3600.0, cache="miss",
                         rollback_began=at("18:45"))
    # A start measured longer than the downtime before readiness is clipped to it: nothing counted twice.
    assert [(p.name, p.seconds / 60) for p in phases] == [("start", 10.0), ("gate", 15.0), ("rollback", 15.0)]
    assert phases[0].note == "cold compile cache"
    assert down_phases(at("18:20"), at("19:00"), ready_at=None, start_s=None, cache=None) == ()
    unmeasured = down_phases(at("18:20"), at("19:00"), ready_at=at("18:30"), start_s=None, cache="hit")
    assert [(p.name, p.seconds / 60) for p in unmeasured] == [("start", 10.0), ("gate", 30.0)]
