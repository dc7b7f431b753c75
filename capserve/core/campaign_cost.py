"""The cost ledger's inputs from one campaign run: the typed report, the spec and the lease (pure).

The runner calls ``campaign_cost_inputs`` when the run ends (after the teardown decision, before the
report is written) and ``capserve.core.cost.build_ledger`` turns the result into the report's "Cost"
section. What is read, and from where (docs/cost.md §6):

- the paid window and the fee from the lease (AWS's figures); no lease: no window and a fee of 0;
- the stages' times from the report's stages, on the campaign's one clock (``capserve.core.clock``: the host's,
  or the sandbox's, which its AWS answers on too);
- serving from the event that made the endpoint ready (the rollout stage when it ran; before that
  stage exists, the evaluated endpoint was ready when its evaluation began) to the moment serving
  stopped: a drain or teardown of this run, else the drain point;
- the throughput from the evaluation's closed-loop load levels, the scheduled runs from the report's schedule;
- the other resources bring-up and stage_weights made (control plane, system node group, NAT gateway and
  public IPv4 addresses, weights in S3).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from types import MappingProxyType

from capserve.core.capacity.offers import Offer
from capserve.core.catalog import get_instance_type, get_model
from capserve.core.cluster.result import ClusterResult
from capserve.core.cost.causes import Cause
from capserve.core.cost.inputs import BlockWindow, CostInputs, Interval, ScheduledRunMark, ThroughputPoint
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
from capserve.core.evaluation.result import EvaluationResult
from capserve.core.lease import Lease
from capserve.core.planner.plan import plan_serving
from capserve.core.report import CampaignReport, StageRecord
from capserve.core.schedule import LeaseSchedule
from capserve.core.spec import CampaignSpec
from capserve.core.stages import Stage, StageStatus
from capserve.core.timeline import predict_block

_MAX_RESOURCE_HOURS = 24 * 366  # the bound of every usage's hours (capserve/core/cost/resources.py)

# Campaign stage → the cause its GPU time counts under. Stages that need no GPU (plan, acquire, stage_image,
# stage_weights) are not listed: while they run inside the block the GPUs wait, and the ledger's gap
# rule counts that as waiting_for_bring_up (or idle after bring-up began).
STAGE_CAUSES: Mapping[Stage, Cause] = MappingProxyType(
    {
        Stage.BRING_UP: Cause.BRING_UP,
        Stage.WEIGHTS_TO_NODES: Cause.WEIGHTS_TO_NODES,
        Stage.ROLLOUT: Cause.VLLM_COLD_START,
        Stage.EVALUATE: Cause.EVALUATION,
        Stage.DRAIN: Cause.DRAIN_AND_TEARDOWN_MARGIN,
        Stage.TEARDOWN: Cause.DRAIN_AND_TEARDOWN_MARGIN,
    }
)


def campaign_cost_inputs(
    report: CampaignReport, spec: CampaignSpec, lease: Lease | None, *, written_at: datetime
) -> CostInputs:
    """Everything ``build_ledger`` needs for this run. ``written_at`` is the campaign's time now (serving counted
    past it, to the drain point, is a projection: ``CostInputs.projected_after``)."""
    if lease is None:
        return CostInputs(
            campaign=report.campaign,
            upfront_fee=0.0,
            region=spec.capacity.regions[0],
            resources=_weights_usage(report, spec, end=None),
            utilisation_target=spec.cost.utilisation_target,
            serving_started_by="nothing served: no capacity was obtained",
        )
    window = BlockWindow.for_block(
        lease.start, lease.end, drain_before_end=timedelta(minutes=spec.teardown.drain_before_end_minutes)
    )
    intervals = stage_intervals(report.stages)
    # Redeploys ran in runs of their own: the record carries them into this report, and their downtime here.
    intervals += [down for entry in report.redeploys for down in entry.downtime()]
    serving, serving_why = serving_interval(report, window)
    if serving is not None:
        intervals.append(serving)
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
        throughput=measured_throughput(report.evaluation) if report.evaluation is not None else [],
        resources=_resources(report, spec, lease),
        scheduled_runs=scheduled_runs(report.schedule) if report.schedule is not None else [],
        utilisation_target=spec.cost.utilisation_target,
        serving_started_by=serving_why,
        projected_after=written_at if serving is not None and serving.end > written_at else None,
    )


def stage_intervals(stages: Iterable[StageRecord]) -> list[Interval]:
    """One interval per timed stage that uses the GPUs; a failed stage's time becomes failures_and_rollbacks.

    Only a stage that failed on its own merits is a failure: an interrupted or stopped stage still
    spent its time on what it was doing. Skipped stages and stages still running (no end) are left out.
    """
    return [
        Interval(cause=cause, start=stage.started_at, end=stage.ended_at, label=stage.name.value,
                 failed=stage.status is StageStatus.FAILED)
        for stage in stages
        if (cause := STAGE_CAUSES.get(stage.name)) is not None
        and stage.status is not StageStatus.SKIPPED
        and stage.ended_at is not None
    ]


def measured_throughput(evaluation: EvaluationResult) -> list[ThroughputPoint]:
    """The evaluation's closed-loop load levels, each with its gate outcome.

    A level passed when its run was valid (the client was not the bottleneck) and every gate judged on it
    passed; a gate that could not be judged (``passed`` None) is not a pass.
    """
    levels = evaluation.load.points if evaluation.load is not None else []
    points = []
    for level in levels:
        if level.mode != "closed" or not level.concurrency:
            continue
        own = [gate for gate in evaluation.gates if gate.name.endswith(f"@{level.name}")]
        points.append(
            ThroughputPoint(
                concurrency=level.concurrency,
                output_tokens_per_s=level.metrics.output_throughput,
                passed_gates=level.valid and all(gate.passed is True for gate in own),
            )
        )
    return points


def serving_interval(report: CampaignReport, window: BlockWindow) -> tuple[Interval | None, str]:
    """When the endpoint could take traffic in this run, and a sentence saying why then.

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
        end, until = stops[0].started_at, f"{stops[0].name.value} began"
    else:
        end, until = window.drain_at, "the drain point"
    if end <= start:
        return None, f"nothing served: {event} only after {until}"
    return Interval(cause=Cause.SERVING, start=start, end=end, label=event), f"{event} → {until}"


def scheduled_runs(schedule: LeaseSchedule) -> list[ScheduledRunMark]:
    """The runs the lease scheduled, for the timeline."""
    return [
        ScheduledRunMark(name=run.name, stage=run.stage.value, scheduled_at=run.scheduled_at, fired_at=run.fired_at)
        for run in schedule.runs
    ]


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


def _resources(report: CampaignReport, spec: CampaignSpec, lease: Lease) -> list[ResourceUsage]:
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
            end = teardown.ended_at
        else:
            end = spec.teardown.teardown_at(lease.end)
        hours = _hours(bring_up.started_at, end)
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
    usages += _weights_usage(report, spec, end=lease.end)
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
    report: CampaignReport, spec: CampaignSpec, *, end: datetime | None
) -> list[ResourceUsage]:
    """The checkpoint in S3, counted from when it was staged until the block's end (this campaign's share;
    without a block, none: the stored bytes are listed at 0 hours so a reader sees they exist)."""
    weights = report.weights
    staged = _last(report, Stage.STAGE_WEIGHTS)
    if weights is None or staged is None or staged.ended_at is None:
        return []
    hours = _hours(staged.ended_at, end) if end is not None else 0.0
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


def _hours(start: datetime, end: datetime) -> float:
    return min(max((end - start).total_seconds() / 3600, 0.0), _MAX_RESOURCE_HOURS)


__all__: Sequence[str] = (
    "campaign_cost_inputs",
    "measured_throughput",
    "offer_forecasts",
    "scheduled_runs",
    "serving_interval",
    "stage_intervals",
    "throughput_estimate",
)
