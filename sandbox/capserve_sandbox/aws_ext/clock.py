"""The sandbox's AWS answers with its own clock in the ``Date`` header, as AWS answers with AWS's time.

The sandbox moves its clock (``capserve_sandbox.clock.CLOCK``) to a reservation's start instead of
waiting for it; the campaign reads AWS's clock from the ``Date`` header (``capserve.tasks.cost.clock``)
to put its stages on the reservation's timeline, so the header must tell the sandbox's time.
"""

from __future__ import annotations

from email.utils import format_datetime

from moto.moto_server.werkzeug_app import MotoRequestHandler

from capserve_sandbox.clock import CLOCK


def _date_time_string(self: MotoRequestHandler, timestamp: float | None = None) -> str:
    del self, timestamp  # the handler asks for "now": the sandbox's now
    return format_datetime(CLOCK.now().replace(microsecond=0), usegmt=True)


def install() -> None:
    MotoRequestHandler.date_time_string = _date_time_string  # type: ignore[method-assign, assignment]
