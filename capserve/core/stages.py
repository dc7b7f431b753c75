"""The campaign's vocabulary: its stages, in order, and how each one can end.

One ``Stage`` enum and one ``StageStatus`` enum are shared by the report (``report.json``), the campaign
record (S3) and the flows, so a stage name is never a string that can drift between copies.

    plan ─► acquire ─► stage_weights ─► stage_image ─► bring_up ─► weights_to_nodes ─► rollout ─► evaluate ─► …
    └──────────────────── prepare ─────────────────┘   └──────────────── serve ─────────────────────────┘

    … ─► drain ─► teardown (wind down)

The *prepare* part needs no GPU and may run long before the reservation starts; the *serve* part
needs the reservation to be active (nodes exist only then); the *wind-down* part ends the window.
"""

from __future__ import annotations

import enum


class CampaignPart(enum.StrEnum):
    PREPARE = "prepare"
    SERVE = "serve"
    WIND_DOWN = "wind-down"


class Stage(enum.StrEnum):
    """A campaign stage; the values are the names in report.json and the campaign record."""

    PLAN = "plan"
    ACQUIRE = "acquire"
    STAGE_WEIGHTS = "stage_weights"
    STAGE_IMAGE = "stage_image"
    BRING_UP = "bring_up"
    WEIGHTS_TO_NODES = "weights_to_nodes"
    ROLLOUT = "rollout"
    EVALUATE = "evaluate"
    DRAIN = "drain"
    TEARDOWN = "teardown"

    @property
    def order(self) -> int:
        """Position in the campaign (plan is 0)."""
        return _ORDER[self]

    def precedes(self, other: Stage) -> bool:
        return self.order < other.order

    @property
    def part(self) -> CampaignPart:
        if self.order <= Stage.STAGE_IMAGE.order:
            return CampaignPart.PREPARE
        if self.order <= Stage.EVALUATE.order:
            return CampaignPart.SERVE
        return CampaignPart.WIND_DOWN

    @property
    def needs_capacity(self) -> bool:
        """Runs only once the campaign holds a reservation (bought or adopted): everything after acquire."""
        return Stage.ACQUIRE.precedes(self)

    @property
    def needs_active_capacity(self) -> bool:
        """Runs only while the reservation is active: its instances exist only then (serve and drain)."""
        return self.part is CampaignPart.SERVE or self is Stage.DRAIN

    @property
    def leaves_resources(self) -> bool:
        """Once started, leaves billing resources behind (cluster, nodes, workloads) that teardown must remove."""
        return self in (Stage.BRING_UP, Stage.WEIGHTS_TO_NODES, Stage.ROLLOUT)

    def later(self) -> tuple[Stage, ...]:
        """The stages after this one, in order."""
        return tuple(s for s in Stage if self.precedes(s))


_ORDER = {stage: index for index, stage in enumerate(Stage)}


class StageStatus(enum.StrEnum):
    """How a stage ended (or that it is still running)."""

    RUNNING = "running"
    COMPLETED = "completed"
    SKIPPED = "skipped"  # did not run, and the detail says why (e.g. the reservation has not started)
    STOPPED = "stopped"  # ran and ended on purpose without its result (purchase rejected, dry run)
    FAILED = "failed"  # ran and failed on its own merits (a CapserveError)
    INTERRUPTED = "interrupted"  # stopped from outside: Ctrl-C, SIGTERM, a cancellation, a lost output pipe

    @property
    def is_terminal(self) -> bool:
        return self is not StageStatus.RUNNING
