"""The campaign's cost ledger, built when a run ends: the prices, then the pure ledger.

Called by the runner after the teardown decision and before the report is written, for every run
(one that never got capacity gets a ledger of 0). The Price List API is the only call out; when it is
refused, unreachable or skipped (an interrupted run makes no new calls on its way out), the ledger
still comes out, from the packaged price table, and says so. The stages are timed on the campaign's one
clock, which the sandbox's AWS answers on too (capserve.core.clock). How to read it: docs/cost.md §1;
how it is wired: docs/cost.md §6.
"""

from __future__ import annotations

from capserve.campaign.context import CampaignContext
from capserve.core.campaign_cost import campaign_cost_inputs
from capserve.core.cost.ledger import CostLedger, build_ledger
from capserve.core.cost.prices import PriceTable, load_price_table
from capserve.core.report import CampaignReport
from capserve.tasks.cost.price_list import with_live_prices
from capserve.tasks.secrets import redactor
from capserve.tasks.the_clock import clock


def campaign_ledger(ctx: CampaignContext, *, interrupted: bool) -> CostLedger:
    """This run's ledger (also put into the report's "cost" section). A run that holds a block keeps its report
    and the ledger's inputs in the record: later runs render the campaign's report from them
    (capserve.core.block_cost)."""
    lease = ctx.lease
    inputs = campaign_cost_inputs(ctx.report, ctx.spec, lease, written_at=clock().now())
    prices, note = _prices(ctx, inputs.region, interrupted=interrupted)
    ledger = build_ledger(inputs, prices, price_note=note)
    ctx.report.add(ledger)
    if lease is not None:  # a copy without the run's secrets, as the report's files have it (tasks.secrets)
        report = CampaignReport.model_validate(redactor().redact_data(ctx.report.model_dump(mode="json")))
        ctx.save(lambda record: record.with_block_report(report, inputs, now=clock().now()))
    return ledger


def _prices(ctx: CampaignContext, region: str, *, interrupted: bool) -> tuple[PriceTable, str]:
    """The packaged table, with live EC2 prices for the system node group when the settings allow it."""
    table = load_price_table()
    cluster = ctx.report.cluster
    pool = cluster.system_pool if cluster is not None else None
    if pool is None:
        return table, ""
    if not ctx.settings.cost.price_list_api:
        return table, (
            f"AWS Price List API not asked (settings: cost.price_list_api is off); prices from the table dated "
            f"{table.date}."
        )
    if interrupted:
        why = "the run was interrupted"
        return table, f"AWS Price List API not asked ({why}); prices from the table dated {table.date}."
    return with_live_prices(table, region, [pool.instance_type], today=clock().now().date())
