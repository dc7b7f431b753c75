"""Planning before buying: what utilisation and cost per million tokens an offer would give.

The expected timeline is laid out from the block's start (bring-up fires at the start, then node
readiness, weights to nodes, vLLM's start, evaluation, serving until the drain point) and run through
the same ledger as a finished campaign, so a forecast and a ledger can be compared line by line.
Defaults and where they come from: docs/cost.md, "Planning before buying".
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from capserve.core.capacity.offers import Offer
from capserve.core.cost.causes import Cause
from capserve.core.cost.inputs import BlockWindow, CostInputs, Interval, ThroughputPoint
from capserve.core.cost.ledger import build_ledger
from capserve.core.cost.prices import PriceTable
from capserve.core.cost.resources import (
    Ec2InstanceUsage,
    EksControlPlaneUsage,
    NatGatewayUsage,
    PublicIpv4Usage,
    ResourceUsage,
    S3Usage,
)
from capserve.core.timeline import BlockTimeline

_DAY_MINUTES = 24 * 60


class ExpectedTimeline(BaseModel):
    """How long each stage is expected to take once the block starts (minutes). Defaults: a K3-class model."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    start_delay_minutes: int = Field(
        0, ge=0, le=7 * _DAY_MINUTES, description="Block start → bring-up start (0: the bring-up run fires at start)."
    )
    bring_up_minutes: int = Field(
        20, ge=0, le=_DAY_MINUTES, description="GPU node group on the active block → instances running."
    )
    node_readiness_minutes: int = Field(
        10, ge=0, le=_DAY_MINUTES, description="Instances running → every GPU allocatable in Kubernetes."
    )
    weights_to_nodes_minutes: int = Field(
        30, ge=0, le=_DAY_MINUTES, description="Each node's share of the weights copied onto it (nodes in parallel)."
    )
    vllm_cold_start_minutes: int = Field(
        75, ge=0, le=_DAY_MINUTES, description="vLLM start to ready with empty compile caches (K3: 60–75 min)."
    )
    vllm_warm_start_minutes: int = Field(
        25, ge=0, le=_DAY_MINUTES, description="vLLM start to ready with the compile caches restored."
    )
    compile_cache_warm: bool = Field(False, description="True when a compile cache for this image/model/layout exists.")
    evaluation_minutes: int = Field(
        30, ge=0, le=_DAY_MINUTES, description="Smoke, quality and load profiles before serving."
    )
    drain_before_end_minutes: int = Field(
        45, ge=31, le=_DAY_MINUTES, description="The spec's teardown.drain_before_end_minutes."
    )

    @classmethod
    def from_block(cls, timeline: BlockTimeline) -> ExpectedTimeline:
        """The stages of the time model's predicted block (docs/timeline.md), each rounded up to a minute.

        EC2 launch and node join is the bring-up, the image pull (what it takes beyond the copy) the node
        readiness, the S3 → node copy the weights to nodes, vLLM's start (process, load, compile, profile, capture)
        the start, the gate the evaluation; the phases done before the block are not in it.
        """

        def minutes(*names: str) -> int:
            return math.ceil(sum(p.seconds for p in timeline.phases if p.name in names) / 60)

        start = [
            p.name for p in timeline.phases if p.name.startswith(("vLLM", "weight load", "compile", "engine", "CUDA"))
        ]
        vllm_start = minutes(*start)
        return cls(
            bring_up_minutes=minutes("EC2 launch and node join"),
            node_readiness_minutes=minutes("image pull"),
            weights_to_nodes_minutes=minutes("S3 → node staging"),
            vllm_cold_start_minutes=vllm_start,
            vllm_warm_start_minutes=vllm_start,
            compile_cache_warm=timeline.warm,
            evaluation_minutes=minutes("gate (smoke + quality)"),
            drain_before_end_minutes=math.ceil(timeline.drain_before_end_s / 60),
        )

    @property
    def vllm_start_minutes(self) -> int:
        return self.vllm_warm_start_minutes if self.compile_cache_warm else self.vllm_cold_start_minutes

    def stages(self) -> list[tuple[Cause, int]]:
        """The stages in order with their expected minutes."""
        return [
            (Cause.BRING_UP, self.bring_up_minutes),
            (Cause.NODE_READINESS, self.node_readiness_minutes),
            (Cause.WEIGHTS_TO_NODES, self.weights_to_nodes_minutes),
            (Cause.VLLM_COLD_START, self.vllm_start_minutes),
            (Cause.EVALUATION, self.evaluation_minutes),
        ]


class ThroughputEstimate(BaseModel):
    """The throughput a forecast assumes, and where the number comes from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    output_tokens_per_s: float = Field(gt=0, le=1e9, description="Output tokens/s within the gates.")
    concurrency: int = Field(1, ge=1, le=1_000_000, description="The load level it was measured or estimated at.")
    source: str = Field(min_length=1, max_length=300, description="Where it comes from (a report, a benchmark).")


class CostForecast(BaseModel):
    """What an offer is expected to give: the figures ``capserve plan`` and the approval form show."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    label: str = Field(description="The offer, as a person recognises it.")
    start: AwareDatetime = Field(description="Block start.")
    end: AwareDatetime = Field(description="Block end.")
    upfront_fee: float = Field(ge=0, description="The offer's fee.")
    gpus: int = Field(ge=1, description="GPUs in the offer.")
    paid_gpu_hours: float = Field(ge=0, description="Block hours × GPUs.")
    expected_serving_gpu_hours: float = Field(ge=0, description="Serving GPU-hours after the expected stages.")
    expected_utilisation: float = Field(ge=0, le=1, description="Expected serving ÷ paid.")
    utilisation_target: float = Field(ge=0, le=1, description="The spec's target.")
    expected_lost_gpu_hours: dict[str, float] = Field(description="Expected GPU-hours lost, by cause.")
    other_resources_cost: float = Field(ge=0, description="Expected other resources' cost (USD).")
    expected_usd_per_million_output_tokens: float | None = Field(
        description="(fee + other) ÷ tokens the serving hours can deliver at the estimate; None without an estimate."
    )
    throughput: ThroughputEstimate | None = Field(description="The estimate used.")
    timeline: ExpectedTimeline = Field(description="The expected stage durations used.")

    @property
    def serves(self) -> bool:
        return self.expected_serving_gpu_hours > 0

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def markdown_row(self) -> str:
        per = self.expected_usd_per_million_output_tokens
        per_text = "—" if per is None else f"${per:,.2f}"
        flag = "" if self.expected_utilisation >= self.utilisation_target else " (below target)"
        return (
            f"| {self.label} | ${self.upfront_fee:,.2f} | {self.paid_gpu_hours:,.1f} | "
            f"{self.expected_serving_gpu_hours:,.1f} | {self.expected_utilisation:.1%}{flag} | {per_text} |"
        )


FORECAST_TABLE_HEADER = (
    "| offer | fee | paid GPU-h | expected serving GPU-h | expected utilisation | expected $/M output tokens |\n"
    "|---|---:|---:|---:|---:|---:|"
)


def forecast_table(forecasts: list[CostForecast]) -> str:
    """The offers weighed, side by side, with where the throughput figure comes from."""
    lines = [FORECAST_TABLE_HEADER, *(f.markdown_row() for f in forecasts)]
    sources = sorted({f.throughput.source for f in forecasts if f.throughput is not None})
    lines.append("")
    lines.append(
        f"Throughput assumed: {'; '.join(sources)}." if sources else "No throughput estimate: no cost per token shown."
    )
    return "\n".join(lines)


def expected_resources(
    *,
    block_hours: float,
    lead_hours: float = 1.0,
    system_instance_type: str = "m7i.large",
    system_nodes: int = 2,
    weights_gb: float = 0.0,
) -> list[ResourceUsage]:
    """What a campaign runs besides the GPUs for one block: the control plane, the system nodes, the NAT gateway
    and the public IPv4 addresses (its Elastic IP, one per system node in the public subnets) for the block plus
    the bring-up lead, and the weights in S3 for as long (docs/aws-network.md). The NAT gateway's per-GB charge
    is left out: what crosses it is not known before the run (the weights do not: the S3 endpoint carries them)."""
    hours = block_hours + lead_hours
    usages: list[ResourceUsage] = [
        EksControlPlaneUsage(name="EKS control plane", hours=hours),
        Ec2InstanceUsage(name="system node group", instance_type=system_instance_type, count=system_nodes, hours=hours),
        NatGatewayUsage(name="NAT gateway (hours; GB processed not forecast)", count=1, hours=hours),
        PublicIpv4Usage(name="public IPv4 (NAT Elastic IP, system nodes)", count=1 + system_nodes, hours=hours),
    ]
    if weights_gb > 0:
        usages.append(S3Usage(name="weights in S3", gb_stored=weights_gb, hours_stored=hours))
    return usages


def forecast_window(
    *,
    label: str,
    start: datetime,
    end: datetime,
    upfront_fee: float,
    instance_count: int,
    gpus_per_instance: int,
    prices: PriceTable,
    region: str,
    timeline: ExpectedTimeline | None = None,
    throughput: ThroughputEstimate | None = None,
    resources: list[ResourceUsage] | None = None,
    utilisation_target: float = 0.8,
) -> CostForecast:
    """The forecast for a block from ``start`` to ``end`` bought for ``upfront_fee`` (pure)."""
    timeline = timeline or ExpectedTimeline()
    window = BlockWindow.for_block(start, end, drain_before_end=timedelta(minutes=timeline.drain_before_end_minutes))
    at = start + timedelta(minutes=timeline.start_delay_minutes)
    intervals: list[Interval] = []
    for cause, minutes in timeline.stages():
        intervals.append(Interval(cause=cause, start=at, end=at + timedelta(minutes=minutes), label="expected"))
        at += timedelta(minutes=minutes)
    if at < window.drain_at:
        intervals.append(Interval(cause=Cause.SERVING, start=at, end=window.drain_at, label="expected"))
    inputs = CostInputs(
        campaign="forecast",
        upfront_fee=upfront_fee,
        region=region,
        window=window,
        instance_count=instance_count,
        gpus_per_instance=gpus_per_instance,
        intervals=intervals,
        throughput=[]
        if throughput is None
        else [
            ThroughputPoint(
                concurrency=throughput.concurrency,
                output_tokens_per_s=throughput.output_tokens_per_s,
                passed_gates=True,
            )
        ],
        resources=resources or [],
        utilisation_target=utilisation_target,
    )
    ledger = build_ledger(inputs, prices)
    return CostForecast(
        label=label,
        start=start,
        end=end,
        upfront_fee=upfront_fee,
        gpus=inputs.gpus,
        paid_gpu_hours=ledger.paid_gpu_hours,
        expected_serving_gpu_hours=ledger.serving_gpu_hours,
        expected_utilisation=ledger.utilisation or 0.0,
        utilisation_target=utilisation_target,
        expected_lost_gpu_hours={c.value: h for c, h in ledger.lost_gpu_hours.items()},
        other_resources_cost=ledger.other_resources_cost,
        expected_usd_per_million_output_tokens=ledger.usd_per_million_output_tokens,
        throughput=throughput,
        timeline=timeline,
    )


def forecast_offer(
    offer: Offer,
    *,
    gpus_per_instance: int,
    prices: PriceTable,
    timeline: ExpectedTimeline | None = None,
    throughput: ThroughputEstimate | None = None,
    resources: list[ResourceUsage] | None = None,
    utilisation_target: float = 0.8,
) -> CostForecast:
    """``forecast_window`` for an offering found by the acquire stage."""
    return forecast_window(
        label=offer.label(),
        start=offer.start,
        end=offer.end,
        upfront_fee=offer.upfront_fee,
        instance_count=offer.instance_count,
        gpus_per_instance=gpus_per_instance,
        prices=prices,
        region=offer.region,
        timeline=timeline,
        throughput=throughput,
        resources=resources,
        utilisation_target=utilisation_target,
    )


# A nominal block for a forecast made before any offer is known: only its length matters (every stage is
# laid out from the start); 11:30 UTC as every Capacity Block (docs/aws-capacity.md §1).
_NOMINAL_START = datetime(2026, 1, 5, 11, 30, tzinfo=UTC)


def forecast_layout(
    *,
    nodes: int,
    gpus_per_node: int,
    block_hours: int,
    region: str,
    prices: PriceTable,
    upfront_fee: float | None = None,
    throughput: ThroughputEstimate | None = None,
    timeline: ExpectedTimeline | None = None,
    utilisation_target: float = 0.8,
) -> CostForecast:
    """The forecast for a layout on a block of ``block_hours`` not yet offered (``capserve plan``).

    Without the offer's fee only the utilisation is known: the cost per million tokens is left out rather
    than shown from the other resources alone, which would look cheap and mislead.
    """
    fee_known = upfront_fee is not None
    return forecast_window(
        label=f"{nodes} node(s), a {block_hours} h block" + ("" if fee_known else " (fee unknown)"),
        start=_NOMINAL_START,
        end=_NOMINAL_START + timedelta(hours=block_hours),
        upfront_fee=upfront_fee or 0.0,
        instance_count=nodes,
        gpus_per_instance=gpus_per_node,
        prices=prices,
        region=region,
        timeline=timeline,
        throughput=throughput if fee_known else None,
        resources=expected_resources(block_hours=block_hours),
        utilisation_target=utilisation_target,
    )
