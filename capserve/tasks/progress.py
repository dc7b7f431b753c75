"""Progress of a wait, told through the run's log so the UI, an in-process console and ``capserve up`` following a
server all see the same throttled lines (``capserve.core.progress``).

Each line goes to the current run's logger at INFO, starting with ``PREFIX`` and carrying ``extra={"progress":
…}``: a follower reading the server's logs picks them out by the prefix (``read_progress``), a handler in this
process by the extra.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from prefect import get_client
from prefect.client.schemas.filters import (
    FlowRunFilter,
    FlowRunFilterTags,
    LogFilter,
    LogFilterFlowRunId,
    LogFilterTimestamp,
)
from prefect.client.schemas.objects import Log
from prefect.client.schemas.sorting import FlowRunSort, LogSort

from capserve.core.errors import RetryableError
from capserve.core.progress import PREFIX, Progress, Throttle, stamped, unstamped
from capserve.core.schedule import campaign_tag
from capserve.tasks.run_log import run_logger
from capserve.tasks.the_clock import clock

# A wait reports at most this often on its own: the throttle still needs a reason to print (a change of ≥ 10 %,
# a new phase, or a minute of wall time), so this only bounds how stale a line can be.
REPORT_EVERY_S = 10.0
_PAGE = 200  # log records per read (the API's own cap)


class ProgressReporter:
    """One wait's progress: ``report`` logs a reading when its throttle says it is worth a line."""

    def __init__(self, throttle: Throttle | None = None, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.throttle = throttle or Throttle()
        self.clock = clock
        self.lines: list[str] = []  # what was logged, in order (the tests read it)

    def report(self, progress: Progress, *, at: datetime | None = None) -> bool:
        """Log ``progress`` if it is worth a line now; whether it was. ``at``: the block time it was true at (default:
        now)."""
        if not self.throttle.worth(progress, self.clock()):
            return False
        line = progress.line()
        self.lines.append(line)
        tell(line, at)
        return True


def tell(line: str, block_at: datetime | None = None) -> None:
    """Log ``line`` as a progress line of the current run, stamped with the block time it is true at (default:
    now): a follower reads it later, when the campaign's clock may show another time (it need not be the host's)."""
    if block_at is None:
        try:
            block_at = clock().now()
        except RetryableError:  # a clock that does not answer costs the line its time, never the run
            block_at = None
    run_logger(__name__).info("%s%s", PREFIX, stamped(line, block_at), extra={"progress": line})


@dataclass(frozen=True)
class ProgressLine:
    """A progress line a run of the campaign logged on the server."""

    at: datetime  # when it was logged, wall time
    run: str  # the flow run's name
    line: str  # without the prefix and the block time
    block_at: datetime | None = None  # when it was true on the block's clock


def read_progress(campaign_id: str, *, after: datetime) -> tuple[list[ProgressLine], datetime]:
    """The progress lines the campaign's runs (subflows included: they carry its tag) logged after ``after``,
    oldest first, and the time of the newest record read (the next call's ``after``)."""
    tagged = FlowRunFilter(tags=FlowRunFilterTags(all_=[campaign_tag(campaign_id)]))
    with get_client(sync_client=True) as client:
        # The newest runs: over a window of days the Hub watches alone outnumber a page, and they log no progress.
        recent = client.read_flow_runs(flow_run_filter=tagged, sort=FlowRunSort.START_TIME_DESC, limit=_PAGE)
        names: dict[UUID, str] = {run.id: run.name for run in recent}
        if not names:
            return [], after
        log_filter = LogFilter(
            flow_run_id=LogFilterFlowRunId(any_=list(names)), timestamp=LogFilterTimestamp(after_=after)
        )
        logs: list[Log] = []
        while True:  # every record since ``after``, a page at a time: progress lines are a few among many
            page = client.read_logs(log_filter=log_filter, sort=LogSort.TIMESTAMP_ASC, limit=_PAGE, offset=len(logs))
            logs.extend(page)
            if len(page) < _PAGE:
                break
    lines = [
        ProgressLine(at=log.timestamp, run=names.get(log.flow_run_id, "?") if log.flow_run_id else "?",
                     line=text, block_at=block_at)
        for log in logs
        if log.message.startswith(PREFIX) and log.timestamp > after
        for block_at, text in [unstamped(log.message.removeprefix(PREFIX))]
    ]
    return lines, max((log.timestamp for log in logs), default=after)
