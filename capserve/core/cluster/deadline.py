"""When bring-up is still worth doing: serving must get at least ``cluster.min_serving_minutes`` before drain."""

from __future__ import annotations

from datetime import datetime, timedelta

from capserve.core.errors import DeadlineError
from capserve.core.lease import Lease
from capserve.core.spec import CampaignSpec


def bring_up_budget(spec: CampaignSpec, lease: Lease, now: datetime) -> timedelta:
    """Time from ``now`` until bring-up must be finished for serving to last ``min_serving_minutes``.

    That point is ``drain − min_serving``; before the lease starts the budget includes the wait for
    the start (nodes cannot join earlier). Raises DeadlineError when it has already passed.
    """
    drain = lease.drain_at(spec.teardown)
    need = timedelta(minutes=spec.cluster.min_serving_minutes)
    budget = drain - need - now
    if budget <= timedelta(0):
        left = max(drain - max(now, lease.start), timedelta(0))
        raise DeadlineError(
            f"bring-up of campaign {spec.campaign_id}: only {_minutes(left)} of serving would remain before drain "
            f"at {drain.isoformat()} (reservation {lease.reservation_id} ends {lease.end.isoformat()}); "
            f"cluster.min_serving_minutes is {spec.cluster.min_serving_minutes}. Buy a later or longer reservation, "
            "or lower cluster.min_serving_minutes"
        )
    return budget


def _minutes(delta: timedelta) -> str:
    return f"{int(delta.total_seconds() // 60)} min"
