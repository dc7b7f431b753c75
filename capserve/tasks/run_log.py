"""The logger of the Prefect run a line belongs to (shown in the UI), or a plain one outside any run."""

from __future__ import annotations

import logging

from prefect import get_run_logger
from prefect.exceptions import MissingContextError


def run_logger(fallback: str = "capserve") -> logging.Logger | logging.LoggerAdapter[logging.Logger]:
    """The current flow or task run's logger; ``logging.getLogger(fallback)`` when called outside a run (a task's
    ``.fn`` in a test, a CLI helper)."""
    try:
        return get_run_logger()
    except MissingContextError:
        return logging.getLogger(fallback)
