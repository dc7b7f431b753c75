"""``capserve automations register``: create or update capserve's automations on the Prefect server.

``capserve deploy`` runs it after registering the deployments (each automation starts one of them by id, so they
must exist first); running it again converges (docs/events.md §4). It needs ``PREFECT_API_URL``: the automations
live on that server.
"""

from __future__ import annotations

import argparse
from typing import Any

from capserve.cli.inputs import prefect_api_url


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "automations",
        help="register capserve's automations on the Prefect server",
        description="Manage the automations that react to capserve's events (docs/events.md §4).",
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = actions.add_parser(
        "register",
        help="create or update every automation (`capserve deploy` does it too)",
        description=(
            "Create or update, by name, every automation of capserve on the server PREFECT_API_URL names. "
            "Refuses, naming them, when a deployment the automations start is not registered."
        ),
    )
    create.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    prefect_api_url("capserve automations register")
    from capserve.tasks.automations import register_automations

    for name in register_automations.fn():
        print(f"registered {name}")
    return 0
