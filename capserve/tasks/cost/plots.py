"""The ledger as pictures: the reservation's Gantt timeline and the cost waterfall (PNG).

What is drawn comes from ``capserve.core.cost.charts``; the same content is in the ledger's markdown
tables (``CostLedger.markdown``), which is what the Prefect artifact shows.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Literal

from capserve.core.cost.causes import LOST_CAUSES, Cause
from capserve.core.cost.charts import PAID_ROW, gantt, waterfall
from capserve.core.cost.ledger import CostLedger
from capserve.core.report import COST_PLOTS
from capserve.tasks.pyplot import pyplot

# Serving is green; every loss is a warm or grey shade, failures red, so "paid but idle" reads at a glance.
COLOURS: dict[Cause, str] = {
    Cause.SERVING: "#2ca02c",
    Cause.WAITING_FOR_BRING_UP: "#c7c7c7",
    Cause.BRING_UP: "#ffbb78",
    Cause.NODE_READINESS: "#f7b6d2",
    Cause.WEIGHTS_TO_NODES: "#dbdb8d",
    Cause.VLLM_COLD_START: "#ff7f0e",
    Cause.EVALUATION: "#9edae5",
    Cause.IDLE: "#7f7f7f",
    Cause.DRAIN_AND_TEARDOWN_MARGIN: "#c5b0d5",
    Cause.AWS_TERMINATION: "#8c564b",
    Cause.FAILURES_AND_ROLLBACKS: "#d62728",
    Cause.REDEPLOYS: "#e377c2",
}
_MARK_STYLE: dict[str, tuple[str, Literal["-", "--", ":"]]] = {
    "block_start": ("black", "-"),
    "drain": ("tab:blue", "--"),
    "aws_termination": ("tab:red", "-"),
    "block_end": ("black", "-"),
    "scheduled_run": ("tab:purple", ":"),
}


def reservation_gantt(ledger: CostLedger, path: Path) -> Path | None:
    """The block (one row, every minute coloured by cause) and each recorded cause below it.

    Parts of a recorded interval outside the block are drawn faded: they were not paid GPU time.
    Returns None when there was no block (nothing to draw).
    """
    bars, marks = gantt(ledger)
    if not bars or ledger.window is None:
        return None
    origin = ledger.window.start

    def hours(at: datetime) -> float:
        return (at - origin).total_seconds() / 3600

    rows = [PAID_ROW] + [c.value for c in (Cause.SERVING, *LOST_CAUSES) if any(b.row == c.value for b in bars)]
    plt = pyplot()
    from matplotlib.lines import Line2D  # after pyplot() chose the backend
    from matplotlib.patches import Patch

    fig, ax = plt.subplots(figsize=(12, 0.45 * len(rows) + 2.2))
    for bar in bars:
        y = len(rows) - 1 - rows.index(bar.row)
        left = hours(bar.start)
        width = hours(bar.end) - left
        ax.barh(
            y,
            width,
            left=left,
            height=0.8 if bar.row == PAID_ROW else 0.6,
            color=COLOURS[bar.cause],
            alpha=1.0 if bar.paid else 0.35,
            hatch=None if bar.paid else "//",
            edgecolor="white" if bar.paid else "grey",
            linewidth=0.3,
        )
    mark_handles: list[Line2D] = []
    for mark in marks:
        colour, style = _MARK_STYLE[mark.kind]
        ax.axvline(hours(mark.at), color=colour, linestyle=style, linewidth=1)
        mark_handles.append(
            Line2D([], [], color=colour, linestyle=style, label=f"{mark.label} ({mark.at:%m-%d %H:%M})")
        )
    ax.set_yticks(range(len(rows)), list(reversed(rows)))
    in_block = {b.cause for b in bars if b.row == PAID_ROW}
    used = [c for c in (Cause.SERVING, *LOST_CAUSES) if c in in_block]
    ax.legend(
        handles=[*(Patch(color=COLOURS[c], label=c.value) for c in used), *mark_handles],
        fontsize=7,
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
    )
    utilisation = ledger.utilisation or 0.0
    ax.set_title(
        f"Reservation of {ledger.campaign}: {ledger.serving_gpu_hours:,.1f} of {ledger.paid_gpu_hours:,.1f} GPU-h "
        f"serving ({utilisation:.1%}, target {ledger.utilisation_target:.0%})",
        fontsize=10,
    )
    ax.set_xlabel(
        f"hours from the block's start ({origin:%Y-%m-%d %H:%M} UTC, campaign clock); hatched: outside the paid block"
    )
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def cost_waterfall(ledger: CostLedger, path: Path) -> Path | None:
    """Fee → what each cause lost → what served (USD; GPU-hours for an adopted block). None without a block."""
    unit, steps = waterfall(ledger)
    if not steps:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(6.0, 0.8 * len(steps) + 2), 5))
    colours = {"paid": "#1f77b4", "serving": COLOURS[Cause.SERVING], "other": "#17becf"}
    for x, step in enumerate(steps):
        colour = COLOURS[step.cause] if step.cause is not None else colours[step.kind]
        ax.bar(x, step.height, bottom=step.base, color=colour, edgecolor="black", linewidth=0.4)
        value = f"${step.height:,.0f}" if unit == "USD" else f"{step.height:,.1f}"
        ax.annotate(value, (x, step.base + step.height), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(steps)), [s.label for s in steps], rotation=35, ha="right", fontsize=8)
    ax.set_ylabel(unit)
    ax.set_title(f"Where the {'fee' if unit == 'USD' else 'paid GPU-hours'} went: {ledger.campaign}", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write_cost_plots(ledger: CostLedger, out_dir: Path) -> list[Path]:
    """Both plots into ``out_dir`` (cost_timeline.png, cost_waterfall.png); none when there was no block."""
    out_dir.mkdir(parents=True, exist_ok=True)
    timeline, waterfall_png = COST_PLOTS  # the names report.md links to
    drawn = [
        reservation_gantt(ledger, out_dir / timeline),
        cost_waterfall(ledger, out_dir / waterfall_png),
    ]
    return [p for p in drawn if p is not None]
