"""The block's cost ledger, not one run's: the serving run's inputs with every redeploy's downtime (pure).

The run that serves (the campaign run, or the scheduled serve run) builds the ledger when it ends and keeps its
inputs in the campaign record (``CampaignRecord.cost_inputs``). Redeploys come later, each in its own run, and
the scheduled teardown ends the block: each of them rebuilds the ledger from those inputs and the record's
redeploys, so the ledger the campaign's report shows when the block ends counts every redeploy's downtime
(``Cause.REDEPLOYS``: from the old pods' deletion until the new revision passed its gate or the old one was
back) and still adds up to the minute (docs/cost.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from capserve.core.campaign_cost import PROJECTED
from capserve.core.cost.causes import Cause
from capserve.core.cost.inputs import CostInputs
from capserve.core.redeploy import RedeployEntry


def with_redeploys(inputs: CostInputs, redeploys: Iterable[RedeployEntry]) -> CostInputs:
    """``inputs`` with the ``redeploys`` intervals of each redeploy that took the endpoint down, one per phase
    (those already there are replaced: the record's redeploys are the whole list)."""
    kept = [interval for interval in inputs.intervals if interval.cause is not Cause.REDEPLOYS]
    down = [interval for entry in redeploys for interval in entry.downtime()]
    return inputs.model_copy(update={"intervals": [*kept, *down]})


def after_the_drain(inputs: CostInputs, drained_at: datetime | None) -> CostInputs:
    """``inputs`` once the campaign's drain has run (``drained_at``, from the record; None: not yet): the serving
    run's note that the serving after its report was projected to the drain point becomes what happened, the drain
    run's time beside the drain point the ledger counts serving to (the figures stay: they end serving there)."""
    window = inputs.window
    if drained_at is None or window is None or not any(PROJECTED in note for note in inputs.notes):
        return inputs
    notes = [note for note in inputs.notes if PROJECTED not in note]
    notes.append(
        f"Serving is counted until the drain point, {window.drain_at:%Y-%m-%d %H:%M} UTC; the drain run ended at "
        f"{drained_at:%Y-%m-%d %H:%M} UTC (the campaign record)."
    )
    return inputs.model_copy(update={"notes": notes})
