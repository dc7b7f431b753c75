"""The cost ledger: what the reservation cost, what it served, and where the paid GPU-hours went.

``build_ledger`` is pure: ``CostInputs`` and a ``PriceTable`` in, a ``CostLedger`` out. The ledger's
``report_section()`` is report.json's ``"cost"`` object and ``markdown()`` its human section; both say
the same thing. How to read it: docs/cost.md.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from capserve.core.cost.attribution import Segment, attribute
from capserve.core.cost.causes import LOST_CAUSES, Cause
from capserve.core.cost.inputs import BlockWindow, CostInputs, Interval, ScheduledRunMark, ThroughputPoint
from capserve.core.cost.prices import PriceTable
from capserve.core.cost.resources import ResourceCost, price_resource


class BiggestLoss(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    cause: Cause = Field(description="The lost cause with the most GPU-minutes.")
    gpu_hours: float = Field(ge=0, description="GPU-hours it took.")
    share_of_paid: float = Field(ge=0, le=1, description="Its share of the paid GPU-hours.")
    advice: str = Field(description="What would shrink it next time.")


class CostLedger(BaseModel):
    """One campaign's cost truth. Minutes are whole; every paid GPU-minute has exactly one cause."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    campaign: str = Field(min_length=1, max_length=64, description="The campaign id.")
    currency: Literal["USD"] = Field(description="Currency of every amount.")
    upfront_fee: float = Field(ge=0, description="What AWS charged for the reservation (0: adopted or none).")
    adopted: bool = Field(description="The reservation was adopted: its fee was paid outside this campaign.")
    region: str = Field(min_length=1, max_length=32, description="Region priced.")
    instance_type: str | None = Field(max_length=64, description="GPU instance type.")
    gpus: int = Field(ge=0, le=256 * 64, description="GPUs in the reservation.")
    window: BlockWindow | None = Field(description="The paid window, or None (never got capacity).")
    segments: list[Segment] = Field(description="The block's minutes by cause, in order.")
    paid_gpu_minutes: int = Field(ge=0, description="Block minutes × GPUs.")
    serving_gpu_minutes: int = Field(ge=0, description="Serving minutes × GPUs.")
    lost_gpu_minutes: dict[Cause, int] = Field(description="GPU-minutes lost, by cause (every lost cause listed).")
    outside_block_minutes: dict[Cause, int] = Field(description="Wall minutes recorded outside the block, by cause.")
    utilisation_target: float = Field(ge=0, le=1, description="The spec's target.")
    other_resources: list[ResourceCost] = Field(description="Other resources and their cost.")
    throughput: ThroughputPoint | None = Field(
        description="The highest concurrency level that passed the gates (cost per token is computed at it)."
    )
    price_table_date: dt.date = Field(description="Date of the price table used.")
    live_prices: int = Field(ge=0, description="How many prices came from the AWS Price List API at run time.")
    price_source_note: str = Field("", max_length=1000, description="Whether live prices were read, and why not.")
    intervals: list[Interval] = Field(description="What was recorded, as given (the Gantt draws them).")
    scheduled_runs: list[ScheduledRunMark] = Field(description="Scheduled runs, for the timeline.")
    serving_started_by: str = Field(
        "rollout ready → drain point", max_length=300, description="The event that started serving, and what ended it."
    )
    wiring_notes: list[str] = Field(default_factory=list, description="How the timeline was read (clock, projection).")

    # --- figures ---------------------------------------------------------------------------------

    @property
    def block_minutes(self) -> int:
        return self.paid_gpu_minutes // self.gpus if self.gpus else 0

    @property
    def paid_gpu_hours(self) -> float:
        return self.paid_gpu_minutes / 60

    @property
    def serving_gpu_hours(self) -> float:
        return self.serving_gpu_minutes / 60

    @property
    def lost_gpu_hours(self) -> dict[Cause, float]:
        return {cause: minutes / 60 for cause, minutes in self.lost_gpu_minutes.items()}

    @property
    def utilisation(self) -> float | None:
        """Serving ÷ paid GPU-hours; None when nothing was paid (no division by zero)."""
        return self.serving_gpu_minutes / self.paid_gpu_minutes if self.paid_gpu_minutes else None

    @property
    def other_resources_cost(self) -> float:
        """The priced other resources (an unpriced one counts 0 here and is named in the notes)."""
        return sum(r.cost or 0.0 for r in self.other_resources)

    @property
    def total_cost(self) -> float:
        return self.upfront_fee + self.other_resources_cost

    @property
    def output_tokens_servable(self) -> float | None:
        """Output tokens the serving hours could deliver at the measured throughput, fully used."""
        if self.throughput is None or self.gpus == 0:
            return None
        return self.throughput.output_tokens_per_s * (self.serving_gpu_minutes / self.gpus) * 60

    def _per_million(self, cost: float, tokens: float | None) -> float | None:
        if not tokens:
            return None
        return cost / (tokens / 1e6)

    @property
    def usd_per_million_output_tokens(self) -> float | None:
        """(fee + other resources) ÷ the tokens the serving hours could deliver. None when adopted (fee unknown)."""
        if self.adopted:
            return None
        return self._per_million(self.total_cost, self.output_tokens_servable)

    @property
    def usd_per_million_output_tokens_if_fully_utilised(self) -> float | None:
        """The same cost spread over every paid minute, as if the whole block had served."""
        if self.adopted or self.throughput is None:
            return None
        return self._per_million(self.total_cost, self.throughput.output_tokens_per_s * self.block_minutes * 60)

    @property
    def other_usd_per_million_output_tokens(self) -> float | None:
        """Only the other resources per million tokens (the figure an adopted reservation can give)."""
        return self._per_million(self.other_resources_cost, self.output_tokens_servable)

    def fee_share(self, gpu_minutes: int) -> float:
        """The part of the fee those GPU-minutes stand for (the fee is spread evenly over the block)."""
        return self.upfront_fee * gpu_minutes / self.paid_gpu_minutes if self.paid_gpu_minutes else 0.0

    @property
    def lost_cost(self) -> dict[Cause, float]:
        return {cause: round(self.fee_share(m), 2) for cause, m in self.lost_gpu_minutes.items()}

    @property
    def serving_cost(self) -> float:
        """The fee minus every lost share, so that the waterfall adds up to the cent."""
        return round(round(self.upfront_fee, 2) - sum(self.lost_cost.values()), 2)

    @property
    def biggest_loss(self) -> BiggestLoss | None:
        lost = [(m, c) for c, m in self.lost_gpu_minutes.items() if m > 0]
        if not lost:
            return None
        # Ties go to the earlier cause in the reservation's life (the first thing to fix).
        minutes, cause = max(lost, key=lambda mc: (mc[0], -LOST_CAUSES.index(mc[1])))
        return BiggestLoss(
            cause=cause, gpu_hours=minutes / 60, share_of_paid=minutes / self.paid_gpu_minutes, advice=cause.advice
        )

    @property
    def meets_target(self) -> bool | None:
        utilisation = self.utilisation
        return None if utilisation is None else utilisation >= self.utilisation_target

    @property
    def notes(self) -> list[str]:
        notes: list[str] = list(self.wiring_notes)
        if self.price_source_note:
            notes.append(self.price_source_note)
        if self.window is None:
            notes.append("No capacity was obtained: nothing was paid for GPUs, so there is nothing to attribute.")
        if self.adopted:
            notes.append(
                "Adopted reservation: its fee was paid when it was bought, outside this campaign, so the upfront "
                "fee here is 0 and the cost per million tokens is not given; GPU-hours and utilisation are real."
            )
        if self.window is not None and self.throughput is None:
            notes.append("No load level passed the gates: no cost per token is given.")
        unpriced = [r.name for r in self.other_resources if r.cost is None]
        if unpriced:
            notes.append(
                f"Not priced (no price for {self.region} in the table): {', '.join(unpriced)}; totals exclude them."
            )
        unsure = [r.name for r in self.other_resources if r.price_status == "unconfirmed"]
        if unsure:
            notes.append(f"Priced with an unconfirmed price: {', '.join(unsure)}.")
        outside = {c: m for c, m in self.outside_block_minutes.items() if m}
        if outside:
            listed = ", ".join(f"{c.value} {m} min" for c, m in outside.items())
            notes.append(f"Recorded outside the block (not paid GPU time): {listed}.")
        return notes

    def check(self) -> None:
        """paid = serving + Σ lost, to the minute, and the segments cover the block once; raises if not."""
        lost = sum(self.lost_gpu_minutes.values())
        if self.paid_gpu_minutes != self.serving_gpu_minutes + lost:
            raise AssertionError(f"paid {self.paid_gpu_minutes} ≠ serving {self.serving_gpu_minutes} + lost {lost}")
        edge = 0
        for segment in self.segments:
            if segment.start_minute != edge or segment.end_minute <= segment.start_minute:
                raise AssertionError(f"segments do not tile the block at minute {edge}")
            edge = segment.end_minute
        if edge != self.block_minutes:
            raise AssertionError(f"segments end at minute {edge}, the block at {self.block_minutes}")

    # --- report ----------------------------------------------------------------------------------

    def report_section(self) -> dict[str, Any]:
        """report.json's ``"cost"`` object: the figures of docs/cost.md §1 first, then the detail behind them."""
        utilisation = self.utilisation
        biggest = self.biggest_loss
        return {
            "currency": self.currency,
            "upfront_fee": self.upfront_fee,
            "paid_gpu_hours": _hours(self.paid_gpu_minutes),
            "serving_gpu_hours": _hours(self.serving_gpu_minutes),
            "utilisation": None if utilisation is None else round(utilisation, 4),
            "lost_gpu_hours": {c.value: _hours(m) for c, m in self.lost_gpu_minutes.items()},
            "other_resources": [{"name": r.name, "cost": r.cost} for r in self.other_resources],
            "usd_per_million_output_tokens": _money(self.usd_per_million_output_tokens),
            "price_table_date": self.price_table_date.isoformat(),
            # The detail behind the figures.
            "serving_started_by": self.serving_started_by,
            "adopted": self.adopted,
            "gpus": self.gpus,
            "instance_type": self.instance_type,
            "block_start": self.window.start.isoformat() if self.window else None,
            "block_end": self.window.end.isoformat() if self.window else None,
            "drain_at": self.window.drain_at.isoformat() if self.window else None,
            "aws_terminates_at": self.window.aws_terminates_at.isoformat() if self.window else None,
            "paid_gpu_minutes": self.paid_gpu_minutes,
            "serving_gpu_minutes": self.serving_gpu_minutes,
            "lost_gpu_minutes": {c.value: m for c, m in self.lost_gpu_minutes.items()},
            "utilisation_target": self.utilisation_target,
            "meets_target": self.meets_target,
            "lost_cost": {c.value: v for c, v in self.lost_cost.items()},
            "serving_cost": self.serving_cost,
            "other_resources_detail": [r.model_dump(mode="json") for r in self.other_resources],
            "other_resources_cost": round(self.other_resources_cost, 2),
            "total_cost": round(self.total_cost, 2),
            "throughput": self.throughput.model_dump(mode="json") if self.throughput else None,
            "output_tokens_servable": None
            if self.output_tokens_servable is None
            else round(self.output_tokens_servable),
            "usd_per_million_output_tokens_if_fully_utilised": _money(
                self.usd_per_million_output_tokens_if_fully_utilised
            ),
            "other_usd_per_million_output_tokens": _money(self.other_usd_per_million_output_tokens),
            "biggest_loss": None
            if biggest is None
            else {**biggest.model_dump(mode="json"), "gpu_hours": round(biggest.gpu_hours, 4)},
            "outside_block_minutes": {c.value: m for c, m in self.outside_block_minutes.items()},
            "timeline": [
                {"cause": s.cause.value, "start_minute": s.start_minute, "end_minute": s.end_minute}
                for s in self.segments
            ],
            "live_prices": self.live_prices,
            "price_source": self.price_source_note or f"price table dated {self.price_table_date}",
            "rounding": "instants rounded to the nearest minute from the block's start; hours = GPU-minutes / 60",
            "notes": self.notes,
        }

    def markdown(self) -> str:
        """The report's "Cost" section (starts with its own heading)."""
        lines = ["## Cost", ""]
        lines += [f"> {note}" for note in self.notes] + ([""] if self.notes else [])
        if self.window is None:
            lines.append(f"Upfront fee: {_usd(self.upfront_fee)}. Other resources: {_usd(self.other_resources_cost)}.")
            if self.other_resources:
                lines += ["", *self._other_resources_table()]
            return "\n".join(lines) + "\n"
        utilisation = self.utilisation or 0.0
        verdict = "met" if self.meets_target else "**below target**"
        fee = "adopted (paid outside this campaign)" if self.adopted else f"{_usd(self.upfront_fee)} (charged by AWS)"
        hours = self.block_minutes / 60
        lines += [
            "| | |",
            "|---|---|",
            f"| upfront fee | {fee} |",
            f"| paid | {_gh(self.paid_gpu_minutes)} GPU-h ({hours:,.2f} h × {self.gpus} GPUs) |",
            f"| serving | {_gh(self.serving_gpu_minutes)} GPU-h: {self.serving_started_by} |",
            f"| utilisation | {utilisation:.1%} (target {self.utilisation_target:.0%}: {verdict}) |",
            f"| other resources | {_usd(self.other_resources_cost)} (price table dated {self.price_table_date}) |",
            f"| total | {_usd(self.total_cost)} |",
            f"| per million output tokens | {self._per_token_text()} |",
            "",
            f"Check: paid {self.paid_gpu_minutes:,} GPU-min = serving {self.serving_gpu_minutes:,} + lost "
            f"{sum(self.lost_gpu_minutes.values()):,} (every minute of the block has one cause).",
            "",
            "### Where the paid GPU-hours went",
            "",
            *self.causes_table(),
        ]
        biggest = self.biggest_loss
        if biggest is not None:
            lines += [
                "",
                f"**Biggest loss:** `{biggest.cause.value}`, {biggest.gpu_hours:,.2f} GPU-h "
                f"({biggest.share_of_paid:.1%} of paid). What would shrink it: {biggest.advice}",
            ]
        if self.other_resources:
            lines += ["", "### Other resources", "", *self._other_resources_table()]
        lines += ["", "### Timeline (block time, UTC)", "", *self.timeline_table()]
        redeploys = [i for i in self.intervals if i.cause is Cause.REDEPLOYS]
        if redeploys:
            lines += ["", "### Redeploys' downtime, by phase", "", "| from | to | minutes | what |",
                      "|---|---|---:|---|"]
            lines += [
                f"| {i.start:%Y-%m-%d %H:%M:%S} | {i.end:%Y-%m-%d %H:%M:%S} | "
                f"{(i.end - i.start).total_seconds() / 60:,.1f} | {i.label.replace('|', '/')} |"
                for i in sorted(redeploys, key=lambda i: i.start)
            ]
        return "\n".join(lines) + "\n"

    def _per_token_text(self) -> str:
        if self.throughput is None:
            return "— (no load level passed the gates)"
        at = f"at {self.throughput.output_tokens_per_s:,.1f} output tok/s (concurrency {self.throughput.concurrency})"
        if self.adopted:
            other = self.other_usd_per_million_output_tokens
            return f"other resources only: {_usd(other) if other is not None else '—'} {at}"
        per = self.usd_per_million_output_tokens
        full = self.usd_per_million_output_tokens_if_fully_utilised
        if per is None:
            return f"— (no serving hours) {at}"
        full_text = f"; {_usd(full)} had every paid hour served" if full is not None else ""
        return f"{_usd(per)} {at}, the serving hours fully used{full_text}"

    def causes_table(self) -> list[str]:
        """Serving and every lost cause: GPU-hours, share of paid, the fee's share (the waterfall as a table)."""
        rows = ["| cause | GPU-h | share of paid | fee share | what it is |", "|---|---:|---:|---:|---|"]
        entries = [(Cause.SERVING, self.serving_gpu_minutes, self.serving_cost)] + [
            (c, m, self.lost_cost[c]) for c, m in self.lost_gpu_minutes.items()
        ]
        for cause, minutes, usd in entries:
            share = minutes / self.paid_gpu_minutes if self.paid_gpu_minutes else 0.0
            rows.append(f"| {cause.value} | {_gh(minutes)} | {share:.1%} | {_usd(usd)} | {cause.description} |")
        return rows

    def _other_resources_table(self) -> list[str]:
        rows = ["| resource | cost | how | price |", "|---|---:|---|---|"]
        for r in self.other_resources:
            cost = "not priced" if r.cost is None else _usd(r.cost)
            rows.append(f"| {r.name} | {cost} | {r.detail.replace('|', '/')} | {r.price_status or '—'} |")
        return rows

    def timeline_table(self) -> list[str]:
        """Each segment of the block with its times (the Gantt as a table, for the Prefect artifact)."""
        if self.window is None:
            return ["_no block_"]
        start = self.window.start
        timed: list[tuple[dt.datetime, str]] = []
        for s in self.segments:
            begin = start + dt.timedelta(minutes=s.start_minute)
            end = start + dt.timedelta(minutes=s.end_minute)
            timed.append(
                (
                    begin,
                    f"| {begin:%Y-%m-%d %H:%M} | {end:%Y-%m-%d %H:%M} | {s.cause.value} | {s.minutes:,} "
                    f"| {_gh(s.minutes * self.gpus)} |",
                )
            )
        for run in self.scheduled_runs:
            fired = f", fired {run.fired_at:%Y-%m-%d %H:%M}" if run.fired_at else ""
            timed.append(
                (
                    run.scheduled_at,
                    f"| {run.scheduled_at:%Y-%m-%d %H:%M} | | run `{run.name}` ({run.stage}{fired}) | | |",
                )
            )
        timed.sort(key=lambda row: row[0])  # stable: a run at a segment's start comes after the segment
        return ["| from | to | cause | minutes | GPU-h |", "|---|---|---|---:|---:|", *(row for _, row in timed)]


def build_ledger(inputs: CostInputs, prices: PriceTable, *, price_note: str = "") -> CostLedger:
    """The ledger for one campaign (pure). Figures add up to the minute; ``CostLedger.check`` proves it.

    ``price_note`` is the sentence ``capserve.tasks.cost.price_list.with_live_prices`` returns.
    """
    costs = [price_resource(usage, prices, inputs.region) for usage in inputs.resources]
    passed = [p for p in inputs.throughput if p.passed_gates and p.output_tokens_per_s > 0]
    best = max(passed, key=lambda p: p.concurrency) if passed else None
    lost = dict.fromkeys(LOST_CAUSES, 0)
    segments: list[Segment] = []
    outside: dict[Cause, int] = {}
    paid = serving = 0
    if inputs.window is not None:
        attribution = attribute(inputs.window, inputs.intervals)
        segments, outside = attribution.segments, attribution.outside_block_minutes
        gpus = inputs.gpus
        by_cause = attribution.minutes_by_cause()
        paid = attribution.block_minutes * gpus
        serving = by_cause[Cause.SERVING] * gpus
        lost = {cause: by_cause[cause] * gpus for cause in LOST_CAUSES}
    ledger = CostLedger(
        campaign=inputs.campaign,
        currency=inputs.currency,
        upfront_fee=inputs.upfront_fee,
        adopted=inputs.adopted,
        region=inputs.region,
        instance_type=inputs.instance_type,
        gpus=inputs.gpus if inputs.window is not None else 0,
        window=inputs.window,
        segments=segments,
        paid_gpu_minutes=paid,
        serving_gpu_minutes=serving,
        lost_gpu_minutes=lost,
        outside_block_minutes=outside,
        utilisation_target=inputs.utilisation_target,
        other_resources=costs,
        throughput=best,
        price_table_date=prices.date,
        live_prices=len(prices.live),
        price_source_note=price_note,
        intervals=list(inputs.intervals),
        scheduled_runs=list(inputs.scheduled_runs),
        serving_started_by=inputs.serving_started_by,
        wiring_notes=[*inputs.notes, *inputs.serving_notes()],
    )
    ledger.check()
    return ledger


def _hours(gpu_minutes: int) -> float:
    return round(gpu_minutes / 60, 4)


def _money(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _gh(gpu_minutes: int) -> str:
    return f"{gpu_minutes / 60:,.2f}"


def _usd(value: float | None) -> str:
    return "—" if value is None else f"${value:,.2f}"
