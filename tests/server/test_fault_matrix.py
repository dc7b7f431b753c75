"""A chain of the fault matrix (docs/faults.md) in the test suite: the money kill, a cluster kill, the CLI.

One campaign SIGKILLed while the purchase is in flight (AWS sold the block, the answer never arrived), its
re-run SIGTERMed once bring-up has ended, a last re-run from `capserve up` whose CLI is SIGTERMed once the run
exists, then `capserve down`: one purchase, no healthy cluster destroyed, nothing left, no process outliving
a kill, each re-run past the killed point, and the last run Completed without its CLI. It runs in `make test`
(CI); the whole matrix is `make faults`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from faults.matrix import CLI_POINT, POINTS, Row, run_matrix
from faults.world import world

pytestmark = [pytest.mark.server, pytest.mark.faults]

KILLS = (("inside purchase", "SIGKILL"), ("after bring_up", "SIGTERM"))


def test_a_campaign_killed_twice_recovers_each_time_buys_once_and_leaves_nothing(tmp_path: Path) -> None:
    points = {p.name: p for p in POINTS}
    with world(tmp_path / "logs", victims=2) as the_world:  # one chain: two victims are all it kills
        rows = run_matrix(the_world, [[(points[name], sig) for name, sig in KILLS]], tmp_path)
    assert [(row.point.name, row.signal) for row in rows] == [*KILLS, (CLI_POINT.name, "SIGTERM")]
    assert [_verdict(row) for row in rows] == [
        {"purchases": 1, "destroyed": 0, "leftovers": 0, "orphans": 0, "then": "Killed", "recovered": True},
        {"purchases": 1, "destroyed": 0, "leftovers": 0, "orphans": 0, "then": "Completed", "recovered": True},
        {"purchases": 1, "destroyed": 0, "leftovers": 0, "orphans": 0, "then": "Completed", "recovered": True},
    ], [row.notes for row in rows]
    assert rows[0].killed_at.startswith("cr-"), rows[0].notes  # the purchase was in flight: AWS had sold it
    assert rows[1].killed_at == "bring_up ended", rows[1].notes
    assert rows[2].killed_at.startswith("run ") and not rows[2].notes, rows[2].notes  # exit 130, as documented


def _verdict(row: Row) -> dict[str, object]:
    return {"purchases": row.purchases, "destroyed": row.destroyed, "leftovers": row.leftovers,
            "orphans": row.orphans, "then": row.rerun_state, "recovered": row.recover_seconds is not None}
