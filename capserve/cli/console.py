"""The console ``capserve up`` writes to, and the closing summary it ends with on every path, read from report.json.

What a person needs when the command ends, whichever way it ended: what was served and its verdict, how much of the
paid block served against the spec's target, the fee and what a million output tokens cost, and where the report
is. A block that was bought and never served is said in so many words: it is the costliest outcome there is.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.console import Console


def plain_console(*, stderr: bool = False) -> Console:
    """A rich console that, off a terminal, writes each line whole: no wrap at 80 columns mid-sentence (a log
    reader or a test reads the line as it was said); on a terminal rich wraps to its width as usual."""
    probe = Console(stderr=stderr)
    return Console(stderr=stderr, soft_wrap=not probe.is_terminal)


def read_report(out_dir: Path) -> dict[str, Any] | None:
    """report.json in ``out_dir`` (None when none was written)."""
    try:
        found = json.loads((out_dir / "report.json").read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def print_summary(out_dir: Path) -> None:
    """The closing summary (stdout): what report.json says, or that there is none."""
    out = plain_console()
    report = read_report(out_dir)
    if report is None:
        out.print(f"no report was written (nothing ran far enough); report folder: {out_dir}", highlight=False)
        return
    for line in summary_lines(report, out_dir):
        out.print(line, highlight=False)


def block_unused(report: Mapping[str, Any]) -> bool:
    """A block was paid for (or adopted) and not one GPU-minute of it served, as the block's ledger says."""
    cost = report.get("cost") or {}
    paid = cost.get("paid_gpu_minutes") or 0
    return bool(report.get("lease")) and paid > 0 and not (cost.get("serving_gpu_minutes") or 0)


def summary_lines(report: Mapping[str, Any], out_dir: Path) -> list[str]:
    """One line each: plan, verdict, utilisation against target, fee and $/Mtok, the unused block, report path."""
    lines: list[str] = []
    plan = report.get("plan")
    if plan:
        lines.append(
            f"{plan.get('model')} on {plan.get('nodes')} × {plan.get('instance_type')}: "
            f"TP {plan.get('tensor_parallel')}, PP {plan.get('pipeline_parallel')}, "
            f"DP {plan.get('data_parallel')}, EP {plan.get('expert_parallel')}"
            f" — {(plan.get('weight_bytes_per_gpu') or 0) / 1024**3:,.1f} GiB of weights per GPU"
        )
    evaluation = report.get("evaluation")
    if evaluation:
        failed = [g.get("name") for g in evaluation.get("gates") or [] if g.get("passed") is False]
        gates = len(evaluation.get("gates") or [])
        lines.append(f"evaluation: {str(evaluation.get('verdict')).upper()} ({gates} gates"
                     + (f", failed: {', '.join(str(f) for f in failed)})" if failed else ")"))
    else:
        lines.append("evaluation: none (no endpoint was evaluated)")
    cost = report.get("cost")
    if cost:
        utilisation, target = cost.get("utilisation"), cost.get("utilisation_target")
        used = "unknown" if utilisation is None else f"{utilisation:.0%}"
        aim = "" if target is None else f" (target {target:.0%}{', met' if cost.get('meets_target') else ', MISSED'})"
        lines.append(f"utilisation: {used} of the block's paid GPU-hours served{aim}: "
                     f"{cost.get('serving_gpu_hours', 0):,.1f} of {cost.get('paid_gpu_hours', 0):,.1f} GPU-hours")
        per_mtok = cost.get("usd_per_million_output_tokens")
        price = "n/a (no throughput measured)" if per_mtok is None else f"${per_mtok:,.2f}"
        lines.append(f"cost: fee ${cost.get('upfront_fee', 0):,.0f}, total ${cost.get('total_cost', 0):,.0f}; "
                     f"per million output tokens {price}")
    elif report.get("lease"):
        lease = report["lease"]
        lines.append(f"cost: fee ${lease.get('upfront_fee', 0):,.0f} (the block's ledger is written when it ends)")
    if block_unused(report):
        lines.append("UNUSED BLOCK: the block was paid for and served nothing (see the report's Cost section)")
    lines.append(f"report: {out_dir / 'report.md'}")
    return lines
