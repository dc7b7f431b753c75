"""Sending capserve's events to Prefect (``prefect.events.emit_event``), built by ``capserve.core.events``.

A plain function, not a Prefect task: lifecycle events are also sent while a run is being torn down
or interrupted, when the orchestrator may no longer accept task runs. Prefect's client buffers events
and sends them from a background worker, so ``emit`` does not wait for the server. The payload goes
through the run's redactor once more (no secret of the run leaves in an event, whatever a builder put
in it). A lifecycle event that cannot be sent is logged, never raised: the campaign's stages do not
depend on it (docs/events.md §1).

Prefect receives each event stamped with the wall time and its block time (the campaign's clock) in the payload
(``CapserveEvent.stamped``): the campaign's clock need not be the server's (it may be days ahead), and the
server's event feed shows a recent window of wall time. What ``emit`` returns (and the report lists) keeps the
block time.
"""

from __future__ import annotations

import logging
from typing import Any

from prefect.events import emit_event

from capserve.core.act_lines import act_line
from capserve.core.events import CapserveEvent
from capserve.tasks.progress import tell
from capserve.tasks.secrets import redactor
from capserve.tasks.the_clock import clock

_log = logging.getLogger(__name__)


def emit(event: CapserveEvent) -> CapserveEvent:
    """Send ``event`` (its id makes a repeat a duplicate Prefect stores once); returns what was sent."""
    sent = event.model_copy(update={"payload": redactor().redact_data(event.payload)})
    wire = sent.stamped(clock().wall_time_of(sent.occurred))
    try:
        emit_event(
            event=wire.event,
            resource=dict(wire.resource),
            related=[dict(r) for r in wire.related],
            payload=dict(wire.payload),
            occurred=wire.occurred,
            id=wire.id,
        )
    except Exception:  # noqa: BLE001 - events are a notification: a failure to send never fails a stage
        _log.exception("could not send the event %s about %s", sent.event, sent.resource.get("prefect.resource.id"))
    line = act_line(sent)
    if line is not None:  # the act, as the console and the run's log tell it (docs/cli.md, "What up shows")
        tell(line, sent.occurred)
    return sent


def event_body(event: CapserveEvent) -> dict[str, Any]:
    """The JSON of ``event`` as ``POST /api/events`` takes it (for senders outside a Prefect process), stamped
    like ``emit``'s: wall time, the block time in the payload."""
    wire = event.stamped(clock().wall_time_of(event.occurred))
    return {
        "id": str(wire.id),
        "event": wire.event,
        "occurred": wire.occurred.isoformat(),
        "resource": dict(wire.resource),
        "related": [dict(r) for r in wire.related],
        "payload": redactor().redact_data(wire.payload),
    }
