"""``capserve rehearse SPEC.yaml``: the campaign's own path on on-demand capacity, start to teardown, before a
block is bought (docs/rehearsal.md). Runs in this process, like ``capserve up --in-process``: nothing is
scheduled, and teardown always ends it."""

from __future__ import annotations

import argparse
import os
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape

from capserve.cli.exit_codes import ExitCode
from capserve.cli.inputs import load_option, writable_dir
from capserve.cli.stand_ins import stand_in
from capserve.core.errors import CapserveError, SpecError
from capserve.core.spec import load_spec
from capserve.tasks.secrets import redact

if TYPE_CHECKING:
    from capserve.core.report import CampaignReport


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "rehearse",
        help="rehearse a campaign on on-demand capacity before buying",
        description="Run the campaign's stages (bring-up, weights, rollout, evaluation, teardown) on on-demand "
        "instances of the same GPU family with a small model, and record the result beside the campaign record: "
        "capacity.require_rehearsal refuses to buy without a passing one (docs/rehearsal.md).",
    )
    parser.add_argument("spec", type=Path, help="the campaign's spec (YAML)")
    parser.add_argument(
        "--sandbox",
        action="store_true",
        help="run against local stand-ins on 127.0.0.1 (moto, …) instead of AWS; nothing leaves this machine",
    )
    parser.add_argument("--out", type=Path, default=None, help="report folder (default: out/<campaign>-rehearsal)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    console = Console(stderr=True)
    from capserve.core.rehearsal import rehearsal_refusal

    # Every input is checked before anything runs or is created.
    try:
        spec = load_spec(args.spec)
        refused = rehearsal_refusal(spec)
        if refused is not None:
            raise SpecError(f"{args.spec}: {refused}")
        stand_ins = stand_in("environment") if args.sandbox else None  # a production install has none: exit 2
        if args.sandbox:
            load_option(spec.evaluation.load, f"{args.spec}: evaluation.load")
        else:  # as `capserve up`: missing or refused credentials are one line (exit 2) before anything starts
            from capserve.tasks.locations import caller_arn

            console.print(f"AWS credentials: {caller_arn(spec.capacity.regions[0])}", highlight=False)
        out_dir: Path = writable_dir(args.out or Path("out") / f"{spec.campaign_id}-rehearsal", "--out")
    except SpecError as exc:
        console.print(f"[red]error:[/red] {escape(redact(str(exc)))}", highlight=False)
        return ExitCode.BAD_INPUT

    if args.sandbox:
        os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    from capserve.flows.rehearse import rehearse

    hub_endpoint: str | None = None
    with ExitStack() as stack:
        if stand_ins is not None:
            endpoints = stack.enter_context(stand_ins.sandbox(served_model_name=spec.served_model_name))
            console.print(
                f"sandbox: AWS {endpoints.aws} ({endpoints.region}), Hub {endpoints.hub}, Kubernetes {endpoints.kube}",
                highlight=False,
            )
            hub_endpoint = endpoints.hub
        try:
            report = rehearse(spec, out_dir=out_dir, hub_endpoint=hub_endpoint)
        except SpecError as exc:  # preflight: found before anything was created
            console.print(f"[red]error:[/red] {escape(redact(str(exc)))}", highlight=False)
            console.print(f"report: {escape(str(out_dir / 'report.md'))}", highlight=False)
            return ExitCode.BAD_INPUT
        except CapserveError as exc:
            console.print(f"[red]rehearsal of {spec.campaign_id} failed:[/red] {escape(redact(str(exc)))}",
                          highlight=False)
            console.print(f"report: {escape(str(out_dir / 'report.md'))}", highlight=False)
            return ExitCode.FAILED
    return summary(report, out_dir)


def summary(report: CampaignReport, out_dir: Path) -> int:
    """Print the result; 0 when the rehearsal passed, 1 when it failed, 3 when its evaluation was invalid."""
    out = Console()
    record = report.rehearsal
    if record is None:  # the record could not be written: the log says why
        out.print(f"rehearsal: no record; report: {out_dir / 'report.md'}", highlight=False)
        return ExitCode.FAILED
    cost = f"${record.cost.usd:,.2f}" if record.cost.usd is not None else "unpriced"
    out.print(
        f"rehearsal: [bold]{record.result.upper()}[/bold] on {record.cost.instance_type} in {record.region} "
        f"({cost}, {record.cost.minutes:g} min); digest {record.digest}",
        highlight=False,
    )
    if record.why:
        out.print(f"why: {escape(redact(record.why))}", highlight=False)
    out.print(f"report: {out_dir / 'report.md'}\n        {out_dir / 'report.json'}", highlight=False)
    if record.result == "pass":
        return ExitCode.OK
    return ExitCode.INVALID if record.verdict == "invalid" else ExitCode.FAILED
