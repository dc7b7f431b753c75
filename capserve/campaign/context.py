"""What every campaign stage is given: the spec, the settings, where things live, the report and the record.

A stage is a small function ``(CampaignContext) -> its typed result``; the campaign flow
(``capserve.flows.campaign``) hands the list of them to the engine (``capserve.campaign.runner``). A run that
starts from a record instead of a spec (a scheduled serve run given only the campaign id and its home region)
builds the same context from what the record holds.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from capserve.core.capacity.states import ReservationState
from capserve.core.errors import PermanentError
from capserve.core.lease import Lease
from capserve.core.locations import Locations
from capserve.core.record import CampaignRecord, RecordRef
from capserve.core.report import CampaignReport
from capserve.core.settings import Settings
from capserve.core.spec import CampaignSpec
from capserve.core.stages import Stage
from capserve.tasks.locations import locate
from capserve.tasks.record_store import RecordChange, change_record
from capserve.tasks.the_clock import clock

T = TypeVar("T")

TERMINAL_APPROVAL: ContextVar[bool] = ContextVar("capserve_terminal_approval", default=False)
"""Set by ``capserve up --in-process`` at a terminal: a purchase above the threshold is approved there. Not a flow
parameter (a deployment run has no terminal); every other run is suspended until a person answers in the UI."""


@dataclass(frozen=True)
class RunOptions:
    """How this run was started (CLI flags or deployment parameters), beyond the spec."""

    out_dir: Path
    staging_dir: Path
    hub_endpoint: str | None = None
    endpoint_url: str | None = None
    endpoint_note: str | None = None
    api_key_env: str | None = None  # the variable's name, never its value
    basic_auth_env: str | None = None
    interactive: bool = False
    teardown_when_done: bool = False
    # The lease this run was started for (a scheduled serve run): acquire adopts exactly that reservation or
    # stops; such a run never searches offers, let alone buys (only a campaign run may).
    bound_lease: Lease | None = None


@dataclass
class CampaignContext:
    spec: CampaignSpec
    settings: Settings
    options: RunOptions
    report: CampaignReport
    record: CampaignRecord
    lease: Lease | None = None
    reservation_state: ReservationState | None = None
    no_capacity: str = ""
    _locations: Locations | None = None
    _unsaved: list[RecordChange] = field(default_factory=list)
    _saving: bool = False

    @classmethod
    def start(cls, spec: CampaignSpec, settings: Settings, options: RunOptions) -> CampaignContext:
        """A new run of ``spec``: an empty report, and the spec queued for the record."""
        now = clock().now()
        context = cls(
            spec=spec,
            settings=settings,
            options=options,
            report=CampaignReport(campaign=spec.campaign_id),
            record=CampaignRecord.new(spec.campaign_id, now),
        )
        context.save(lambda record: record.with_spec(spec, now=now)
                     .with_teardown_when_done(options.teardown_when_done, now=now))
        return context

    @property
    def locations(self) -> Locations:
        """Where the record, the weights and the capacity live (resolved on first use: it asks AWS the account)."""
        if self._locations is None:
            self._locations = locate(self.spec, self.settings.records)
        return self._locations

    @property
    def record_ref(self) -> RecordRef:
        """Where the campaign record lives (resolved with the other locations, once)."""
        return RecordRef(
            campaign_id=self.spec.campaign_id,
            location=self.locations.records,
            write_attempts=self.settings.records.write_attempts,
        )

    @property
    def saving(self) -> bool:
        """The record is kept in S3 (so other runs, a redeploy say, may have changed it since)."""
        return self._saving

    def start_saving(self) -> None:
        """From now on every change is written to S3 (the campaign has reached the cloud: from acquire on)."""
        self._saving = True
        self._flush()

    def save(self, change: RecordChange) -> None:
        """Apply ``change`` to the record; written to S3 once saving has started (changes queue until then)."""
        self._unsaved.append(change)
        self.record = change(self.record)
        if self._saving:
            self._flush()

    def _flush(self) -> None:
        if self._unsaved:
            changes, self._unsaved = self._unsaved, []
            self.record = change_record(self.record_ref, changes)


def need(value: T | None, stage: Stage) -> T:
    """The result of an earlier ``stage``, which a later one cannot do without."""
    if value is None:
        raise PermanentError(f"the result of the {stage.value} stage is missing: run the campaign from {stage.value}")
    return value


