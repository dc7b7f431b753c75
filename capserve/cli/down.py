"""``capserve down SPEC.yaml``: tear a campaign down now (everything tagged with its id, nothing else)."""

from __future__ import annotations

import argparse
import re
from typing import Any

from rich.console import Console
from rich.markup import escape

from capserve.cli.exit_codes import ExitCode
from capserve.core.errors import CapserveError, RetryableError
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
        console.print(f"[red]error:[/red] {escape(str(exc))}")
        return 2

    from capserve.cli.signals import defer_prefect_handler_in_finalizers
    from capserve.core.cluster.naming import ClusterNames
    from capserve.core.down import down_region, eks_leftovers_kept, kept_on_every_run, nothing_found_message
    from capserve.flows.acquire import purchase_limit_name
    from capserve.flows.teardown import teardown
    from capserve.tasks.capacity.reservations import capacity_reservations_by_tag
    from capserve.tasks.eks_leftovers import eks_made_resources
    from capserve.tasks.locations import record_ref
    from capserve.tasks.record_store import load_record
    from capserve.tasks.settings import settings_for

    defer_prefect_handler_in_finalizers()  # a flow run in this process must not lose a SIGTERM either
    try:
        settings = settings_for(spec)
        ref = record_ref(spec, settings.records)
        record = load_record.fn(ref)
        recorded = record.lease.region if record is not None and record.lease is not None else None
        try:
            region = down_region(spec.campaign_id, recorded=recorded, flag=args.region, record_uri=ref.uri)
        except CapserveError as exc:
            console.print(f"[red]error:[/red] {escape(str(exc))}")
            return 2
        reservations = [r.reservation_id for r in capacity_reservations_by_tag(spec.campaign_id, region)]
        if record is not None and record.lease is not None:
            reservations.insert(0, record.lease.reservation_id)
        result = teardown(spec, region, reason="manual", dry_run=args.dry_run, settings=settings.teardown)
        leftovers = eks_made_resources(ClusterNames(campaign_id=spec.campaign_id).eks_cluster, region)
    except RetryableError as exc:  # AWS or the record store did not answer: the same command again converges
        console.print(f"[red]teardown of {spec.campaign_id} did not finish:[/red] {escape(str(exc))}; run the same "
                      "command again (it deletes only what is left)")
        return int(ExitCode.UNAVAILABLE)
    except CapserveError as exc:
        console.print(f"[red]teardown of {spec.campaign_id} did not finish:[/red] {escape(str(exc))}")
        return 1
    if record is None and not result.deleted and not reservations and not leftovers:
        console.print(f"[red]error:[/red] {escape(nothing_found_message(spec.campaign_id, region, ref.uri))}")
        return 1
    kept = kept_on_every_run(
        spec.campaign_id, reservation_ids=reservations, weights_bucket=spec.weights.s3_bucket, record_uri=ref.uri,
        purchase_limit=purchase_limit_name(spec.campaign_id),
    )
    reported = {k.resource for k in kept}
    result = result.model_copy(update={"kept": (
        *kept, *(k for k in result.kept if k.resource not in reported), *eks_leftovers_kept(leftovers),
    )})
    Console(highlight=False).print(result.markdown())
    if leftovers and not args.dry_run:
        console.print(
            f"[red]{len(leftovers)} resource(s) made by EKS/Kubernetes for the cluster are still there[/red] "
            "(listed above): they are not tagged with the campaign; delete them, they may bill"
        )
        return 1
    return 0
