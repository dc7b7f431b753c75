"""The ``capserve`` command. Each subcommand lives in its own module and registers itself here."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Each module exposes ``register(subparsers)``; the parser it adds sets ``func(args) -> int``.
# Modules are imported by name so that one command loads only its own module: `capserve plan`
# must not pay for the campaign's imports (and never imports Prefect or a cloud SDK).
SUBCOMMANDS = {
    "plan": "capserve.cli.plan",
    "up": "capserve.cli.up",
    "down": "capserve.cli.down",
    "eval": "capserve.cli.eval",
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The ``capserve`` parser with every subcommand, or only ``only`` (a known command name)."""
    parser = argparse.ArgumentParser(
        prog="capserve",
        description="GPU reservation → evaluated vLLM endpoint → nothing left running.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module in SUBCOMMANDS.items():
        if only is None or name == only:
            importlib.import_module(module).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[0] if argv and argv[0] in SUBCOMMANDS else None
    args = build_parser(command).parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
