"""Tell a person something needs them now: a warning in the run's log and a markdown artifact in the UI.

The target of the Late-teardown automation (docs/events.md §4). A real installation adds its own channel
(a Slack or e-mail notification block) to the automation instead; the sandbox has only the UI.
"""

from __future__ import annotations

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact


@flow(name="notify", validate_parameters=True)
def notify(subject: str, body: str) -> str:
    """Log ``subject`` and ``body`` as a warning and publish them as the ``capserve-notice`` artifact."""
    get_run_logger().warning("%s: %s", subject, body)
    create_markdown_artifact(markdown=f"## {subject}\n\n{body}\n", key="capserve-notice", description=subject)
    return subject
