"""``capserve automations register``: create or update capserve's automations on the Prefect server.

Run it right after ``prefect deploy`` (``capserve up --prefect-server`` does both): each automation starts a
deployment of deployments/prefect.yaml by id, so the deployments must exist first, and running it again
converges (docs/events.md §4). It needs ``PREFECT_API_URL``: the automations live on that server.
"""

from __future__ import annotations

import argparse
from typing import Any

from capserve.core.errors import SpecError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "automations",
        help="register capserve's automations on the Prefect server",
        description="Manage the automations that react to capserve's events (docs/events.md §4).",
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = actions.add_parser(
        "register",
        help="create or update every automation (after `prefect deploy`)",
        description=(
            "Create or update, by name, every automation of capserve on the server PREFECT_API_URL names. "
            "Refuses, naming them, when a deployment the automations start is not registered."
        ),
    )
    create.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from prefect.settings import PREFECT_API_URL

    if not PREFECT_API_URL.value():
        raise SpecError(
            "PREFECT_API_URL is not set: automations live on a Prefect server; set it to that server's API "
            "(e.g. http://127.0.0.1:4200/api) and run `capserve automations register` again"
        )
    api = str(PREFECT_API_URL.value())
    if not api.startswith(("http://", "https://")):
        raise SpecError(f"PREFECT_API_URL {api!r} has no http:// or https:// scheme: write it as "
                        "http://HOST:PORT/api")
    from capserve.tasks.automations import register_automations

    for name in register_automations.fn():
        print(f"registered {name}")
    return 0
