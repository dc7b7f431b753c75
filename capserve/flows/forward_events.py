"""The forwarder: AWS's Capacity Block events, from the region's SQS queue, as Prefect events.

Self-hosted Prefect has no webhooks (docs/events.md §2), so this long-running flow (or ``capserve
forward-events``) long-polls the queue the campaigns' EventBridge rules deliver to and posts each message
to the Prefect API, deleting it only once the post succeeded. Run one per region that holds campaigns;
two forwarders on one queue are harmless (SQS hides a message from the other while one handles it, and a
repeat post has the same event id).
"""

from __future__ import annotations

from prefect import flow, get_run_logger

from capserve.core.aws_events import LONG_POLL_SECONDS
from capserve.tasks.aws_events import ForwardOutcome, converge_queues, forward_once


@flow(name="forward-capacity-events", log_prints=False)
def forward_capacity_events(region: str, polls: int | None = None, wait_seconds: int = LONG_POLL_SECONDS) -> int:
    """Forward until stopped (``polls``: stop after that many long polls); returns how many events were posted."""
    logger = get_run_logger()
    queue = converge_queues(region).queue
    logger.info("forwarding Capacity Block events from %s", queue)
    posted, done = 0, 0
    while polls is None or done < polls:
        outcome: ForwardOutcome = forward_once(region, queue, wait_seconds=wait_seconds)
        done += 1
        posted += len(outcome.posted)
        for name in outcome.posted:
            logger.info("posted %s", name)
        if outcome.unreadable or outcome.not_posted:
            logger.warning(
                "%d unreadable message(s) left for the dead-letter queue, %d kept for a later post",
                len(outcome.unreadable), len(outcome.not_posted),
            )
    return posted
