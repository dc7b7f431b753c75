"""``capserve plan MODEL --instance-type T``: how many nodes, which layout, what KV budget, and why.

Exit codes: 0 fits; 1 does not fit (the reason and what would fit instead go to stderr); 2 bad input
(an unknown model or instance type, a context above the model's maximum, a concurrency below 1,
GPUs that cannot hold even the dense weights, an unreadable config.json). With ``--json`` stdout
carries exactly one JSON object, the plan, whether it fits or not.

Fast on purpose: no Prefect and no cloud SDK is imported; a Hub repo's config.json is read with
``huggingface_hub``, imported only then.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Literal

from capserve.cli import arg_types
from capserve.cli.exit_codes import ExitCode
from capserve.core.catalog import get_instance_type, get_model
from capserve.core.catalog.models import ModelEntry
from capserve.core.cost.planning import CostForecast, ExpectedTimeline, ThroughputEstimate, forecast_layout
from capserve.core.cost.prices import load_price_table
from capserve.core.drain import DRAIN_BEFORE_END_MINUTES
from capserve.core.errors import CapserveError, DoesNotFitError, RetryableError, SpecError
from capserve.core.evaluation.spec import EvaluationSpec
from capserve.core.planner.evaluate import gib
from capserve.core.planner.plan import ServingPlan, plan_serving
from capserve.core.planner.settings import PlannerSettings
from capserve.core.timeline import (
    STORAGES,
    BlockTimeline,
    MeasuredStart,
    predict_block,
    predict_range,
)
from capserve.core.urls import parse_hub_endpoint

_KV_DTYPES: dict[str, Literal[1, 2]] = {"fp8": 1, "bf16": 2}
_TEXT_ALTERNATIVES = 15  # rows of the alternatives table in text output; --json has them all


def _hub_endpoint(text: str) -> str:
    try:
        return parse_hub_endpoint(text)
    except SpecError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--hub-endpoint: ")) from None


def register(subparsers: Any) -> None:
    """Add the ``plan`` subcommand to the ``capserve`` parser."""
    defaults = PlannerSettings()
    parser = subparsers.add_parser(
        "plan",
        help="Plan nodes, parallel layout and KV budget for a model on an instance type.",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "model",
        help="Catalog model name (e.g. kimi-k3), or a Hub repo 'owner/name[@revision]' whose config.json is read.",
    )
    parser.add_argument(
        "--config", type=Path, default=None, help="Read the model's geometry from this config.json instead."
    )
    parser.add_argument(
        "--hub-endpoint",
        type=_hub_endpoint,
        default=None,
        help="Hugging Face endpoint for a Hub repo (default: https://huggingface.co).",
    )
    parser.add_argument("--instance-type", required=True, help="EC2 instance type, e.g. p6-b300.48xlarge.")
    parser.add_argument(
        "--context", type=arg_types.integer, default=None, help="Tokens per sequence (default: the model's maximum)."
    )
    parser.add_argument(
        "--concurrency", type=arg_types.integer, default=1, help="Sequences one replica holds at once (default 1)."
    )
    parser.add_argument(
        "--max-nodes",
        type=arg_types.positive_integer,
        default=defaults.max_nodes,
        help=f"Most nodes to use (default {defaults.max_nodes}).",
    )
    parser.add_argument(
        "--objective",
        choices=["kv_headroom", "throughput"],
        default=defaults.objective,
        help="Tiebreak among layouts on the fewest nodes (default: the most KV tokens per engine).",
    )
    parser.add_argument(
        "--kv-cache-dtype",
        choices=sorted(_KV_DTYPES),
        default="fp8",
        help="KV cache dtype (default fp8, as the K3 recipe).",
    )
    parser.add_argument(
        "--gpu-memory-utilization",
        type=arg_types.fraction,
        default=defaults.gpu_memory_utilization,
        help=f"vLLM's --gpu-memory-utilization (default {defaults.gpu_memory_utilization}).",
    )
    parser.add_argument(
        "--max-num-batched-tokens",
        type=arg_types.positive_integer,
        default=None,
        help="vLLM's --max-num-batched-tokens, sizes the activation reserve (default: vLLM's for the GPU).",
    )
    cost = parser.add_argument_group(
        "cost before buying",
        "Expected utilisation of the layout on a block, and with the block's fee and a sourced throughput "
        "estimate, the expected cost per million output tokens (docs/cost.md §5).",
    )
    cost.add_argument(
        "--block-hours", type=arg_types.positive_integer, default=24, help="Length of the block (default 24)."
    )
    cost.add_argument("--upfront-fee", type=arg_types.dollars, default=None, help="The block's fee in USD.")
    cost.add_argument(
        "--expected-output-tokens-per-s",
        type=arg_types.positive_number,
        default=None,
        help="Output tokens/s the endpoint is expected to sustain within the gates (needs --throughput-source).",
    )
    cost.add_argument(
        "--throughput-source", default=None, help="Where that estimate comes from (a report, a benchmark)."
    )
    cost.add_argument("--region", default="us-east-1", help="Region the other resources are priced in.")
    cost.add_argument(
        "--compile-cache-warm", action="store_true", help="A compile cache for this image and layout exists."
    )
    time = parser.add_argument_group(
        "time on the block",
        "The predicted timeline of the block per phase, cold and warm, and the utilisation it leaves "
        "(docs/timeline.md); --block-hours sets the block's length.",
    )
    time.add_argument(
        "--storage",
        choices=STORAGES,
        default="nvme",
        help="Where vLLM reads the weights: each node's NVMe (staged from S3), FSx for Lustre, or S3 directly "
        "(default nvme, what a campaign does).",
    )
    time.add_argument("--image-cached", action="store_true", help="The nodes already hold the vLLM image.")
    time.add_argument(
        "--cluster-kind",
        choices=("eks", "hyperpod"),
        default="eks",
        help="The spec's cluster.kind: on hyperpod a layout across nodes waits for HyperPod's deep health checks.",
    )
    time.add_argument(
        "--drain-before-end-minutes",
        type=arg_types.positive_integer,
        default=DRAIN_BEFORE_END_MINUTES,
        help=f"The spec's teardown.drain_before_end_minutes (default {DRAIN_BEFORE_END_MINUTES}: AWS terminates at "
        "end − 30, plus the time to stop serving and tear down what needs the nodes).",
    )
    time.add_argument(
        "--start-history",
        type=Path,
        default=None,
        help="A start-history JSON of this shape (s3://<weights bucket>/<prefix>/start-history/<shape>.json, kept by "
        "the rollout): its measured cold and warm starts replace the model's vLLM phases (docs/timeline.md §7.3).",
    )
    time.add_argument(
        "--gate-minutes",
        type=arg_types.positive_integer,
        default=EvaluationSpec().gate_budget_minutes,
        help="The spec's evaluation.gate_budget_minutes: smoke and quality before traffic "
        f"(default {EvaluationSpec().gate_budget_minutes}).",
    )
    parser.add_argument("--json", action="store_true", help="Print the plan as one JSON object.")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        model = _model(args)
        instance = get_instance_type(args.instance_type)
        settings = PlannerSettings(
            max_nodes=args.max_nodes,
            kv_cache_dtype_bytes=_KV_DTYPES[args.kv_cache_dtype],
            objective=args.objective,
            gpu_memory_utilization=args.gpu_memory_utilization,
            max_num_batched_tokens=args.max_num_batched_tokens,
        )
        plan = plan_serving(
            model, instance, context_length=args.context, concurrency=args.concurrency, settings=settings
        )
        timelines = _timelines(args, plan)
        forecast = _forecast(args, plan, timelines)
    except RetryableError as exc:  # the Hub did not answer: the same command may work later
        print(f"capserve plan: {exc}", file=sys.stderr)
        return ExitCode.UNAVAILABLE
    except (ValueError, CapserveError) as exc:  # unknown names, bad values, an unreadable config.json
        print(f"capserve plan: {exc}", file=sys.stderr)
        return 2
    if args.json:
        timeline_json: dict[str, Any] | None = None
        if timelines:
            timeline_json = {k: t.to_json() for k, t in timelines.items()}
            timeline_json["held_back"] = {k: held_back(timelines[k], TARGETS[k]) for k in TARGETS}
        cost = forecast.to_json() if forecast else None
        document = {**plan.to_json(), "timeline": timeline_json, "cost_forecast": cost}
        print(json.dumps(document, indent=2))
    else:
        _print_plan(plan)
        if timelines:
            _print_timelines(timelines)
        if forecast is not None:
            _print_forecast(forecast)
    try:
        plan.require_fit()
    except DoesNotFitError as exc:
        print(f"capserve plan: does not fit: {exc}", file=sys.stderr)
        return 1
    return 0


# What a block should serve of what it costs (docs/timeline.md §6): the plan says which phase holds it back.
TARGETS = {"cold": 0.92, "warm": 0.95}


def _timelines(args: argparse.Namespace, plan: ServingPlan) -> dict[str, BlockTimeline]:
    """The chosen layout's block, cold and warm, at the central figures and at both ends of their ranges
    ("cold fast", "warm slow", ...); none when the plan does not fit."""
    if args.drain_before_end_minutes < 31:
        raise SpecError(
            f"--drain-before-end-minutes {args.drain_before_end_minutes}: the drain must come more than 30 minutes "
            "before the end (AWS terminates the instances at end − 30)"
        )
    if not plan.fits:
        return {}
    deep_health_checks = args.cluster_kind == "hyperpod" and plan.nodes > 1
    block = plan.block_plan(args.storage, image_cached=args.image_cached, deep_health_checks=deep_health_checks)
    measured = _measured_starts(args.start_history)
    timelines: dict[str, BlockTimeline] = {}
    for kind in ("cold", "warm"):
        common = {
            "block_hours": args.block_hours,
            "warm": kind == "warm",
            "drain_before_end_minutes": args.drain_before_end_minutes,
            "gate_s": args.gate_minutes * 60.0,
            "measured_start": measured.get(kind),
        }
        timelines[kind] = predict_block(block, **common)
        for end, timeline in predict_range(block, **common).items():
            timelines[f"{kind} {end}"] = timeline
    return timelines


def _measured_starts(path: Path | None) -> dict[str, MeasuredStart]:
    """The cold and warm starts a start-history file holds (none without a file)."""
    if path is None:
        return {}
    from capserve.core.rollout.start_history import StartHistory

    try:
        history = StartHistory.model_validate_json(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise SpecError(f"--start-history {path}: not a readable start history ({exc.__class__.__name__})") from None
    found = {}
    for kind in ("cold", "warm"):
        start = history.for_start(warm=kind == "warm")
        if start is not None:
            found[kind] = MeasuredStart(seconds=start.to_listening_s, basis=start.basis(warm=kind == "warm"))
    return found


def held_back(timeline: BlockTimeline, target: float) -> str | None:
    """Why ``timeline`` misses ``target``: by how many minutes, and its longest in-block phase (None: it meets it)."""
    short = timeline.seconds_short_of(target)
    if short <= 0:
        return None
    phase = timeline.largest_in_block()
    return (
        f"{timeline.utilisation:.1%} is {short / 60:,.1f} min short of {target:.0%}; the longest phase in the block "
        f"is {phase.name} ({phase.seconds / 60:,.1f} min, {phase.source})"
    )


def _forecast(
    args: argparse.Namespace, plan: ServingPlan, timelines: dict[str, BlockTimeline]
) -> CostForecast | None:
    """What the chosen layout would make of a block (None when the plan does not fit)."""
    if (args.expected_output_tokens_per_s is None) != (args.throughput_source is None):
        raise SpecError(
            "give --expected-output-tokens-per-s and --throughput-source together: an estimate without its "
            "source cannot be weighed"
        )
    if not plan.fits:
        return None
    throughput = None
    if args.expected_output_tokens_per_s is not None:
        throughput = ThroughputEstimate(
            output_tokens_per_s=args.expected_output_tokens_per_s,
            concurrency=args.concurrency,
            source=args.throughput_source,
        )
    return forecast_layout(
        nodes=plan.nodes,
        gpus_per_node=plan.gpus_per_node,
        block_hours=args.block_hours,
        region=args.region,
        prices=load_price_table(),
        upfront_fee=args.upfront_fee,
        throughput=throughput,
        # The same time model as the timeline printed above (docs/timeline.md).
        timeline=ExpectedTimeline.from_block(timelines["warm" if args.compile_cache_warm else "cold"]),
    )


def _duration(seconds: float) -> str:
    minutes = seconds / 60
    return f"{minutes:,.1f} min" if minutes < 120 else f"{minutes / 60:,.1f} h"


def _print_timelines(timelines: dict[str, BlockTimeline]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    cold, warm = timelines["cold"], timelines["warm"]
    console = Console(file=sys.stdout, width=200)
    table = Table(
        title=f"predicted timeline of a {cold.block_hours:g} h block, weights read from {cold.plan.storage} "
        "(docs/timeline.md): central [fast – slow]"
    )
    for column in ("phase", "when", "cold", "warm", "share", "source", "basis"):
        table.add_column(column)

    def seconds(key: str, name: str) -> float | None:
        return next((p.seconds for p in timelines[key].phases if p.name == name), None)

    def spread(kind: str, name: str) -> str:
        central, fast, slow = (seconds(k, name) for k in (kind, f"{kind} fast", f"{kind} slow"))
        if central is None or fast is None or slow is None:
            return "-"  # a measured start stands for this phase on the other kind
        if fast == slow:
            return _duration(central)
        return f"{_duration(central)} [{fast / 60:,.1f} – {slow / 60:,.1f}]"

    # Cold's phases, then any only the warm block has (a measured cold start replaces the model's vLLM phases).
    phases = [*cold.phases, *(w for w in warm.phases if seconds("cold", w.name) is None)]
    for phase in phases:
        when = "before the block" if phase.before_block else "in the block"
        share = "" if phase.before_block else f"{phase.seconds / cold.paid_s:.1%}"
        table.add_row(
            phase.name, when, spread("cold", phase.name), spread("warm", phase.name), share, escape(phase.source),
            escape(phase.basis),
        )

    def total(kind: str, value: str) -> str:
        central, fast, slow = (timelines[k] for k in (kind, f"{kind} fast", f"{kind} slow"))
        if value == "ready":
            return f"{_duration(central.to_ready_s)} [{fast.to_ready_s / 60:,.1f} – {slow.to_ready_s / 60:,.1f}]"
        return f"{central.utilisation:.1%} [{fast.utilisation:.1%} – {slow.utilisation:.1%}]"

    table.add_row("[bold]block start → serving[/bold]", "", total("cold", "ready"), total("warm", "ready"), "")
    drain = f"drain at end − {cold.drain_before_end_s / 60:g} min (AWS terminates at end − 30 min)"
    table.add_row("[bold]serving[/bold]", "", _duration(cold.serving_s), _duration(warm.serving_s), "", "", drain)
    table.add_row(
        "[bold]utilisation (serving ÷ paid)[/bold]", "", total("cold", "share"), total("warm", "share"), "", "",
        f"targets: cold {TARGETS['cold']:.0%}, warm {TARGETS['warm']:.0%}",
    )
    console.print(table)
    for kind, target in TARGETS.items():
        for which in (kind, f"{kind} slow"):
            why = held_back(timelines[which], target)
            if why is not None:
                label = "at the central figures" if which == kind else "at the slow end of the ranges"
                console.print(escape(f"{kind} {label}: {why}"))


def _print_forecast(forecast: CostForecast) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(file=sys.stdout, width=160)
    table = Table(title="cost before buying (expected, docs/cost.md §5)", show_header=False)
    table.add_column("what", style="bold")
    table.add_column("value")
    per = forecast.expected_usd_per_million_output_tokens
    target = forecast.utilisation_target
    verdict = "meets" if forecast.expected_utilisation >= target else "[red]below[/red]"
    table.add_row("block", forecast.label)
    table.add_row("paid GPU-hours", f"{forecast.paid_gpu_hours:,.1f}")
    table.add_row("expected serving GPU-hours", f"{forecast.expected_serving_gpu_hours:,.1f}")
    table.add_row("expected utilisation", f"{forecast.expected_utilisation:.1%} ({verdict} the target {target:.0%})")
    if per is not None and forecast.throughput is not None:
        table.add_row(
            "expected USD per million output tokens",
            f"${per:,.2f} at {forecast.throughput.output_tokens_per_s:,.0f} tok/s ({forecast.throughput.source})",
        )
    else:
        table.add_row(
            "expected USD per million output tokens",
            "- (give --upfront-fee, --expected-output-tokens-per-s and --throughput-source)",
        )
    console.print(table)


def _model(args: argparse.Namespace) -> ModelEntry:
    """The catalog entry, a local config.json, or the config.json of a Hub repo (read at run time)."""
    if args.config is None and "/" not in args.model:
        return get_model(args.model)
    # File and Hub I/O live in tasks/; that module imports no Prefect, and huggingface_hub only for a repo.
    from capserve.tasks.model_config import model_from_config_file, model_from_hub

    if args.config is not None:
        return model_from_config_file(args.config, name=args.model)
    repo, _, revision = args.model.partition("@")
    return model_from_hub(repo, revision or "main", endpoint=args.hub_endpoint)


def _tokens(count: int | None) -> str:
    return "unbounded" if count is None else f"{count:,}"


def _print_plan(plan: ServingPlan) -> None:
    # rich is imported here, not at module level: --json and errors never need it.
    from rich.console import Console
    from rich.table import Table

    console = Console(file=sys.stdout, width=160)
    verdict = "[green]fits[/green]" if plan.fits else "[red]does not fit[/red]"
    summary = Table(title=f"{plan.model} on {plan.instance_type}: {verdict}", show_header=False)
    summary.add_column("what", style="bold")
    summary.add_column("value")
    p = plan.parallel
    flags = f"TP {p.tensor_parallel}, PP {p.pipeline_parallel}, DP {p.data_parallel} ({p.data_parallel_local} per node)"
    flags += f", EP {p.expert_parallel} (--enable-expert-parallel)" if p.enable_expert_parallel else ", EP off"
    rows = [
        (
            "layout",
            f"{plan.nodes} x {plan.instance_type} ({plan.nodes * plan.gpus_per_node} x {plan.gpu}), {plan.layout}, "
            f"{p.serving_replicas} replica(s) of {p.gpus_per_replica} GPU(s)",
        ),
        ("parallelism", flags),
        ("smallest unit", "-" if plan.smallest_unit_gpus is None else
            f"{plan.smallest_unit_gpus} GPU(s) ({plan.smallest_unit_layout})"),
        ("spare GPUs", plan.spare_gpus),
        ("kernels", f"{plan.kernel_support}: {plan.kernel_note}"),
        ("context x concurrency", f"{plan.context_length:,} tokens x {plan.concurrency} per replica"),
        (
            "weights",
            f"{plan.weight_bytes / 1e12:,.3f} TB ({gib(plan.weight_bytes)}), model geometry: {plan.model_provenance}",
        ),
        (
            "weights per GPU",
            f"{gib(plan.weight_bytes_per_gpu)} (dense {gib(plan.dense_weight_bytes_per_gpu)}, "
            f"experts {gib(plan.expert_weight_bytes_per_gpu)})",
        ),
        ("GPU memory", f"{gib(plan.hbm_bytes_per_gpu)} - {gib(plan.reserve_bytes_per_gpu)} reserve"),
        ("KV budget per GPU", gib(plan.kv_budget_bytes_per_gpu)),
        ("KV per token", f"{plan.kv_bytes_per_token:,} B (model), {plan.kv_bytes_per_token_per_gpu:,} B per GPU"),
        (
            "state per sequence",
            f"{plan.state_bytes_per_sequence:,} B (model), {plan.state_bytes_per_sequence_per_gpu:,} B per GPU",
        ),
        ("max tokens in KV", _tokens(plan.max_tokens_in_kv)),
        ("max sequences at context", f"{plan.max_sequences_at_context:,}"),
        ("why", plan.reason),
    ]  # fmt: skip
    rows += [("would fit instead", alt) for alt in plan.would_fit_instead]
    for what, value in rows:
        summary.add_row(what, value)
    console.print(summary)

    reserve = Table(title="reserve per GPU")
    reserve.add_column("part")
    reserve.add_column("bytes", justify="right")
    for name, nbytes in plan.reserve_parts_per_gpu.by_name().items():
        reserve.add_row(name.replace("_", " "), gib(nbytes))
    reserve.add_row("[bold]total[/bold]", gib(plan.reserve_bytes_per_gpu))
    console.print(reserve)

    classes = Table(title="weights by tensor class")
    classes.add_column("class")
    classes.add_column("bytes", justify="right")
    for name, nbytes in sorted(plan.weight_bytes_by_class.items(), key=lambda kv: -kv[1]):
        classes.add_row(name, f"{nbytes / 1e9:,.2f} GB")
    console.print(classes)

    shown = plan.alternatives[:_TEXT_ALTERNATIVES]
    hidden = len(plan.alternatives) - len(shown)
    caption = f"{hidden} more in --json" if hidden else None
    alternatives = Table(title=f"alternatives (ranked, {plan.objective})", caption=caption)
    for column in ("layout", "nodes", "fits", "weights/GPU", "tokens/engine", "tokens/replica", "why not chosen"):
        alternatives.add_column(column)
    for a in shown:
        alternatives.add_row(
            a.layout, str(a.nodes), "yes" if a.fits else "no", gib(a.weight_bytes_per_gpu),
            _tokens(a.tokens_per_dp_rank), _tokens(a.max_tokens_in_kv), a.reason,
        )  # fmt: skip
    console.print(alternatives)
