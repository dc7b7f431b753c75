"""``capserve up SPEC.yaml``: run a campaign, for real or against the sandbox."""

from __future__ import annotations

import argparse
import os
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from capserve.core.errors import CapserveError
from capserve.core.spec import load_spec

if TYPE_CHECKING:
    from capserve.core.report import CampaignReport


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "up",
        help="run a campaign from a spec",
        description="Run the campaign a spec describes: plan, and the stages after it, then write the report.",
    )
    parser.add_argument("spec", type=Path, help="campaign spec (YAML)")
    parser.add_argument(
        "--sandbox",
        action="store_true",
        help="run against local stand-ins on 127.0.0.1 (moto, …) instead of AWS; nothing leaves this machine",
    )
    parser.add_argument("--out", type=Path, default=None, help="report folder (default: out/<campaign>)")
    parser.add_argument(
        "--teardown-when-done",
        action="store_true",
        help="tear down as soon as the stages finish, instead of at the lease's hard-teardown time",
    )
    parser.add_argument(
        "--yes",
        dest="interactive",
        action="store_false",
        help="never prompt: purchases above the approval threshold wait for approval in the Prefect UI",
    )
    parser.add_argument(
        "--evaluate-url",
        default=None,
        metavar="URL",
        help="OpenAI-compatible endpoint to evaluate (with --sandbox: the sandbox's local server)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    console = Console(stderr=True)
    try:
        spec = load_spec(args.spec)
    except CapserveError as exc:
        console.print(f"[red]error:[/red] {exc}", markup=True, highlight=False)
        return 2
    out_dir: Path = args.out or Path("out") / spec.campaign_id

    if args.sandbox:
        # The sandbox is offline by design: Prefect's temporary server would only log failed telemetry.
        os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    # Imported here: prefect takes a second to import, and `capserve up --help` should not wait.
    from capserve.flows.campaign import campaign

    endpoint_url: str | None = args.evaluate_url
    endpoint_note: str | None = None
    hub_endpoint: str | None = None
    with ExitStack() as stack:
        if args.sandbox:
            from capserve.sandbox.environment import sandbox

            endpoints = stack.enter_context(sandbox(served_model_name=spec.served_model_name))
            console.print(
                f"sandbox: AWS {endpoints.aws} ({endpoints.region}), Hub {endpoints.hub}, "
                f"inference {endpoints.inference}",
                highlight=False,
            )
            hub_endpoint = endpoints.hub
            if endpoint_url is None:
                endpoint_url, endpoint_note = endpoints.inference, endpoints.inference_note
        try:
            report = campaign(
                spec,
                out_dir=out_dir,
                hub_endpoint=hub_endpoint,
                endpoint_url=endpoint_url,
                endpoint_note=endpoint_note,
                interactive=args.interactive and sys.stdin.isatty(),
                teardown_when_done=args.teardown_when_done,
            )
        except CapserveError as exc:
            console.print(f"[red]campaign {spec.campaign_id} stopped:[/red] {exc}", highlight=False)
            console.print(f"report: {out_dir / 'report.md'}", highlight=False)
            return 1
    print_summary(report, out_dir)
    # A campaign whose endpoint failed its gates did its job, but what it serves is not acceptable:
    # scripts and schedules must be able to tell.
    return 1 if report.evaluation is not None and report.evaluation.verdict == "fail" else 0


def print_summary(report: CampaignReport, out_dir: Path) -> None:
    out = Console()
    plan = report.plan
    if plan is not None:
        out.print(
            f"[bold]{plan.model}[/bold] on {plan.nodes} × {plan.instance_type}: "
            f"TP {plan.tensor_parallel}, PP {plan.pipeline_parallel}, DP {plan.data_parallel}, "
            f"EP {plan.expert_parallel} — {plan.weight_bytes_per_gpu / 1024**3:,.1f} GiB of weights per GPU",
            highlight=False,
        )
    evaluation = report.evaluation
    if evaluation is not None:
        failed = [g.name for g in evaluation.gates if g.passed is False]
        out.print(
            f"evaluation: [bold]{evaluation.verdict.upper()}[/bold] "
            f"({len(evaluation.gates)} gates{', failed: ' + ', '.join(failed) if failed else ''})",
            highlight=False,
        )
    out.print(f"report: {out_dir / 'report.md'}\n        {out_dir / 'report.json'}", highlight=False)
