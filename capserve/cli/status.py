"""``capserve status [SPEC.yaml | NAME]``: a campaign's record, its Prefect runs, and what exists of it; with
neither, every campaign recorded in a home region, one line each (read-only).

Given a spec, the record is found where the campaign keeps it; given only a campaign name, ``--region``
(the campaign's home region, where its record lives) says where to look, and the spec comes from the
record. Nothing is created, changed or deleted; each place that cannot be asked says so.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from capserve.cli.exit_codes import ExitCode
from capserve.core.errors import PermanentError, SpecError
from capserve.core.settings import RecordSettings
from capserve.core.spec import AWS_REGION, CampaignSpec, load_spec
from capserve.core.status import CampaignStatus, Part, ResourceRow, RunRow, short_digest
from capserve.tasks.secrets import redact

NAME = r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$"


class CampaignNotFoundError(PermanentError):
    """No campaign of that name where ``capserve status`` looked (exit 1, FAILED: not a usage error)."""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "status",
        help="show a campaign: its record, its Prefect runs, what exists in AWS and Kubernetes",
        description="Show a campaign's stages (from its record), its Prefect flow runs (when a server is "
        "configured) and what carries its tag in AWS and in its cluster. Read-only.",
    )
    parser.add_argument("campaign", nargs="?", default=None,
                        help="the campaign's spec (YAML), or its name (then give --region); none: list every "
                        "campaign recorded in the home region")
    parser.add_argument(
        "--region", default=None, metavar="REGION",
        help="the campaign's home region (where its record lives); needed with a name, checked against the spec; "
        "without a campaign, the home region whose campaigns are listed (default: the records' region setting, "
        "then AWS_REGION / AWS_DEFAULT_REGION)",
    )
    parser.add_argument("--json", action="store_true", help="print the status as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import re

    if args.region is not None and not re.match(AWS_REGION, args.region):
        raise SpecError(f"--region: {args.region!r} is not an AWS region name (e.g. us-east-2)")
    from capserve.core.locations import home_region
    from capserve.tasks.locations import locate_records, record_ref
    from capserve.tasks.settings import settings_for, settings_from_environment
    from capserve.tasks.status import campaign_status, read_campaign_record

    settings = settings_from_environment()
    if args.campaign is None:
        return list_campaigns(args.region or settings.records.region or _default_region(), settings.records,
                              as_json=args.json)
    spec: CampaignSpec | None = None
    if Path(args.campaign).is_file() or args.campaign.endswith((".yaml", ".yml")):
        spec = load_spec(args.campaign)
        settings = settings_for(spec, settings)
        ref = record_ref(spec, settings.records)
        name = spec.campaign_id
        if args.region is not None and args.region != home_region(spec, settings.records):
            raise SpecError(
                f"--region {args.region}: campaign {name}'s home region is {home_region(spec, settings.records)} "
                "(its record lives there); drop --region or fix it"
            )
    else:
        name = args.campaign
        if not re.match(NAME, name):
            raise SpecError(f"{name!r} is neither a spec file nor a campaign name (lowercase letters, digits, '-')")
        if args.region is None:
            raise SpecError(f"campaign {name}: give --region (its home region: where its record lives), or the spec")
        from capserve.core.record import RecordRef

        ref = RecordRef(campaign_id=name, location=locate_records.fn(args.region, settings.records))
    record = read_campaign_record(ref)
    if spec is None:
        # A name well formed but unknown where it was looked for (a misspelling, another region): not a bad
        # input to fix in the command's syntax but an answer, "no such campaign there" (exit 1, as for a spec
        # of which nothing exists).
        if record is None:
            raise CampaignNotFoundError(
                f"no campaign named {name} was found: no record at {ref.uri} (home region {args.region}); "
                "check the name and --region, or pass the spec"
            )
        spec = record.load_spec()
        if spec is None:
            raise CampaignNotFoundError(
                f"campaign {name}: its record at {ref.uri} holds no spec; pass the spec to see the rest"
            )
    regions = [record.lease.region] if record is not None and record.lease is not None else list(spec.capacity.regions)
    status = campaign_status(spec, ref, record, settings, regions=regions)
    if args.json:
        print(redact(json.dumps(status.model_dump(mode="json"), indent=2)))
    else:
        print_status(status)
    return ExitCode.OK if status.exists_anywhere else ExitCode.FAILED


def _default_region() -> str:
    import os

    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if not region:
        raise SpecError("--region: give the home region whose campaigns to list (where their records live), "
                        "or set AWS_REGION")
    return region


def list_campaigns(region: str, records: RecordSettings, *, as_json: bool) -> int:
    """Every campaign whose record lives in ``region``: its block, where it is, and what it has paid so far."""
    from capserve.core.status import campaign_line
    from capserve.tasks.hub_watch import list_campaign_records
    from capserve.tasks.locations import locate_records
    from capserve.tasks.the_clock import clock

    location = locate_records.fn(region, records)
    now = clock().now()
    lines = [campaign_line(r, region, now) for r in sorted(list_campaign_records.fn(location),
                                                           key=lambda r: r.campaign_id)]
    if as_json:
        print(redact(json.dumps([line.model_dump(mode="json") for line in lines], indent=2)))
        return ExitCode.OK
    out = Console(highlight=False)
    table = Table(title=f"campaigns recorded in {location.uri('')} ({len(lines)})", title_justify="left")
    for column in ("campaign", "block", "state", "paid (USD)"):
        table.add_column(column, overflow="fold")
    for line in lines:
        table.add_row(line.campaign_id, line.block, line.state, f"{line.spent_usd:,.2f}")
    out.print(table)
    if lines:
        out.print(f"total paid: ${sum(line.spent_usd for line in lines):,.2f}; one campaign in full: "
                  f"capserve status NAME --region {region}")
    return ExitCode.OK


def print_status(status: CampaignStatus) -> None:
    out = Console(highlight=False)
    out.print(f"[bold]campaign {status.campaign_id}[/bold]  record: {status.record_uri}"
              + ("" if status.record_found else "  (no record there)"))
    if status.lease:
        out.print(f"lease: {status.lease}")
    stages = Table(title="stages (from the record)", title_justify="left")
    for column in ("stage", "status", "started", "ended", "inputs", "detail"):
        stages.add_column(column, overflow="fold")
    for row in status.stages:
        stages.add_row(
            row.stage.value, row.status, _time(row.started_at), _time(row.ended_at), short_digest(row.inputs_digest),
            redact(row.detail[:200]),
        )
    out.print(stages)
    _print_part(out, "Prefect runs", status.prefect)
    _print_part(out, "AWS", status.aws)
    _print_part(out, "Kubernetes", status.kubernetes)
    if status.kept:
        _print_part(out, "kept by teardown (from the record)", Part(looked=True, rows=status.kept))


def _print_part(out: Console, title: str, part: Part) -> None:
    if not part.looked:
        out.print(f"[bold]{title}[/bold]: not looked at: {part.why}")
        return
    table = Table(title=f"{title} ({part.why})" if part.why else title, title_justify="left")
    if part.rows and isinstance(part.rows[0], RunRow):
        for column in ("run", "state", "start"):
            table.add_column(column)
        for run in part.rows:
            assert isinstance(run, RunRow)  # noqa: S101 - narrows the type for mypy
            table.add_row(run.name, run.state, _time(run.start))
    else:
        for column in ("kind", "name", "where", "state"):
            table.add_column(column, overflow="fold")
        for row in part.rows:
            assert isinstance(row, ResourceRow)  # noqa: S101 - narrows the type for mypy
            table.add_row(row.kind, row.name, row.where, row.state)
    if not part.rows:
        out.print(f"[bold]{title}[/bold] ({part.why}): nothing found")
        return
    out.print(table)


def _time(value: Any) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value is not None else ""
