"""``capserve forward-events --region R``: post AWS's Capacity Block events from SQS to Prefect, until stopped.

Self-hosted Prefect has no webhooks (docs/events.md §2): this is the bridge. It needs ``PREFECT_API_URL``
(the server the automations live on) and AWS credentials that may read and delete from the region's
``capserve-capacity-events`` queue. Exit codes as for every command (docs/cli.md).
"""

from __future__ import annotations

import argparse
from typing import Any

from capserve.cli.arg_types import positive_integer
from capserve.cli.down import _region


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "forward-events",
        help="post AWS's Capacity Block events (from SQS) to Prefect",
        description=(
            "Long-poll the region's capserve-capacity-events SQS queue and post each Capacity Block event to "
            "the Prefect API, deleting a message only after its post succeeded. Unreadable messages stay and "
            "go to the dead-letter queue after 5 receives."
        ),
    )
    parser.add_argument("--region", type=_region, required=True, help="region of the queue (e.g. us-east-2)")
    parser.add_argument(
        "--polls", type=positive_integer, default=None, help="stop after this many long polls (default: never)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from capserve.cli.inputs import prefect_api_url
    from capserve.cli.signals import defer_prefect_handler_in_finalizers

    # The automations that act on the events live on a Prefect server: a temporary one would take the events
    # and lose them with this process.
    prefect_api_url("capserve forward-events")
    from capserve.flows.forward_events import forward_capacity_events

    defer_prefect_handler_in_finalizers()  # a flow run in this process must not lose a SIGTERM either

    forward_capacity_events(args.region, polls=args.polls)
    return 0
