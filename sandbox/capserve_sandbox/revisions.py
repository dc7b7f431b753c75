"""New model revisions during a simulated block: the sandbox Hub publishes them while the campaign serves.

On a real block the model's branch may move at any time; the Hub watcher (``capserve.flows.hub_watch``)
notices and the revision-published automation redeploys. To show that in a block played in minutes, the
sandbox publishes its revisions (``capserve_sandbox.hub.revisions``: a good one, then one whose quality
fails the gate) in the longest quiet stretch of the block, the hours between serving and draining.

The publications must be known before anything is scheduled: the simulated clock's mapping is fixed once
runs are created on it (``capserve_sandbox.warp``). So the plan is made when the campaign registers its first
waypoints (``SandboxClock.simulate``'s ``extend``), and it adds, for each publication, a *followed* waypoint
(when the watcher looks): the clock holds from the watch's start until the redeploy the automation starts
works, so the redeploy begins at the watch's instant of the block however long the automation took. The
sandbox's ticker publishes each revision when its time comes; whoever plays the operator (``capserve up``)
schedules a ``hub-watcher`` run at each ``watch_at``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from capserve_sandbox.hub.revisions import publish_revision
from capserve_sandbox.hub.server import HubState

_log = logging.getLogger(__name__)

PUBLISH_BEFORE_WATCH = timedelta(minutes=2)
"""The watcher looks this long after the Hub moves (a deployment's every-10-minutes watcher would look within 10
minutes)."""

REDEPLOY_ROOM = timedelta(minutes=80)
"""The stretch of the block each publication is given after its watch: the redeploy's staging, start, gate and
a rollback take about half an hour of the block (docs/timeline.md); the rest keeps the two apart."""


@dataclass
class Publication:
    """One revision the sandbox Hub publishes, and when the watcher should look."""

    good: bool
    publish_at: datetime
    watch_at: datetime
    sha: str | None = None  # set once published


class RevisionSchedule:
    """The demo's publications: placed on the clock's first registration, published by the ticker."""

    def __init__(self, goods: Sequence[bool], *, near: timedelta) -> None:
        self._goods = tuple(goods)
        self._near = near
        self._lock = threading.Lock()
        self._publications: list[Publication] = []

    @property
    def publications(self) -> list[Publication]:
        with self._lock:
            return list(self._publications)

    def place(self, waypoints: Sequence[datetime], spans: Sequence[tuple[datetime, datetime]]) -> list[datetime]:
        """Spread the publications over the longest stretch between the campaign's busy ones; the watches' waypoints
        the clock must add, each followed by a redeploy (none when there is no room: logged)."""
        gap = _longest_gap(waypoints, spans, self._near)
        need = len(self._goods) * (REDEPLOY_ROOM + 2 * self._near)
        if not self._goods or gap is None or gap[1] - gap[0] < need:
            if self._goods:
                _log.warning("sandbox Hub: no stretch of %s in the block for the demo's revisions; none published",
                             need)
            return []
        start, end = gap
        step = (end - start - len(self._goods) * REDEPLOY_ROOM) / (len(self._goods) + 1)
        placed = []
        for index, good in enumerate(self._goods):
            watch = (start + step * (index + 1) + REDEPLOY_ROOM * index).replace(second=0, microsecond=0)
            placed.append(Publication(good=good, publish_at=watch - PUBLISH_BEFORE_WATCH, watch_at=watch))
        with self._lock:
            self._publications = placed
        return [p.watch_at for p in placed]

    def publish_due(self, now: datetime, hub: HubState) -> list[Publication]:
        """Publish every revision whose time has come; those published by this call."""
        with self._lock:
            due = [p for p in self._publications if p.sha is None and p.publish_at <= now]
            for publication in due:
                publication.sha = publish_revision(hub, good=publication.good)
                _log.info("sandbox Hub: published %s revision %s at %s", "a good" if publication.good else "a bad",
                          publication.sha, now.isoformat())
        return due


def _longest_gap(
    waypoints: Sequence[datetime], spans: Sequence[tuple[datetime, datetime]], near: timedelta
) -> tuple[datetime, datetime] | None:
    """The longest stretch between two busy stretches (a waypoint ± ``near``, or a span the campaign works in)."""
    slow = sorted([(w - near, w + near) for w in waypoints] + [(a, b) for a, b in spans])
    merged: list[tuple[datetime, datetime]] = []
    for start, end in slow:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    gaps = [(a[1], b[0]) for a, b in zip(merged, merged[1:], strict=False)]
    return max(gaps, key=lambda gap: gap[1] - gap[0], default=None)
