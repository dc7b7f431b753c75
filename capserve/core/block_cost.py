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

from capserve.core.cost.causes import Cause
from capserve.core.cost.inputs import CostInputs
from capserve.core.redeploy import RedeployEntry


def with_redeploys(inputs: CostInputs, redeploys: Iterable[RedeployEntry]) -> CostInputs:
    """``inputs`` with one ``redeploys`` interval per redeploy that took the endpoint down (those already there are
    replaced: the record's redeploys are the whole list)."""
    kept = [interval for interval in inputs.intervals if interval.cause is not Cause.REDEPLOYS]
    down = [interval for entry in redeploys if (interval := entry.downtime()) is not None]
    return inputs.model_copy(update={"intervals": [*kept, *down]})
