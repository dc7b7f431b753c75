"""The cost plots: what they draw (as data) and that the PNGs are written."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from capserve.core.cost.causes import Cause
from capserve.core.cost.charts import PAID_ROW, gantt, waterfall
from capserve.core.cost.inputs import BlockWindow, CostInputs, Interval, ScheduledRunMark
from capserve.core.cost.ledger import build_ledger
from capserve.core.cost.prices import load_price_table
from capserve.core.cost.resources import EksControlPlaneUsage
from capserve.tasks.cost.plots import write_cost_plots

START = datetime(2026, 12, 3, 11, 30, tzinfo=UTC)
END = START + timedelta(hours=24)
PNG = b"\x89PNG\r\n\x1a\n"


def _ledger(*, fee: float = 2880.0, adopted: bool = False, window: bool = True):  # type: ignore[no-untyped-def]
    minutes = timedelta(minutes=1)
    return build_ledger(
        CostInputs(
            campaign="k3-test",
            upfront_fee=fee if window else 0,
            adopted=adopted,
            region="us-east-1",
            window=BlockWindow.for_block(START, END, drain_before_end=45 * minutes) if window else None,
            instance_type="p6-b300.48xlarge",
            instance_count=1 if window else 0,
            gpus_per_instance=8 if window else 0,
            intervals=[
                Interval(cause=Cause.BRING_UP, start=START - 60 * minutes, end=START + 20 * minutes),
                Interval(cause=Cause.VLLM_COLD_START, start=START + 20 * minutes, end=START + 95 * minutes),
                Interval(cause=Cause.SERVING, start=START + 95 * minutes, end=END - 45 * minutes),
            ],
            resources=[EksControlPlaneUsage(name="EKS control plane", hours=25)],
            scheduled_runs=[
                ScheduledRunMark(name="teardown-k3-test", stage="teardown", scheduled_at=END - 35 * minutes)
            ],
        ),
        load_price_table(),
    )


def test_the_gantt_draws_the_attribution_the_recorded_stages_and_the_marks() -> None:
    bars, marks = gantt(_ledger())
    paid = [b for b in bars if b.row == PAID_ROW]
    assert [b.cause for b in paid] == [
        Cause.BRING_UP,
        Cause.VLLM_COLD_START,
        Cause.SERVING,
        Cause.DRAIN_AND_TEARDOWN_MARGIN,
        Cause.AWS_TERMINATION,
    ]
    assert paid[0].start == START and paid[-1].end == END
    # Bring-up began an hour before the block: that part is drawn, but not as paid time.
    bring_up = [b for b in bars if b.row == "bring_up"]
    assert [(b.start, b.end, b.paid) for b in bring_up] == [
        (START - timedelta(minutes=60), START, False),
        (START, START + timedelta(minutes=20), True),
    ]
    kinds = {m.kind: m.at for m in marks}
    assert kinds["drain"] == END - timedelta(minutes=45)
    assert kinds["aws_termination"] == END - timedelta(minutes=30)
    assert kinds["scheduled_run"] == END - timedelta(minutes=35)


def test_the_waterfall_closes_fee_minus_losses_equals_serving() -> None:
    ledger = _ledger()
    unit, steps = waterfall(ledger)
    assert unit == "USD"
    assert steps[0].label == "upfront fee" and steps[0].height == 2880.0
    losses = [s for s in steps if s.kind == "lost"]
    # bring_up 20 + cold start 75 + drain 15 + AWS 30 = 140 min × 8 GPUs × $0.25 = $280.
    assert sum(s.height for s in losses) == pytest.approx(280.0)
    serving = next(s for s in steps if s.kind == "serving")
    assert serving.height == pytest.approx(2880.0 - 280.0)
    assert losses[-1].base == pytest.approx(serving.height)  # the last loss lands on the serving bar
    assert steps[-1].kind == "other" and steps[-1].height == pytest.approx(2.5)


def test_an_adopted_block_is_drawn_in_gpu_hours() -> None:
    unit, steps = waterfall(_ledger(fee=0, adopted=True))
    assert unit == "GPU-hours"
    assert steps[0].height == 192.0
    assert steps[-1].kind == "serving" and steps[-1].height == pytest.approx(192.0 - 140 * 8 / 60)


def test_both_pngs_are_written(tmp_path: Path) -> None:
    paths = write_cost_plots(_ledger(), tmp_path)
    assert [p.name for p in paths] == ["cost_timeline.png", "cost_waterfall.png"]
    for path in paths:
        assert path.read_bytes()[:8] == PNG and path.stat().st_size > 5_000


def test_no_block_draws_nothing(tmp_path: Path) -> None:
    assert write_cost_plots(_ledger(window=False), tmp_path) == []
    assert gantt(_ledger(window=False)) == ([], [])
