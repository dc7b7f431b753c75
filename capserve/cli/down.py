"""``capserve down SPEC.yaml``: tear a campaign down now (everything tagged with its id, nothing else)."""

from __future__ import annotations

import argparse
import re
from typing import Any

from rich.console import Console

from capserve.core.errors import CapserveError
from capserve.core.spec import AWS_REGION, load_spec


def _region(text: str) -> str:
    if not re.match(AWS_REGION, text):
        raise argparse.ArgumentTypeError(f"{text!r} is not an AWS region name (e.g. us-east-2)")
    return text


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "down",
        help="tear a campaign down now",
        description=(
            "Delete everything the campaign made (by its capserve.io/campaign tag), in order. The reservation "
            "itself cannot be cancelled and the weights bucket is shared: both are kept and listed."
        ),
    )
    parser.add_argument("spec", help="the campaign's spec (YAML)")
    parser.add_argument(
        "--region",
        type=_region,
        default=None,
        help="region of the campaign's resources (default: from the campaign record)",
    )
    parser.add_argument("--dry-run", action="store_true", help="list what would be deleted; delete nothing")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    console = Console(stderr=True, highlight=False)
    try:
        spec = load_spec(args.spec)
    except CapserveError as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 2

    from capserve.flows.teardown import teardown
    from capserve.tasks.locations import record_ref
    from capserve.tasks.record_store import load_record
    from capserve.tasks.settings import settings_from_environment

    try:
        settings = settings_from_environment().for_campaign(spec.campaign_settings())
        region = args.region
        if region is None:
            ref = record_ref(spec, settings.records)
            record = load_record.fn(ref)
            if record is None or record.lease is None:
                console.print(
                    f"[red]error:[/red] no lease recorded for campaign {spec.campaign_id!r} in {ref.uri}: "
                    "pass --region to say where its resources are"
                )
                return 2
            region = record.lease.region
        result = teardown(spec, region, reason="manual", dry_run=args.dry_run, settings=settings.teardown)
    except CapserveError as exc:
        console.print(f"[red]teardown of {spec.campaign_id} did not finish:[/red] {exc}")
        return 1
    Console(highlight=False).print(result.markdown())
    return 0
