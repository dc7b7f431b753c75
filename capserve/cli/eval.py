"""``capserve eval --url URL --model NAME``: smoke, quality and load tests of any OpenAI-compatible endpoint.

Exit codes: 0 verdict pass; 1 fail; 3 invalid (the load client was saturated, nothing failed);
2 bad arguments. With ``--json`` stdout carries exactly one JSON object: the same ``evaluation``
object report.json stores. The API key is read from the variable named by ``--api-key-env`` and is
never printed or written.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from capserve.core.evaluation import EvaluationSpec, LoadSpec

_EXIT = {"pass": 0, "fail": 1, "invalid": 3}


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None


def _floats(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of numbers") from None


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
    parser.add_argument("--model", required=True, help="Served model name as /v1/models lists it.")
    parser.add_argument("--api-key-env", default=None, help="Name of the environment variable holding the API key.")
    parser.add_argument("--profile", choices=["smoke", "quality", "load", "all"], default="all")
    parser.add_argument("--json", action="store_true", help="Print the evaluation object as JSON on stdout.")
    parser.add_argument("--spec", type=Path, default=None, help="EvaluationSpec as a JSON file (options below win).")
    parser.add_argument("--out-dir", type=Path, default=None, help="Where results and plots go (default ./out/eval-*).")
    parser.add_argument(
        "--concurrency",
        type=_ints,
        default=None,
        help=f"Closed-loop levels (default {','.join(map(str, load.concurrency_levels))}).",
    )
    parser.add_argument("--rates", type=_floats, default=None, help="Poisson request rates/s, '' for none (default 8).")
    parser.add_argument(
        "--requests-per-stream",
        type=int,
        default=None,
        help=f"Requests per level = concurrency × this (default {load.requests_per_stream}).",
    )
    parser.add_argument(
        "--min-requests", type=int, default=None, help=f"Minimum requests per run (default {load.min_requests})."
    )
    parser.add_argument(
        "--open-loop-requests",
        type=int,
        default=None,
        help=f"Requests per Poisson run (default {load.open_loop_requests}).",
    )
    parser.add_argument(
        "--prompt-tokens", type=int, default=None, help=f"Prompt length (default {load.prompt.tokens})."
    )
    parser.add_argument(
        "--output-tokens", type=int, default=None, help=f"Output length (default {load.output.tokens})."
    )
    parser.add_argument("--range-ratio", type=float, default=None, help="Sample lengths within ±ratio (default fixed).")
    parser.add_argument("--processes", type=int, default=None, help="Load-generator processes (default 1).")
    parser.add_argument("--golden", default=None, help="Golden JSONL file instead of the packaged set.")
    parser.add_argument("--quality-max-items", type=int, default=None, help="Score only the first N golden items.")
    parser.set_defaults(func=run)


def build_spec(args: argparse.Namespace) -> EvaluationSpec:
    """The spec from --spec with the command-line overrides applied (validated by the pydantic models)."""
    base = json.loads(args.spec.read_text(encoding="utf-8")) if args.spec else {}
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
    return EvaluationSpec.model_validate(base)


def run(args: argparse.Namespace) -> int:
    try:
        spec = build_spec(args)
    except (ValidationError, ValueError, OSError) as exc:
        print(f"capserve eval: invalid evaluation options: {exc}", file=sys.stderr)
        return 2
    from capserve.flows.evaluate import PROFILES, evaluate_endpoint  # Prefect import is slow; only when running

    profiles = PROFILES if args.profile == "all" else (args.profile,)
    out_dir = args.out_dir or Path("out") / f"eval-{time.strftime('%Y%m%d-%H%M%S')}"
    result = evaluate_endpoint(
        args.url, args.model, spec, profiles=profiles, api_key_env=args.api_key_env, out_dir=out_dir
    )
    if args.json:
        print(json.dumps(result.report_section(), indent=2))
    else:
        print(result.markdown())
        print(f"Saved {out_dir / 'evaluation.json'}")
    return _EXIT[result.verdict]
