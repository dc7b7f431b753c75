"""The block's report and its ledger, not one run's: rendered from the campaign record by whichever run comes (pure).

The run that holds the block (the campaign run, then the scheduled serve run) keeps its typed report and its ledger's
inputs in the campaign record (``CampaignRecord.report``, ``CampaignRecord.cost_inputs``). Redeploys come later, each
in its own run, and the scheduled teardown ends the block, on any worker: each renders the campaign's report from the
record alone, with every redeploy's downtime in the ledger (``Cause.REDEPLOYS``: from the old pods' deletion until the
new revision passed its gate or the old one was back), which still adds up to the minute (docs/cost.md).
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel

from capserve.core.cost.causes import Cause
from capserve.core.cost.inputs import CostInputs
from capserve.core.cost.ledger import CostLedger, build_ledger
from capserve.core.cost.prices import load_price_table
from capserve.core.record import CampaignRecord
from capserve.core.redeploy import RedeployEntry
from capserve.core.report import CampaignReport
from capserve.core.stages import Stage, StageStatus


def with_redeploys(inputs: CostInputs, redeploys: Iterable[RedeployEntry]) -> CostInputs:
    """``inputs`` with the ``redeploys`` intervals of each redeploy that took the endpoint down, one per phase
    (those already there are replaced: the record's redeploys are the whole list)."""
    kept = [interval for interval in inputs.intervals if interval.cause is not Cause.REDEPLOYS]
    down = [interval for entry in redeploys for interval in entry.downtime()]
    return inputs.model_copy(update={"intervals": [*kept, *down]})


def block_ledger(record: CampaignRecord) -> CostLedger | None:
    """The block's ledger as the record stands: the inputs of the run that held the block with every redeploy's
    downtime and, once the drain has run, its time (the serving it projected is then what happened), priced from
    the packaged table. None when no run has held a block yet."""
    if record.cost_inputs is None:
        return None
    drain = record.stage(Stage.DRAIN)
    drained_at = drain.ended_at if drain is not None and drain.status is StageStatus.COMPLETED else None
    inputs = with_redeploys(record.cost_inputs, record.redeploys).model_copy(update={"drained_at": drained_at})
    table = load_price_table()
    note = f"Rebuilt after the serving run from the campaign record; prices from the table dated {table.date}."
    return build_ledger(inputs, table, price_note=note)


def with_record(report: CampaignReport, record: CampaignRecord) -> CampaignReport:
    """``report`` with what other runs of the campaign wrote to its record, never to this report: every redeploy
    (and the events it sent), every decision a person gave, the cluster's preparation before the block and the
    purchase of a lease this run adopted."""
    sent = [event for entry in record.redeploys for event in entry.events if event not in report.events]
    update: dict[str, object] = {
        "redeploys": list(record.redeploys),
        "approvals": list(record.approvals),
        "events": sorted([*report.events, *sent], key=lambda event: event.occurred),
    }
    if record.prepared is not None and report.prepared is None:
        update["prepared"] = record.prepared
    if record.purchase is not None and report.acquire is not None:
        update["acquire"] = report.acquire.with_purchase(record.purchase)
    return report.model_copy(update=update)


def campaign_report(record: CampaignRecord, *sections: BaseModel) -> CampaignReport | None:
    """The campaign's report as a run after the one that held the block renders it, anywhere: that run's report
    with the record's parts, the block's ledger as the record stands, and this run's ``sections`` (the teardown's
    result, the schedule as it fired) in place of that run's. None when no run has held a block yet."""
    if record.report is None:
        return None
    report = with_record(record.report, record)
    update: dict[str, object] = {"cost": block_ledger(record)}
    for section in sections:
        update[report.section_of(section)] = section
    return report.model_copy(update=update)
