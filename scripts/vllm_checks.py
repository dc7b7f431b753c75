"""Everything the tests ask of the installed vLLM, from one import of it (importing vllm takes ~10 CPU s on a
2-core machine; the tests used to pay it four times). Its stdin is one JSON object, ``{"argument_lists": [[...],
...], "stream_plans": {name: plan}}``; its stdout one JSON object:

- ``flags``: the snapshot of `vllm serve`'s flags (scripts/snapshot_vllm_flags.py), as it would be written now;
- ``rules``: the snapshot of vLLM's cross-flag rules (scripts/snapshot_vllm_rules.py), as it would be written now;
- ``verdicts``: for each argument list, what vLLM's own parser and the checks `vllm serve` runs before loading
  anything (``validate_parsed_serve_args``) say of it;
- ``stream``: for each stream plan, the chunks vLLM's protocol classes build (scripts/vllm_stream_reference.py).

Run it with the vLLM venv's Python (it imports vllm, nothing of capserve):

    .venv-vllm/bin/python scripts/vllm_checks.py < questions.json    # one JSON object on stdout

tests/vllm_answers.py runs it once per test run for tests/sandbox/test_vllm_flags.py and
tests/eval/test_sandbox_stream_format.py, which check each part in a test of its own.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from typing import Any

# This script's folder is sys.path[0]: the scripts beside it.
import snapshot_vllm_flags
import snapshot_vllm_rules
import vllm_stream_reference


def verdicts(argument_lists: list[list[str]]) -> list[dict[str, Any]]:
    """vLLM's answer to each list: its error (argparse's message, or the check's exception), or what it parsed."""
    from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    answers: list[dict[str, Any]] = []
    for args in argument_lists:
        said = io.StringIO()
        try:
            with contextlib.redirect_stderr(said):
                parsed = parser.parse_args(args)
            validate_parsed_serve_args(parsed)
        except SystemExit as exit_:  # argparse refuses with usage and an `error:` line on stderr, exit code 2
            error = (said.getvalue().strip().splitlines() or [""])[-1]
            answers.append({"args": args, "error": f"exit {exit_.code}: {error}"})
        except Exception as exc:  # noqa: BLE001 - vLLM's own error is the datum
            answers.append({"args": args, "error": f"{type(exc).__name__}: {exc}"})
        else:
            answers.append({"args": args, "error": None, "headless": bool(parsed.headless), "api_key": parsed.api_key})
    return answers


def main() -> int:
    asked = json.load(sys.stdin)
    out = {
        "flags": snapshot_vllm_flags.snapshot(),
        "rules": snapshot_vllm_rules.snapshot(),
        "verdicts": verdicts(asked["argument_lists"]),
        "stream": {name: vllm_stream_reference.chunks(plan) for name, plan in asked["stream_plans"].items()},
    }
    sys.stdout.write(json.dumps(out, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
