"""Write a snapshot of vLLM's own cross-flag rules, found by running vLLM's own checks.

Run it with the vLLM venv's Python (it imports vllm, nothing of capserve):

    .venv-vllm/bin/python scripts/snapshot_vllm_rules.py   # rewrite the committed snapshot

(scripts/vllm_checks.py builds it too, for the test that compares, in the same vLLM import as its other checks.)

Nothing here is retyped from vLLM's source; every rule is what vLLM's code answers:

- ``startup``: ``validate_parsed_serve_args`` (vllm/entrypoints/launchers/cli_args.py), the checks
  ``vllm serve`` runs before loading anything, called on the parser's defaults with each on/off flag
  turned on. A flag that fails alone gets the options whose setting makes the check pass ("requires");
  two flags that pass alone but fail together are a conflict. The error is vLLM's, with its type.
- ``tool_parsers`` / ``reasoning_parsers``: the names registered with vLLM's parser managers, and the
  error ``ParserManager.get_tool_parser`` raises at startup for a name that is not registered.
- ``chat_tool_choice_auto``: when a chat request's ``tool_choice: "auto"`` is refused. Which flags
  the server needs comes from calling ``ParserManager.get_tool_parser`` with each combination; the
  message is the literal ``OnlineRenderer.render_chat`` returns (read from its syntax tree), and the
  HTTP body is what vLLM's ``create_error_response`` builds from it.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import itertools
import json
import sys
import textwrap
from pathlib import Path
from typing import Any

# One snapshot per vLLM version, in the product (capserve/core/vllm): preflight and the sandbox kubelet read it.
SNAPSHOTS = Path(__file__).resolve().parents[1] / "capserve" / "core" / "vllm" / "data"
SAMPLE_PARSER = "hermes"  # any registered tool parser: only whether one is named matters to the checks


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _sample(action: argparse.Action, default: Any) -> Any:
    """A non-default value of the option, the kind a user would pass."""
    if isinstance(action, argparse._StoreTrueAction | argparse.BooleanOptionalAction):
        return True
    if action.choices:
        return next(c for c in action.choices if c != default)
    if isinstance(default, bool):
        return not default
    if isinstance(default, int):
        return default + 1
    if action.dest == "tool_call_parser":
        return SAMPLE_PARSER
    try:
        return action.type("2") if callable(action.type) else "x"
    except Exception:  # noqa: BLE001 - not a number-like option: any word
        return "x"


def startup_rules() -> dict[str, Any]:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    base = vars(parser.parse_args(["model"]))
    actions = [a for a in parser._actions if a.option_strings and not isinstance(a, argparse._HelpAction)]
    switches = [a for a in actions if isinstance(a, argparse._StoreTrueAction | argparse.BooleanOptionalAction)]

    def check(**values: Any) -> str | None:
        try:
            validate_parsed_serve_args(argparse.Namespace(**{**base, **values}))
        except Exception as exc:  # noqa: BLE001 - vLLM's own error is the datum
            return _error(exc)
        return None

    rules: list[dict[str, Any]] = []
    alone_fails: set[str] = set()
    not_modelled: list[dict[str, Any]] = []
    for switch in switches:
        error = check(**{switch.dest: True})
        if error is None:
            continue
        alone_fails.add(switch.dest)
        clearing = [
            {"dest": other.dest, "flag": other.option_strings[0]}
            for other in actions
            if other.dest != switch.dest
            and check(**{switch.dest: True, other.dest: _sample(other, base.get(other.dest))}) is None
        ]
        entry = {"when": switch.dest, "flag": switch.option_strings[0], "error": error}
        if clearing:
            rules.append({**entry, "requires_one_of": clearing})
        else:  # no single option satisfies it (it needs several values at once): listed, not checked
            not_modelled.append(entry)
    for first, second in itertools.combinations(switches, 2):
        if first.dest in alone_fails or second.dest in alone_fails:
            continue
        error = check(**{first.dest: True, second.dest: True})
        if error is not None:
            rules.append(
                {
                    "when": first.dest,
                    "flag": first.option_strings[0],
                    "conflicts_with": {"dest": second.dest, "flag": second.option_strings[0]},
                    "error": error,
                }
            )
    def order(rule: dict[str, Any]) -> tuple[str, str]:
        return rule["when"], json.dumps(rule, sort_keys=True)

    return {"rules": sorted(rules, key=order), "not_modelled": sorted(not_modelled, key=order)}


def parser_names() -> dict[str, Any]:
    from vllm.parser.parser_manager import ParserManager
    from vllm.reasoning import ReasoningParserManager
    from vllm.tool_parsers import ToolParserManager

    unknown = "capserve-unregistered-parser"
    try:
        ParserManager.get_tool_parser(unknown, enable_auto_tools=True)
    except Exception as exc:  # noqa: BLE001 - vLLM's own error is the datum
        unknown_tool = _error(exc)
    else:
        raise SystemExit("vLLM accepted an unregistered tool parser: the rule changed, read parser_manager.py")
    try:
        ParserManager.get_reasoning_parser(unknown)
    except Exception as exc:  # noqa: BLE001 - vLLM's own error is the datum
        unknown_reasoning = _error(exc)
    else:
        raise SystemExit("vLLM accepted an unregistered reasoning parser: read parser_manager.py")
    return {
        "tool_parsers": sorted(ToolParserManager.list_registered()),
        "reasoning_parsers": sorted(ReasoningParserManager.list_registered()),
        # The name in the message is the one given; the sandbox puts the pod's own name in its place.
        "unknown_tool_parser_error": unknown_tool.replace(unknown, "{name}"),
        "unknown_reasoning_parser_error": unknown_reasoning.replace(unknown, "{name}"),
    }


def _auto_message(function: Any) -> str:
    """The message ``render_chat`` returns for tool_choice "auto" on a server without auto tool choice."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    for node in ast.walk(tree):
        if not isinstance(node, ast.If):
            continue
        test = ast.unparse(node.test)
        if "tool_choice == 'auto'" in test and "enable_auto_tools" in test:
            for call in ast.walk(node):
                if (
                    isinstance(call, ast.Call)
                    and ast.unparse(call.func).endswith("create_error_response")
                    and isinstance(call.args[0], ast.Constant)
                ):
                    return str(call.args[0].value)
    raise SystemExit("no tool_choice 'auto' refusal found in OnlineRenderer.render_chat: read online_renderer.py")


def chat_tool_choice_auto() -> dict[str, Any]:
    from vllm.entrypoints.serve.exception_handling.error_response import create_error_response
    from vllm.parser.parser_manager import ParserManager
    from vllm.renderers.online_renderer import OnlineRenderer

    # render_chat refuses "auto" when it has no tool parser; get_tool_parser says when there is one.
    served = [
        {"enable_auto_tool_choice": auto, "tool_call_parser": name}
        for auto, name in itertools.product((False, True), (None, SAMPLE_PARSER))
        if ParserManager.get_tool_parser(name, enable_auto_tools=auto) is not None
    ]
    if served != [{"enable_auto_tool_choice": True, "tool_call_parser": SAMPLE_PARSER}]:
        raise SystemExit(f"get_tool_parser's rule changed ({served}): read vllm/parser/parser_manager.py")
    message = _auto_message(OnlineRenderer.render_chat)
    response = create_error_response(message)
    return {
        "needs": ["enable_auto_tool_choice", "tool_call_parser"],
        "status": int(response.error.code),
        "body": response.model_dump(mode="json"),
    }


def snapshot() -> dict[str, Any]:
    import vllm

    return {
        "generated_by": "scripts/snapshot_vllm_rules.py",
        "vllm_version": vllm.__version__,
        "startup": startup_rules(),
        **parser_names(),
        "chat_tool_choice_auto": chat_tool_choice_auto(),
    }


def main() -> int:
    import vllm

    target = SNAPSHOTS / vllm.__version__ / "serve_rules.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(snapshot(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {target}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
