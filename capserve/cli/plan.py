"""``capserve plan MODEL --instance-type T``: how many nodes, which layout, what KV budget.

Exit codes: 0 fits; 1 does not fit (the reason and alternatives go to stderr); 2 unknown model or
instance type (the known ones go to stderr). With ``--json`` stdout carries exactly one JSON object,
the plan, whether it fits or not.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Literal

from rich.console import Console
from rich.table import Table

from capserve.core.catalog import ModelEntry, get_instance_type, get_model
from capserve.core.errors import CapserveError, DoesNotFitError, SpecError, UnknownCatalogEntryError
from capserve.core.planner import PlannerSettings, ServingPlan, plan_serving
from capserve.core.urls import parse_hub_endpoint

_KV_DTYPES: dict[str, Literal[1, 2]] = {"fp8": 1, "bf16": 2}


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


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
        "--context", type=_positive, default=None, help="Tokens per sequence (default: the model's maximum)."
    )
    parser.add_argument("--concurrency", type=_positive, default=1, help="Sequences held at once (default 1).")
    parser.add_argument(
        "--max-nodes",
        type=_positive,
        default=defaults.max_nodes,
        help=f"Most nodes to use (default {defaults.max_nodes}).",
    )
    parser.add_argument(
        "--kv-cache-dtype",
        choices=sorted(_KV_DTYPES),
        default="fp8",
        help="KV cache dtype (default fp8, as the K3 recipe).",
    )
    parser.add_argument("--json", action="store_true", help="Print the plan as one JSON object.")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        model = _model(args)
        instance = get_instance_type(args.instance_type)
        settings = PlannerSettings(max_nodes=args.max_nodes, kv_cache_dtype_bytes=_KV_DTYPES[args.kv_cache_dtype])
    except UnknownCatalogEntryError as exc:
        print(f"capserve plan: {exc}", file=sys.stderr)
        return 2
    except (ValueError, CapserveError) as exc:  # a setting out of bounds, an unreadable config.json
        print(f"capserve plan: {exc}", file=sys.stderr)
        return 2
    plan = plan_serving(model, instance, context_length=args.context, concurrency=args.concurrency, settings=settings)
    if args.json:
        print(json.dumps(plan.to_json(), indent=2))
    else:
        _print_table(plan)
    try:
        plan.require_fit()
    except DoesNotFitError as exc:
        print(f"capserve plan: does not fit: {exc}", file=sys.stderr)
        return 1
    return 0


def _model(args: argparse.Namespace) -> ModelEntry:
    """The catalog entry, a local config.json, or the config.json of a Hub repo (read at run time)."""
    # tasks/ holds the Hub and file I/O; imported here so catalog-only plans stay quick to start.
    from capserve.tasks.planning import model_from_config_file, model_from_hub

    if args.config is not None:
        return model_from_config_file(args.config, name=args.model)
    if "/" in args.model:
        repo, _, revision = args.model.partition("@")
        return model_from_hub(repo, revision or "main", endpoint=args.hub_endpoint)
    return get_model(args.model)


def _gib(nbytes: int) -> str:
    return f"{nbytes / 2**30:,.1f} GiB"


def _print_table(plan: ServingPlan) -> None:
    console = Console(file=sys.stdout, width=140)
    verdict = "[green]fits[/green]" if plan.fits else "[red]does not fit[/red]"
    summary = Table(title=f"{plan.model} on {plan.instance_type}: {verdict}", show_header=False)
    summary.add_column("what", style="bold")
    summary.add_column("value")
    rows = [
        (
            "layout",
            f"{plan.nodes} x {plan.instance_type} ({plan.nodes * plan.gpus_per_node} x {plan.gpu}), {plan.layout}",
        ),
        (
            "parallelism",
            f"TP {plan.tensor_parallel}, PP {plan.pipeline_parallel}, "
            f"DP {plan.data_parallel}, EP {plan.expert_parallel}",
        ),
        ("context x concurrency", f"{plan.context_length:,} tokens x {plan.concurrency}"),
        (
            "weights",
            f"{plan.weight_bytes / 1e12:,.3f} TB ({_gib(plan.weight_bytes)}), model geometry: {plan.model_provenance}",
        ),
        ("weights per GPU", _gib(plan.weight_bytes_per_gpu)),
        (
            "GPU memory",
            f"{_gib(plan.hbm_bytes_per_gpu)} x {plan.gpu_memory_utilization} "
            f"- {_gib(plan.reserve_bytes_per_gpu)} reserve",
        ),
        ("KV budget per GPU", _gib(plan.kv_budget_bytes_per_gpu)),
        ("KV per token", f"{plan.kv_bytes_per_token:,} B (model), {plan.kv_bytes_per_token_per_gpu:,} B per GPU"),
        (
            "state per sequence",
            f"{plan.state_bytes_per_sequence:,} B (model), {plan.state_bytes_per_sequence_per_gpu:,} B per GPU",
        ),
        ("max tokens in KV", "unbounded" if plan.max_tokens_in_kv is None else f"{plan.max_tokens_in_kv:,}"),
        ("max sequences at context", f"{plan.max_sequences_at_context:,}"),
        ("reason", plan.reason),
    ]
    rows += [("would fit instead", alt) for alt in plan.alternatives]
    for what, value in rows:
        summary.add_row(what, value)
    console.print(summary)

    classes = Table(title="weights by tensor class")
    classes.add_column("class")
    classes.add_column("bytes", justify="right")
    for name, nbytes in sorted(plan.weight_bytes_by_class.items(), key=lambda kv: -kv[1]):
        classes.add_row(name, f"{nbytes / 1e9:,.2f} GB")
    console.print(classes)

    tried = Table(title="layouts considered")
    for column in ("nodes", "layout", "weights/GPU", "KV budget/GPU", "verdict"):
        tried.add_column(column)
    for c in plan.candidates:
        tried.add_row(str(c.nodes), c.layout, _gib(c.weight_bytes_per_gpu), _gib(c.kv_budget_bytes_per_gpu), c.reason)
    console.print(tried)
