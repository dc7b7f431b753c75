"""PNG plots a person would rather look at than read: latency CDFs and throughput vs concurrency."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from capserve.core.evaluation import metrics as m
from capserve.core.evaluation.records import RunRecord
from capserve.core.evaluation.result import LoadResult
from capserve.tasks.pyplot import pyplot

if TYPE_CHECKING:
    from matplotlib.axes import Axes


def _cdf(ax: Axes, values_ms: list[float], label: str) -> None:
    if not values_ms:
        return
    ordered = sorted(values_ms)
    ax.step(ordered, [(i + 1) / len(ordered) for i in range(len(ordered))], where="post", label=label)


def latency_cdfs(runs: list[RunRecord], path: Path) -> Path:
    """One panel per metric (TTFT, TPOT, ITL, E2EL), one curve per run."""
    plt = pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    panels: list[tuple[str, Callable[[RunRecord], list[float]]]] = [
        ("TTFT (ms)", lambda r: [m.ttft(x) * 1000 for x in r.requests if x.success and x.chunk_times]),
        (
            "TPOT (ms)",
            lambda r: [t * 1000 for x in r.requests if x.success and x.chunk_times if (t := m.tpot(x)) is not None],
        ),
        ("ITL (ms)", lambda r: [g * 1000 for x in r.requests if x.success for g in m.itls(x)]),
        ("E2E latency (ms)", lambda r: [m.e2el(x) * 1000 for x in r.requests if x.success and x.chunk_times]),
    ]
    for ax, (title, extract) in zip(axes.flat, panels, strict=True):
        for run in runs:
            _cdf(ax, extract(run), run.name)
        ax.set_xlabel(title)
        ax.set_ylabel("fraction of samples ≤ x")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    fig.suptitle("Latency CDFs per load run")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def throughput_vs_concurrency(load: LoadResult, path: Path) -> Path:
    """Output tokens/s and p95 TTFT against closed-loop concurrency."""
    closed = sorted((p for p in load.points if p.mode == "closed"), key=lambda p: p.concurrency or 0)
    plt = pyplot()
    fig, left = plt.subplots(figsize=(8, 5))
    xs = [p.concurrency or 0 for p in closed]
    left.plot(xs, [p.metrics.output_throughput for p in closed], "o-", color="tab:blue", label="output tok/s")
    left.set_xlabel("concurrency (streams in flight)")
    left.set_ylabel("output tokens/s", color="tab:blue")
    left.set_xscale("log", base=2)
    right = left.twinx()
    right.plot(xs, [p.metrics.ttft_ms.p95 for p in closed], "s--", color="tab:red", label="p95 TTFT ms")
    right.set_ylabel("p95 TTFT (ms)", color="tab:red")
    for p in closed:
        if not p.valid:
            left.annotate("invalid", (p.concurrency or 0, p.metrics.output_throughput), color="gray")
    left.grid(alpha=0.3)
    fig.suptitle("Throughput and TTFT vs concurrency")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
