"""The campaign's cost ledger, built when a run ends: AWS's clock, the prices, then the pure ledger.

Called by the runner after the teardown decision and before the report is written, for every run
(one that never got capacity gets a ledger of 0). Reading AWS's clock and the Price List API are the
only calls out; when either is refused, unreachable or skipped (an interrupted run makes no new calls
on its way out), the ledger still comes out, from the host's clock and the packaged price table, and
says so. How to read it: docs/cost.md §1; how it is wired: docs/cost.md §6.
"""

from __future__ import annotations

from datetime import timedelta

from capserve.campaign.context import CampaignContext
from capserve.core.block_cost import after_the_drain, with_redeploys
from capserve.core.campaign_cost import campaign_cost_inputs
from capserve.core.cost.ledger import CostLedger, build_ledger
from capserve.core.cost.prices import PriceTable, load_price_table
from capserve.core.errors import CapserveError
from capserve.core.record import CampaignRecord
from capserve.core.stages import Stage, StageStatus
from capserve.tasks.cost.clock import aws_clock_offset
from capserve.tasks.cost.price_list import with_live_prices
from capserve.tasks.the_clock import clock


def campaign_ledger(ctx: CampaignContext, *, interrupted: bool) -> CostLedger:
    """This run's ledger (also put into the report's "cost" section)."""
    lease = ctx.lease
    offset, notes = timedelta(0), []
    pace = clock().pace()
    # A clock not the host's timed the stages on the stand-ins' own clock: there is no other clock to line up.
    if lease is not None and not interrupted and pace is None:
        try:
            offset = aws_clock_offset(lease.region)
        except CapserveError as exc:
            notes.append(f"AWS's clock could not be read ({str(exc)[:300]}): stage times are the host's.")
    inputs = campaign_cost_inputs(ctx.report, ctx.spec, lease, written_at=clock().now(), clock_offset=offset)
    inputs = inputs.model_copy(update={
        "notes": [*notes, *inputs.notes], "simulated_rate": pace.fast_rate if pace else None,
    })
    prices, note = _prices(ctx, inputs.region, interrupted=interrupted)
    ledger = build_ledger(inputs, prices, price_note=note)
    ctx.report.add(ledger)
    if lease is not None:  # what later runs of the block rebuild its ledger from (capserve.core.block_cost)
        ctx.save(lambda record: record.with_cost_inputs(inputs, now=clock().now()))
    return ledger


def block_ledger(record: CampaignRecord) -> CostLedger | None:
    """The block's ledger as the record stands (a redeploy's or the teardown's run): the serving run's inputs with
    every redeploy's downtime, priced from the packaged table (once the drain has run, the serving run's projection
    note gives way to it: capserve.core.block_cost.after_the_drain). None when no run has served on a block yet."""
    if record.cost_inputs is None:
        return None
    table = load_price_table()
    note = f"Rebuilt after the serving run from the campaign record; prices from the table dated {table.date}."
    drain = record.stage(Stage.DRAIN)
    drained_at = drain.ended_at if drain is not None and drain.status is StageStatus.COMPLETED else None
    inputs = after_the_drain(with_redeploys(record.cost_inputs, record.redeploys), drained_at)
    return build_ledger(inputs, table, price_note=note)


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
