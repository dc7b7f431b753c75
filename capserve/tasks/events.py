"""Sending capserve's events to Prefect (``prefect.events.emit_event``), built by ``capserve.core.events``.

A plain function, not a Prefect task: lifecycle events are also sent while a run is being torn down
or interrupted, when the orchestrator may no longer accept task runs. Prefect's client buffers events
and sends them from a background worker, so ``emit`` does not wait for the server. The payload goes
through the run's redactor once more (no secret of the run leaves in an event, whatever a builder put
in it). A lifecycle event that cannot be sent is logged, never raised: the campaign's stages do not
depend on it (docs/events.md §1).
"""

from __future__ import annotations

import logging
from typing import Any

from prefect.events import emit_event

from capserve.core.events import CapserveEvent
from capserve.tasks.secrets import redactor

_log = logging.getLogger(__name__)


def emit(event: CapserveEvent) -> CapserveEvent:
    """Send ``event`` (its id makes a repeat a duplicate Prefect stores once); returns what was sent."""
    sent = event.model_copy(update={"payload": redactor().redact_data(event.payload)})
    try:
        emit_event(
            event=sent.event,
            resource=dict(sent.resource),
            related=[dict(r) for r in sent.related],
            payload=dict(sent.payload),
            occurred=sent.occurred,
            id=sent.id,
        )
    except Exception:  # events are a notification: a failure to send never fails a stage
        _log.exception("could not send the event %s about %s", sent.event, sent.resource.get("prefect.resource.id"))
    return sent


def event_body(event: CapserveEvent) -> dict[str, Any]:
    """The JSON of ``event`` as ``POST /api/events`` takes it (for senders outside a Prefect process)."""
    return {
        "id": str(event.id),
        "event": event.event,
        "occurred": event.occurred.isoformat(),
        "resource": dict(event.resource),
        "related": [dict(r) for r in event.related],
        "payload": redactor().redact_data(event.payload),
    }
