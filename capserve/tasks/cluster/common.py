"""Small helpers shared by the cluster tasks: tag filters, "created" bookkeeping, waiter settings."""

from __future__ import annotations

import math
from typing import Any

from botocore.exceptions import ClientError, WaiterError

from capserve.core.errors import CapserveError, PermanentError
from capserve.core.tags import CAMPAIGN_TAG
from capserve.tasks import aws
from capserve.tasks.clock import wall_seconds
from capserve.tasks.waiting import wait_timeout


def tag_filters(campaign_id: str, name: str) -> list[dict[str, Any]]:
    """EC2 Filters matching our campaign tag and the deterministic Name tag."""
    return [
        {"Name": f"tag:{CAMPAIGN_TAG}", "Values": [campaign_id]},
        {"Name": "tag:Name", "Values": [name]},
    ]


def only_one(items: list[dict[str, Any]], what: str) -> dict[str, Any] | None:
    """Converge must be unambiguous: two tagged copies mean someone (or a bug) made a duplicate."""
    if len(items) > 1:
        raise PermanentError(
            f"{what}: found {len(items)} resources with the same campaign tag and name; delete the extras"
        )
    return items[0] if items else None


def has_code(exc: ClientError, *codes: str) -> bool:
    return aws.error_code(exc) in codes


def waiter_config(timeout_s: float, poll_s: float) -> dict[str, float]:
    """boto3 waiters count attempts, not time: enough attempts ``poll_s`` apart to cover ``timeout_s``, both on the
    campaign's clock (on a simulated block the pause on this host is shorter: ``wall_seconds``)."""
    return {
        "Delay": wall_seconds(max(poll_s, 0.0)),
        "MaxAttempts": max(2, int(math.ceil(timeout_s / max(poll_s, 1.0)))),
    }


def waiter_error(exc: WaiterError, what: str, timeout_s: float) -> CapserveError:
    """A botocore waiter that gave up: time ran out (``WaitTimeoutError``, like every wait), or AWS reported
    a failure state (permanent: waiting longer cannot help)."""
    reason = str(exc.kwargs.get("reason", ""))
    if "Max attempts exceeded" in reason:
        return wait_timeout(what, timeout_s, str(exc))
    return PermanentError(f"{what}: {exc}")
