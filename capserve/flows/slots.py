"""One run per campaign at a time: a per-campaign global concurrency limit, ``campaign-<id>``.

Campaigns run side by side (no deployment-wide limit); two runs of the same campaign (a re-run from the
UI, the scheduled serve run firing while the campaign run still stages weights) take turns. The drain
and the scheduled teardown do not take the slot: they must run at their times whatever else is running.

Only deployment runs take it: they run against a real server whose repossessor frees the slot of a
killed holder once its lease expires (docs/prefect.md §5), also across a restart of the server (leases on
disk). The lease is ``settings.slots.lease_seconds`` (``CAPSERVE_SLOTS__LEASE_SECONDS``, 300 s): how long a
re-run after a crash waits. A temporary server never expires leases, so an in-process run (the CLI) killed
while holding it would block its campaign for good.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from prefect import get_client, get_run_logger
from prefect.concurrency.sync import concurrency
from prefect.runtime import deployment

from capserve.core.settings import SlotSettings


def campaign_limit_name(campaign_id: str) -> str:
    return f"campaign-{campaign_id}"


@contextmanager
def campaign_slot(campaign_id: str, settings: SlotSettings | None = None) -> Iterator[None]:
    """Hold the campaign's slot for the duration of a deployment run (created on demand, limit 1)."""
    if deployment.get_id() is None:
        yield
        return
    lease_seconds = (settings or SlotSettings()).lease_seconds
    name = campaign_limit_name(campaign_id)
    with get_client(sync_client=True) as client:
        client.upsert_global_concurrency_limit_by_name(name, 1)
    get_run_logger().info(
        "waiting for the slot of campaign %s (concurrency limit %s: one run per campaign); another run of the "
        "campaign holds it until it ends, a killed one until its lease of %d s runs out",
        campaign_id, name, lease_seconds,
    )
    with concurrency(name, occupy=1, strict=True, lease_duration=lease_seconds):
        get_run_logger().info("holding the slot of campaign %s", campaign_id)
        yield
