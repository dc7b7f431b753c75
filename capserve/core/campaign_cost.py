"""The cost ledger's inputs from one campaign run: the typed report, the spec and the lease (pure).

The runner calls ``campaign_cost_inputs`` when the run ends (after the teardown decision, before the
report is written) and ``capserve.core.cost.build_ledger`` turns the result into the report's "Cost"
section. What is read, and from where (docs/cost.md §6):

- the paid window and the fee from the lease (AWS's figures); no lease: no window and a fee of 0;
- the stages' times from the report, moved onto AWS's clock by ``clock_offset`` (AWS's clock minus
  the host's, read by ``capserve.tasks.cost.clock``: on AWS a second or two, in the sandbox the time its
  reservation jumped ahead);
- serving from the event that made the endpoint ready (the rollout stage when it ran; before that
  stage exists, the evaluated endpoint was ready when its evaluation began) to the moment serving
  stopped: a drain or teardown of this run, else the drain point;
- the other resources bring-up and stage_weights made (control plane, system node group, NAT gateway and
  public IPv4 addresses, weights in S3).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from capserve.core.capacity.offers import Offer
from capserve.core.catalog import get_instance_type, get_model
from capserve.core.cluster.result import ClusterResult
from capserve.core.cost.adapters import intervals_from_report_stages, throughput_from_evaluation
from capserve.core.cost.causes import Cause
from capserve.core.cost.inputs import BlockWindow, CostInputs, Interval, ScheduledRunMark
from capserve.core.cost.planning import (
    CostForecast,
    ExpectedTimeline,
    ThroughputEstimate,
    expected_resources,
    forecast_offer,
)
from capserve.core.cost.prices import PriceTable
from capserve.core.cost.resources import (
    Ec2InstanceUsage,
    EksControlPlaneUsage,
    NatGatewayUsage,
    PublicIpv4Usage,
    ResourceUsage,
    S3Usage,
)
from capserve.core.errors import CapserveError
from capserve.core.lease import Lease
from capserve.core.planner.plan import plan_serving
from capserve.core.report import CampaignReport, StageRecord
from capserve.core.spec import CampaignSpec
from capserve.core.stages import Stage, StageStatus
from capserve.core.timeline import predict_block

_MAX_RESOURCE_HOURS = 24 * 366  # the bound of every usage's hours (capserve/core/cost/resources.py)
# AWS's Date header has a resolution of one second: an offset this small is the header's rounding and
# the request's flight time, not a clock that runs elsewhere.
_SAME_CLOCK = timedelta(seconds=5)


PROJECTED = "is projected"
"""What the serving run's note says of the serving it could not see yet (capserve.core.block_cost.after_the_drain)."""


def campaign_cost_inputs(
    report: CampaignReport,
    spec: CampaignSpec,
    lease: Lease | None,
    *,
    written_at: datetime,
    clock_offset: timedelta = timedelta(0),
) -> CostInputs:
    """Everything ``build_ledger`` needs for this run. ``written_at`` is the host's time now (for the note
    that says which part of the serving interval lies ahead of the report)."""
    document = report.to_json()
    if lease is None:
        return CostInputs(
            campaign=report.campaign,
            upfront_fee=0.0,
            region=spec.capacity.regions[0],
            resources=_weights_usage(report, spec, end=None, offset=clock_offset),
            utilisation_target=spec.cost.utilisation_target,
            serving_started_by="nothing served: no capacity was obtained",
        )
    offset = clock_offset if abs(clock_offset) > _SAME_CLOCK else timedelta(0)
    window = BlockWindow.for_block(
        lease.start, lease.end, drain_before_end=timedelta(minutes=spec.teardown.drain_before_end_minutes)
    )
    intervals = [_shifted(interval, offset) for interval in intervals_from_report_stages(document["stages"])]
    # Redeploys ran in runs of their own: the record carries them into this report, and their downtime here.
    intervals += [_shifted(down, offset) for entry in report.redeploys for down in entry.downtime()]
    serving, serving_why = serving_interval(report, window, offset=offset)
    notes = []
    if offset:
        notes.append(
            f"Stage times were moved by {_duration(offset)} onto AWS's clock (read from AWS's Date header): the "
            "host's clock and AWS's differ (in the sandbox, its reservation starts without waiting for the block)."
        )
    if serving is not None:
        intervals.append(serving)
        if serving.end > written_at + offset:
            notes.append(
                f"Serving after {written_at + offset:%Y-%m-%d %H:%M} UTC {PROJECTED}: the report was written then, "
                "and the endpoint is expected to serve until the drain point."
            )
    evaluation = document.get("evaluation")
    # Only a reservation named in the spec was paid outside the campaign; one found by the campaign's tag was
    # bought by an earlier run of this campaign (a re-run, the scheduled serve run), and its fee is this one's.
    external = lease.adopted and lease.provider == "existing-reservation"
    return CostInputs(
        campaign=report.campaign,
        currency=lease.currency,
        upfront_fee=0.0 if external else lease.upfront_fee,
        adopted=external,
        region=lease.region,
        window=window,
        instance_type=lease.instance_type,
        instance_count=lease.instance_count,
        gpus_per_instance=get_instance_type(lease.instance_type).gpus_per_node,
        intervals=intervals,
        throughput=throughput_from_evaluation(evaluation) if isinstance(evaluation, Mapping) else [],
        resources=_resources(report, spec, lease, offset=offset),
        scheduled_runs=scheduled_runs(document, report.campaign),
        utilisation_target=spec.cost.utilisation_target,
        serving_started_by=serving_why,
        notes=notes,
    )


def serving_interval(
    report: CampaignReport, window: BlockWindow, *, offset: timedelta = timedelta(0)
) -> tuple[Interval | None, str]:
    """When the endpoint could take traffic in this run (on AWS's clock), and a sentence saying why then.

    Starts when the rollout stage completed (the endpoint ready); until that stage exists, when the
    evaluate stage began on the endpoint it was given. No serving when the evaluation failed its gates
    (the hours after it are not serving) or when nothing became ready. Ends at the first drain or
    teardown of this run, else at the drain point.
    """
    rollout = _last(report, Stage.ROLLOUT)
    evaluate = _last(report, Stage.EVALUATE)
    if rollout is not None and rollout.status is StageStatus.COMPLETED and rollout.ended_at is not None:
        start, event = rollout.ended_at, "rollout ready"
    elif evaluate is not None and evaluate.status is StageStatus.COMPLETED:
        start, event = evaluate.started_at, "evaluate began on the ready endpoint (no rollout stage ran)"
    else:
        return None, "nothing served: no endpoint became ready in this run"
    if report.evaluation is not None and report.evaluation.verdict == "fail":
        return None, "nothing served: the evaluation failed its gates"
    stops = [line for line in report.stages if line.name in (Stage.DRAIN, Stage.TEARDOWN) and line.started_at >= start]
    if stops:
        end, until = stops[0].started_at + offset, f"{stops[0].name.value} began"
    else:
        end, until = window.drain_at, "the drain point"
    start += offset
    if end <= start:
        return None, f"nothing served: {event} only after {until}"
    return Interval(cause=Cause.SERVING, start=start, end=end, label=event), f"{event} → {until}"


def scheduled_runs(document: Mapping[str, Any], campaign: str) -> list[ScheduledRunMark]:
    """The scheduled runs the report lists, for the timeline: the lease schedule's runs, or the teardown run."""
    marks = []
    for run in document.get("schedule") or []:
        if run.get("stage") in ("prepare_cluster", "bring_up", "drain", "teardown"):
            marks.append(
                ScheduledRunMark(
                    name=str(run["name"]),
                    stage=run["stage"],
                    scheduled_at=datetime.fromisoformat(run["scheduled_at"]),
                    fired_at=datetime.fromisoformat(run["fired_at"]) if run.get("fired_at") else None,
                )
            )
    teardown = document.get("teardown_schedule")
    if not marks and isinstance(teardown, Mapping) and teardown.get("scheduled_at"):
        marks.append(
            ScheduledRunMark(
                name=f"teardown-{campaign}",
                stage="teardown",
                scheduled_at=datetime.fromisoformat(str(teardown["scheduled_at"])),
            )
        )
    return marks


MAX_FORECASTS = 10  # the offers a person weighs: the best-ranked ones


def throughput_estimate(spec: CampaignSpec) -> ThroughputEstimate | None:
    """The spec's throughput estimate with its source (``cost.expected_output_tokens_per_s``), or None."""
    cost = spec.cost
    if cost.expected_output_tokens_per_s is None or cost.throughput_source is None:
        return None
    return ThroughputEstimate(
        output_tokens_per_s=cost.expected_output_tokens_per_s,
        concurrency=spec.serving.max_num_seqs,
        source=cost.throughput_source,
    )


def expected_timeline(spec: CampaignSpec, instance_type: str, *, block_hours: float) -> ExpectedTimeline:
    """The time model's cold block for the spec's catalog model planned on ``instance_type``; docs/cost.md §5's
    fixed stages (with the spec's drain point) for a model outside the catalog or a plan that does not fit."""
    fixed = ExpectedTimeline(drain_before_end_minutes=spec.teardown.drain_before_end_minutes)
    if spec.model.catalog is None:
        return fixed
    try:
        plan = plan_serving(
            get_model(spec.model.catalog),
            get_instance_type(instance_type),
            context_length=spec.serving.max_model_len,
            concurrency=spec.serving.max_num_seqs,
        )
    except CapserveError:
        return fixed
    if not plan.fits:
        return fixed
    cold = predict_block(
        plan.block_plan(spec.weights.node_target),
        block_hours=block_hours,
        warm=False,
        drain_before_end_minutes=spec.teardown.drain_before_end_minutes,
        gate_s=spec.evaluation.gate_budget_minutes * 60.0,
    )
    return ExpectedTimeline.from_block(cold)


def offer_forecasts(spec: CampaignSpec, offers: Sequence[Offer], prices: PriceTable) -> list[CostForecast]:
    """Expected utilisation and cost per million output tokens of each offer, before anything is bought.

    The expected timeline is the time model's cold block for the spec's plan on the offer's instance type
    (docs/timeline.md, as ``capserve plan`` prints it), with the spec's drain point and gate; the other resources
    are the control plane and the system node group for the block (plus an hour's lead). Without a throughput
    estimate in the spec the cost per token is left out (the utilisation still shows).
    """
    throughput = throughput_estimate(spec)
    forecasts = []
    for offer in offers[:MAX_FORECASTS]:
        forecasts.append(
            forecast_offer(
                offer,
                gpus_per_instance=get_instance_type(offer.instance_type).gpus_per_node,
                prices=prices,
                timeline=expected_timeline(spec, offer.instance_type, block_hours=offer.duration_hours),
                throughput=throughput,
                resources=expected_resources(block_hours=offer.duration_hours),
                utilisation_target=spec.cost.utilisation_target,
            )
        )
    return forecasts


def _resources(report: CampaignReport, spec: CampaignSpec, lease: Lease, *, offset: timedelta) -> list[ResourceUsage]:
    """The control plane, the system node group and the network's billed parts (the NAT gateway; the public
    IPv4 addresses: its Elastic IP and one per system node) from bring-up's start until teardown ended (or the
    scheduled hard teardown, when this run left it to that run), and the weights in S3 for as long as the block.
    The NAT gateway's processed bytes are not measured, so its per-GB charge is not claimed."""
    usages: list[ResourceUsage] = []
    bring_up = _first(report, Stage.BRING_UP)
    cluster = report.cluster
    if bring_up is not None and bring_up.status is not StageStatus.SKIPPED and not spec.cluster.existing_cluster_name:
        teardown = _last(report, Stage.TEARDOWN)
        if teardown is not None and teardown.ended_at is not None:
            end = teardown.ended_at + offset
        else:
            end = spec.teardown.teardown_at(lease.end)
        hours = _hours(bring_up.started_at + offset, end)
        usages.append(EksControlPlaneUsage(name="EKS control plane", hours=hours))
        if cluster is not None and cluster.system_pool is not None:
            pool = cluster.system_pool
            usages.append(
                Ec2InstanceUsage(
                    name=f"system node group ({pool.name})",
                    instance_type=pool.instance_type,
                    count=pool.node_count,
                    hours=hours,
                )
            )
        if cluster is not None:
            usages += _network_usage(cluster, hours)
    usages += _weights_usage(report, spec, end=lease.end, offset=offset)
    return usages


def _network_usage(cluster: ClusterResult, hours: float) -> list[ResourceUsage]:
    """What the campaign's network bills by the hour (docs/aws-network.md): one NAT gateway, and the public
    IPv4 addresses (the NAT gateway's Elastic IP; each system node in a public subnet gets one)."""
    network = cluster.network
    if network is None:
        return []
    system_nodes = cluster.system_pool.node_count if cluster.system_pool is not None else 0
    return [
        NatGatewayUsage(name=f"NAT gateway {network.nat_gateway_id} (hours; GB processed not measured)", count=1,
                        hours=hours),
        PublicIpv4Usage(name=f"public IPv4 (NAT Elastic IP, {system_nodes} system nodes)", count=1 + system_nodes,
                        hours=hours),
    ]


def _weights_usage(
    report: CampaignReport, spec: CampaignSpec, *, end: datetime | None, offset: timedelta
) -> list[ResourceUsage]:
    """The checkpoint in S3, counted from when it was staged until the block's end (this campaign's share;
    without a block, none: the stored bytes are listed at 0 hours so a reader sees they exist)."""
    weights = report.weights
    staged = _last(report, Stage.STAGE_WEIGHTS)
    if weights is None or staged is None or staged.ended_at is None:
        return []
    hours = _hours(staged.ended_at + offset, end) if end is not None else 0.0
    return [
        S3Usage(
            name=f"weights in s3://{spec.weights.s3_bucket}", gb_stored=weights.bytes_total / 1e9, hours_stored=hours
        )
    ]


def _first(report: CampaignReport, stage: Stage) -> StageRecord | None:
    return next((line for line in report.stages if line.name is stage), None)


def _last(report: CampaignReport, stage: Stage) -> StageRecord | None:
    found = [line for line in report.stages if line.name is stage]
    return found[-1] if found else None


def _shifted(interval: Interval, offset: timedelta) -> Interval:
    if not offset:
        return interval
    return interval.model_copy(update={"start": interval.start + offset, "end": interval.end + offset})


def _hours(start: datetime, end: datetime) -> float:
    return min(max((end - start).total_seconds() / 3600, 0.0), _MAX_RESOURCE_HOURS)


def _duration(delta: timedelta) -> str:
    sign = "−" if delta < timedelta(0) else "+"
    seconds = int(abs(delta).total_seconds())
    return f"{sign}{seconds // 3600}h{seconds % 3600 // 60:02d}m{seconds % 60:02d}s"


__all__: Sequence[str] = (
    "campaign_cost_inputs",
    "offer_forecasts",
    "scheduled_runs",
    "serving_interval",
    "throughput_estimate",
)
