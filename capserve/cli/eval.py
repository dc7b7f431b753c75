"""``capserve eval --url URL --model NAME``: smoke, quality and load tests of any OpenAI-compatible endpoint.

Exit codes: 0 verdict pass; 1 fail; 2 bad arguments (nothing was sent to the endpoint); 3 invalid
(the load client could not drive or measure the load, or --timeout cut the evaluation short;
nothing was blamed on the endpoint); see ``capserve --help``. With ``--json`` stdout carries
exactly one JSON object: the same ``evaluation`` object report.json stores.

The API key is read from the variable named by ``--api-key-env``; credentials in the URL
(``http://user:password@host``) are used for HTTP Basic authentication. Neither is ever printed,
written or stored by Prefect. Every call has a timeout from the spec, and ``--timeout`` bounds the
whole evaluation.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from capserve.cli import arg_types
from capserve.cli.exit_codes import ExitCode
from capserve.cli.inputs import api_key_option, endpoint_option, load_option, writable_dir
from capserve.core.catalog import get_model
from capserve.core.catalog.models import Thinking
from capserve.core.errors import SpecError, UnknownCatalogEntryError
from capserve.core.evaluation.spec import EvaluationSpec, LoadSpec
from capserve.core.spec import describe_errors, read_spec_bytes
from capserve.core.spec_checks import non_finite_problems
from capserve.core.strict_yaml import Document, parse_document

_EXIT = {"pass": ExitCode.OK, "fail": ExitCode.FAILED, "invalid": ExitCode.INVALID}


def register(subparsers: Any) -> None:
    """Add the ``eval`` subcommand to the ``capserve`` parser."""
    load = LoadSpec()
    parser = subparsers.add_parser(
        "eval",
        help="Evaluate an OpenAI-compatible endpoint (smoke, quality, load) and print a verdict.",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--url", required=True, help="Base URL, e.g. http://127.0.0.1:8000 (without /v1).")
    parser.add_argument(
        "--model", required=True, type=arg_types.served_name, help="Served model name as /v1/models lists it."
    )
    parser.add_argument(
        "--api-key-env", default=None, metavar="NAME", help="Name of the environment variable holding the API key."
    )
    parser.add_argument(
        "--catalog-model",
        default=None,
        metavar="ID",
        help="Catalog model the endpoint serves (e.g. kimi-k3): the quality profile handles its thinking as the "
        "catalog says (docs/evaluation.md §6.4). Without it, thinking seen in the smoke stream counts.",
    )
    parser.add_argument("--profile", choices=["smoke", "quality", "load", "all"], default="all")
    parser.add_argument("--json", action="store_true", help="Print the evaluation object as JSON on stdout.")
    parser.add_argument(
        "--spec", type=Path, default=None, help="EvaluationSpec as a JSON or YAML file (options below win)."
    )
    parser.add_argument("--out-dir", type=Path, default=None, help="Where results and plots go (default ./out/eval-*).")
    parser.add_argument(
        "--timeout",
        type=arg_types.seconds,
        default=None,
        metavar="SECONDS",
        help=f"Overall deadline of the evaluation (default {EvaluationSpec().timeout_s:g} s, the spec's timeout_s).",
    )
    parser.add_argument(
        "--concurrency",
        type=arg_types.levels,
        default=None,
        help=f"Closed-loop levels (default {','.join(map(str, load.concurrency_levels))}).",
    )
    parser.add_argument(
        "--rates", type=arg_types.rates, default=None, help="Poisson request rates/s, '' for none (default 8)."
    )
    for flag, meaning, default in (
        ("--requests-per-stream", "Requests per level = concurrency × this", load.requests_per_stream),
        ("--min-requests", "Minimum requests per run", load.min_requests),
        ("--open-loop-requests", "Requests per Poisson run", load.open_loop_requests),
        ("--prompt-tokens", "Prompt length", load.prompt.tokens),
        ("--output-tokens", "Output length", load.output.tokens),
    ):
        parser.add_argument(flag, type=arg_types.positive_integer, default=None, help=f"{meaning} (default {default}).")
    parser.add_argument("--range-ratio", type=float, default=None, help="Sample lengths within ±ratio (default fixed).")
    parser.add_argument(
        "--processes",
        type=arg_types.positive_integer,
        default=None,
        help="Load-generator processes (default 1, at most one per core).",
    )
    parser.add_argument("--golden", default=None, help="Golden JSONL file instead of the packaged set.")
    parser.add_argument(
        "--quality-max-items",
        type=arg_types.positive_integer,
        default=None,
        help="Score only the first N golden items.",
    )
    parser.set_defaults(func=run)


def _read_spec_file(path: Path) -> tuple[dict[str, Any], Document | None]:
    document = parse_document(read_spec_bytes(path), str(path))
    if not isinstance(document.data, dict):
        kind = "a list" if isinstance(document.data, list) else "a single value"
        raise SpecError(
            f"{path}: an evaluation spec is a mapping of fields (smoke, quality, load, gates, …), not {kind}"
        )
    return document.data, document


def build_spec(args: argparse.Namespace) -> EvaluationSpec:
    """The spec from --spec with the command-line overrides applied (validated by the strict models)."""
    base, document = _read_spec_file(args.spec) if args.spec else ({}, None)
    if not isinstance(base.get("load", {}), dict) or not isinstance(base.get("quality", {}), dict):
        raise SpecError(f"{args.spec}: 'load' and 'quality' must be mappings of fields")
    load = base.setdefault("load", {})
    overrides = {
        "concurrency_levels": args.concurrency,
        "request_rates": args.rates,
        "requests_per_stream": args.requests_per_stream,
        "min_requests": args.min_requests,
        "open_loop_requests": args.open_loop_requests,
        "processes": args.processes,
    }
    load.update({k: v for k, v in overrides.items() if v is not None})
    for key, tokens in (("prompt", args.prompt_tokens), ("output", args.output_tokens)):
        if tokens is not None or args.range_ratio is not None:
            length = load.setdefault(key, {"tokens": getattr(LoadSpec(), key).tokens})
            if tokens is not None:
                length["tokens"] = tokens
            if args.range_ratio is not None:
                length["range_ratio"] = args.range_ratio
    quality = base.setdefault("quality", {})
    if args.golden is not None:
        quality["golden_path"] = args.golden
    if args.quality_max_items is not None:
        quality["max_items"] = args.quality_max_items
    if args.timeout is not None:
        base["timeout_s"] = args.timeout
    source = str(args.spec) if args.spec else "evaluation options"
    non_finite = non_finite_problems(base)
    if non_finite:
        raise SpecError(f"{source}: invalid evaluation spec\n" + "\n".join(f"  {p}" for p in non_finite))
    try:
        return EvaluationSpec.model_validate(base)
    except ValidationError as exc:
        problems = describe_errors(exc, EvaluationSpec, document)
        raise SpecError(f"{source}: invalid evaluation spec\n{problems}") from None


def run(args: argparse.Namespace) -> int:
    # Every input is checked before anything is sent to the endpoint or Prefect starts.
    url, basic_auth_env = endpoint_option(args.url, "--url")
    api_key_option(args.api_key_env, basic_auth_env)
    spec = build_spec(args)
    profiles = ("smoke", "quality", "load") if args.profile == "all" else (args.profile,)
    if "load" in profiles:
        load_option(spec.load, "--concurrency/--rates")
    if "quality" in profiles and spec.quality.golden_path:
        _check_golden(spec.quality.golden_path)
    thinking = _catalog_thinking(args.catalog_model)
    out_dir = writable_dir(args.out_dir or Path("out") / f"eval-{time.strftime('%Y%m%d-%H%M%S')}", "--out-dir")

    from capserve.cli.signals import defer_prefect_handler_in_finalizers
    from capserve.flows.evaluate import evaluate_endpoint  # Prefect import is slow; only when running

    defer_prefect_handler_in_finalizers()  # a flow run in this process must not lose a SIGTERM either
    from capserve.runtime.watchdog import watch

    watch()  # killed outright, the command leaves no Prefect temporary server or load generator running

    result = evaluate_endpoint(
        url,
        args.model,
        spec,
        profiles=profiles,
        api_key_env=args.api_key_env,
        basic_auth_env=basic_auth_env,
        out_dir=out_dir,
        thinking=thinking,
    )
    if args.json:
        print(json.dumps(result.report_section(), indent=2))
    else:
        print(result.markdown())
        print(f"Saved {out_dir / 'evaluation.json'}")
    return _EXIT[result.verdict]


def _catalog_thinking(name: str | None) -> Thinking | None:
    if name is None:
        return None
    try:
        return get_model(name).thinking
    except UnknownCatalogEntryError as exc:
        raise SpecError(f"--catalog-model: {exc}") from None


def _check_golden(path: str) -> None:
    from capserve.core.evaluation.quality import golden_from_file

    try:
        golden_from_file(path)
    except SpecError as exc:
        raise SpecError(f"--golden: {exc}") from None
