"""Small helpers shared by the cluster tasks: tag filters, "created" bookkeeping, waiter settings."""

from __future__ import annotations

import math
from typing import Any

from botocore.exceptions import ClientError, WaiterError

from capserve.core.errors import CapserveError, PermanentError
from capserve.core.tags import CAMPAIGN_TAG
from capserve.tasks import aws
from capserve.tasks.the_clock import clock
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


def wait_on_the_block(waiter: Any, timeout_s: float, poll_s: float, **params: Any) -> None:
    """Run a boto3 waiter (its acceptors: which states succeed, which fail) with its pauses on the campaign's clock.

    boto3 waiters count attempts, not time, and sleep on this host: here each attempt is a waiter of one attempt,
    and the pause between two is ``clock().sleep(poll_s)``; enough attempts to cover ``timeout_s``. Raises the
    waiter's ``WaiterError`` (``Max attempts exceeded`` once the attempts are spent).
    """
    attempts = max(2, int(math.ceil(timeout_s / max(poll_s, 1.0))))
    for attempt in range(1, attempts + 1):
        try:
            waiter.wait(**params, WaiterConfig={"Delay": 1, "MaxAttempts": 1})
            return
        except WaiterError as exc:
            if "Max attempts exceeded" not in str(exc.kwargs.get("reason", "")) or attempt == attempts:
                raise
        clock().sleep(max(poll_s, 0.0))


def waiter_error(exc: WaiterError, what: str, timeout_s: float) -> CapserveError:
    """A botocore waiter that gave up: time ran out (``WaitTimeoutError``, like every wait), or AWS reported
    a failure state (permanent: waiting longer cannot help)."""
    reason = str(exc.kwargs.get("reason", ""))
    if "Max attempts exceeded" in reason:
        return wait_timeout(what, timeout_s, str(exc))
    return PermanentError(f"{what}: {exc}")
