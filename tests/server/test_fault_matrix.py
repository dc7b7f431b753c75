"""Two rows of the fault matrix (docs/faults.md) in the test suite: the money row and a cluster row.

A SIGKILL while the purchase is in flight (AWS sold the block, the answer never arrived) and a SIGTERM
once bring-up has ended: each re-run buys nothing more, destroys no healthy cluster, `capserve down` then
leaves nothing, and no process outlives the kill. The whole matrix is `make faults`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from faults.matrix import POINTS, Row, run_matrix
from faults.world import World, world

pytestmark = [pytest.mark.server, pytest.mark.faults]

ROWS = (("inside purchase", "SIGKILL"), ("after bring_up", "SIGTERM"))


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[World, Path]]:
    out = tmp_path_factory.mktemp("faults")
    with world(out / "logs") as the_world:
        yield the_world, out


@pytest.mark.parametrize(("point", "sig"), ROWS)
def test_a_killed_campaign_recovers_buys_once_and_leaves_nothing(
    running: tuple[World, Path], point: str, sig: str
) -> None:
    the_world, out = running
    [kill_point] = [p for p in POINTS if p.name == point]
    [row] = run_matrix(the_world, [kill_point], [sig], out, first=ROWS.index((point, sig)) + 1)
    assert _verdict(row) == {"purchases": 1, "destroyed": 0, "leftovers": 0, "orphans": 0, "re-run": "Completed"}, (
        row.notes
    )
    assert row.killed_at, row.notes  # the kill happened where it was meant to


def _verdict(row: Row) -> dict[str, object]:
    return {"purchases": row.purchases, "destroyed": row.destroyed, "leftovers": row.leftovers,
            "orphans": row.orphans, "re-run": row.rerun_state}
