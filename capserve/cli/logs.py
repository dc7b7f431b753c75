"""``capserve logs CAMPAIGN [--follow]``: the log lines of a campaign's flow runs on the Prefect server.

The runs are the campaign's own (``campaign-<id>``) and every run tagged with it (the scheduled prepare, serve,
drain and teardown runs, redeploys, and their stage subflows); the lines are what Prefect stored for them, oldest
first, with the run that wrote each. ``--follow`` keeps reading (new runs included) until Ctrl-C.
"""

from __future__ import annotations

import argparse
import re
import time
from typing import Any
from uuid import UUID

from capserve.cli.exit_codes import ExitCode
from capserve.cli.inputs import prefect_api_url
from capserve.core.errors import PermanentError, SpecError
from capserve.tasks.secrets import redact

NAME = r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$"
FOLLOW_SECONDS = 2.0  # how often --follow asks the server again


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "logs",
        help="print a campaign's flow-run logs from the Prefect server (PREFECT_API_URL)",
        description="Print the logs of every flow run of a campaign (its campaign run, its scheduled runs and their "
        "stages), oldest first, from the Prefect server PREFECT_API_URL names. Read-only.",
    )
    parser.add_argument("campaign", help="the campaign's name (the spec's name:)")
    parser.add_argument("--follow", "-f", action="store_true", help="keep printing new lines until Ctrl-C")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not re.match(NAME, args.campaign):
        raise SpecError(f"CAMPAIGN: {args.campaign!r} is not a campaign name (lowercase letters, digits, '-')")
    url = prefect_api_url("capserve logs")
    from capserve.tasks.run_logs import campaign_runs, run_logs

    runs = campaign_runs(args.campaign)
    if not runs and not args.follow:
        raise PermanentError(f"no flow run of campaign {args.campaign} on the Prefect server at {url}: check the "
                             "name and PREFECT_API_URL")
    seen: set[UUID] = set()
    after = None
    while True:
        for line in run_logs(runs, after):
            if line.id in seen:  # the boundary second of the last read comes again ("at or after")
                continue
            seen.add(line.id)
            after = line.at
            print(redact(f"{line.at:%Y-%m-%d %H:%M:%S} {line.run} {line.level}: {line.message}"), flush=True)
        if not args.follow:
            return ExitCode.OK
        time.sleep(FOLLOW_SECONDS)
        runs = campaign_runs(args.campaign)
