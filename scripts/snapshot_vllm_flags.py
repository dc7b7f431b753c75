"""Write a snapshot of `vllm serve`'s command-line flags, read from vLLM's own argument parser.

Run it with the vLLM venv's Python (it imports vllm, nothing of capserve):

    .venv-vllm/bin/python scripts/snapshot_vllm_flags.py   # rewrite the committed snapshot

(scripts/vllm_checks.py builds it too, for the test that compares, in the same vLLM import as its other checks.)

Preflight checks the campaign's final `vllm serve` command line against this snapshot before anything is
bought, and the sandbox's kubelet checks a vLLM pod's arguments against the same one (capserve/core/vllm,
docs/serving.md §10): every flag with its spellings, how many values it takes, how a value is converted and, where the
parser fixes them, the allowed choices. Converters are named, not pickled: capserve/core/vllm/parser.py
re-implements each named one (int, float, JSON, human-readable integers, dataclass configs with their field names).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

# One snapshot per vLLM version, in the product (capserve/core/vllm): preflight and the sandbox kubelet read it.
SNAPSHOTS = Path(__file__).resolve().parents[1] / "capserve" / "core" / "vllm" / "data"


def _closure(function: Any) -> list[Any]:
    return [cell.cell_contents for cell in (getattr(function, "__closure__", None) or ())]


def describe_type(converter: Any) -> dict[str, Any]:
    """A converter as data: {"kind": ...} plus what the kind needs."""
    if converter is None:
        return {"kind": "str"}
    name = getattr(converter, "__name__", type(converter).__name__)
    if converter in (str, int, float):
        return {"kind": converter.__name__}
    if name == "_optional_type":  # vllm.engine.arg_utils.optional_type: "" and "None" mean None
        return {"kind": "optional", "inner": describe_type(_closure(converter)[0])}
    if name == "_parse_type":  # vllm.engine.arg_utils.parse_type: the inner converter, ValueError reworded
        return {"kind": "parse", "inner": describe_type(_closure(converter)[0])}
    if name == "loads":
        return {"kind": "json"}
    if name == "union_dict_and_str":
        return {"kind": "dict_or_str"}
    if name == "parse_dataclass":
        cls = converter.__defaults__[0]
        fields = sorted(f.name for f in dataclasses.fields(cls)) if dataclasses.is_dataclass(cls) else []
        return {"kind": "dataclass", "name": cls.__name__, "fields": fields}
    if name in ("human_readable_int", "human_readable_int_or_auto"):
        return {"kind": name}
    if name == "<lambda>":
        try:
            normalised = converter("Ab-C")
        except Exception:  # noqa: BLE001 - a lambda that cannot take a word is taken as "any value"
            return {"kind": "any"}
        if normalised == "ab_c":
            return {"kind": "lower_underscore"}
        return {"kind": "any"}
    return {"kind": "any", "name": name}


def describe_action(action: argparse.Action) -> dict[str, Any] | None:
    kind = type(action).__name__
    if isinstance(action, argparse._HelpAction):
        return None
    if isinstance(action, argparse.BooleanOptionalAction):
        shape = "boolean_optional"
    elif isinstance(action, argparse._StoreTrueAction | argparse._StoreFalseAction | argparse._StoreConstAction):
        shape = "flag"
    elif isinstance(action, argparse._AppendAction):
        shape = "append"
    else:
        shape = "store"  # _StoreAction and vLLM's own store-like actions (LoRA modules, log config)
    choices = None
    if action.choices is not None:
        choices = sorted(str(choice) for choice in action.choices)
    entry: dict[str, Any] = {
        "flags": list(action.option_strings),
        "dest": action.dest,
        "shape": shape,
        "nargs": action.nargs,
        "type": describe_type(action.type),
        "choices": choices,
    }
    if action.nargs == "?" and action.option_strings:
        entry["bare_ok"] = True  # the flag alone is allowed (takes its const)
    if kind not in ("_StoreAction", "BooleanOptionalAction", "_StoreTrueAction", "_AppendAction"):
        entry["action_class"] = kind
    return entry


def snapshot() -> dict[str, Any]:
    import vllm
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    options = [entry for action in parser._actions if (entry := describe_action(action)) is not None]
    options.sort(key=lambda entry: (entry["flags"][:1] or [""])[0])
    return {
        "generated_by": "scripts/snapshot_vllm_flags.py",
        "vllm_version": vllm.__version__,
        "prog": "vllm serve",
        "options": options,
    }


def main() -> int:
    import vllm

    target = SNAPSHOTS / vllm.__version__ / "serve_flags.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(snapshot(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {target}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
