"""The campaign's sequencing rules as data: when a stage may run, and how a run ends.

Pure decisions, applied by ``capserve.campaign.runner``:

- ``blocked_by``: a stage that needs capacity does not run without a lease; one that needs the
  reservation active does not run before it is (its instances exist only then). The first blocked
  stage and every stage after it are skipped with the same reason.
- ``decide_ending``: only a stage that failed on its own merits (a ``CapserveError``) tears down at
  once. Anything else that stops a run — Ctrl-C, SIGTERM, a Prefect cancellation, a worker restart
  that breaks the output pipe — says nothing about the cluster, which may be healthy and paid for: it
  is left to the teardown scheduled at purchase and to the reaper.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from capserve.core.capacity.states import ReservationState
from capserve.core.errors import CapserveError
from capserve.core.lease import Lease
from capserve.core.stages import Stage
from capserve.core.teardown.result import TeardownReason


def blocked_by(stage: Stage, *, lease: Lease | None, state: ReservationState | None, no_capacity: str) -> str | None:
    """Why ``stage`` cannot run now (None: it can)."""
    if stage.needs_capacity and lease is None:
        return f"no capacity: {no_capacity or 'the acquire stage obtained none'}"
    if stage.needs_active_capacity and lease is not None and (state is None or not state.is_usable):
        return (
            f"reservation {lease.reservation_id} is {state.value if state else 'unknown'} until "
            f"{lease.start.isoformat()}: run the campaign again then (it adopts the reservation and skips finished "
            "work)"
        )
    return None


class Ending(BaseModel):
    """How a campaign run ends: whether it tears down now, and what to tell a person."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    teardown: TeardownReason | None = Field(description="Tear down now, for this reason; None: leave things be.")
    left_standing: bool = Field(description="Billing resources stay up for the scheduled teardown and the reaper.")
    why: str = Field("", max_length=2000, description="What a person should know (empty for a normal end).")
    asks_a_person: bool = Field(False, description="The run is suspended for a person's approval: no failure.")


def decide_ending(
    error: BaseException | None, *, resources_made: bool, teardown_when_done: bool, awaiting_approval: bool = False
) -> Ending:
    """The end of a run that stopped with ``error`` (None: every stage ran).

    ``resources_made``: a stage that leaves billing resources (bring-up onwards) has started.
    ``awaiting_approval``: ``error`` is the orchestrator suspending the run until a person answers (Prefect's
    ``Pause``): a question, not an interruption.
    """
    if awaiting_approval:
        return Ending(
            teardown=None, left_standing=resources_made, asks_a_person=True,
            why="waiting for a person's approval: answer the form of this run in the Prefect UI; the run resumes "
            "then, and nothing is bought until it does",
        )
    if error is None:
        if resources_made and teardown_when_done:
            return Ending(teardown="campaign-finished", left_standing=False)
        return Ending(teardown=None, left_standing=resources_made)
    if isinstance(error, CapserveError):
        if resources_made:
            return Ending(teardown="failed-stage", left_standing=False, why="a stage failed: tearing down now")
        return Ending(teardown=None, left_standing=False, why="a stage failed before anything was created")
    why = (
        f"the run was interrupted ({type(error).__name__}), which says nothing about the cluster: it is left "
        "standing for the teardown scheduled at purchase and for the reaper (or run `capserve down`)"
        if resources_made
        else f"the run was interrupted ({type(error).__name__}) before anything was created"
    )
    return Ending(teardown=None, left_standing=resources_made, why=why)
