"""The ``capserve`` command. Each subcommand lives in its own module and registers itself here."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from capserve.cli import down, eval, plan, up

# Each module exposes ``register(subparsers)``; the parser it adds sets ``func(args) -> int``.
SUBCOMMANDS = [plan, up, down, eval]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="capserve",
        description="GPU reservation → evaluated vLLM endpoint → nothing left running.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in SUBCOMMANDS:
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
