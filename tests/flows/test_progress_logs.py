"""What `capserve up` reads from a server while following a campaign: the progress lines its runs logged, subflows
included, and nothing else of their logs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from prefect import flow, tags
from prefect.logging import get_run_logger
from prefect.logging.handlers import APILogWorker

from capserve.core.progress import Progress, Throttle
from capserve.core.schedule import campaign_tag
from capserve.tasks.progress import ProgressReporter, read_progress


@flow(name="progress-stage")
def stage() -> None:
    reporter = ProgressReporter(Throttle())
    for done in (0, 1, 1, 2):  # the second 1 is the same reading again: no line
        reporter.report(Progress("GPU nodes joined", done=done, total=2, detail="8 GPUs each"))


@flow(name="progress-campaign")
def campaign() -> None:
    get_run_logger().info("an ordinary line, not progress")
    stage()


def test_the_campaigns_progress_lines_are_read_with_the_run_that_logged_them() -> None:
    since = datetime.now(UTC) - timedelta(seconds=1)
    with tags(campaign_tag("progress-read")):
        campaign()
    APILogWorker.drain_all()  # the run logger sends its records in batches: send them now
    lines, newest = read_progress("progress-read", after=since)
    assert [line.line for line in lines] == [f"GPU nodes joined {n}/2 (8 GPUs each)" for n in (0, 1, 2)]
    assert {line.run for line in lines} == {lines[0].run} and lines[0].run  # the stage subflow's run name
    assert read_progress("progress-read", after=newest)[0] == []  # read from where it left off: nothing new
