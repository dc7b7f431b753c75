"""``capserve init [PATH] [--aws]``: write a commented campaign spec to start from.

The specs are the package's own (``capserve/examples/``, package data), so a wheel install has them: the sandbox
variant plays the whole campaign on this machine (``capserve up PATH --sandbox``), the AWS one buys a real block.
An existing file is never replaced.
"""

from __future__ import annotations

import argparse
from importlib.resources import files
from pathlib import Path
from typing import Any

from capserve.cli.exit_codes import ExitCode
from capserve.core.errors import SpecError

VARIANTS = {False: "sandbox.yaml", True: "aws.yaml"}


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "init",
        help="write a commented campaign spec to start from (sandbox, or --aws)",
        description="Write a commented campaign spec to PATH: the sandbox variant (the whole campaign against "
        "local stand-ins) or, with --aws, the variant that buys a real Capacity Block. Never replaces a file.",
    )
    parser.add_argument("path", nargs="?", default="capserve.yaml", type=Path,
                        help="where to write the spec (default: capserve.yaml)")
    parser.add_argument("--aws", action="store_true", help="the AWS variant (default: the sandbox variant)")
    parser.set_defaults(func=run)


def example(aws: bool) -> str:
    """The spec text ``capserve init`` writes (package data of ``capserve.examples``)."""
    return files("capserve.examples").joinpath(VARIANTS[aws]).read_text(encoding="utf-8")


def run(args: argparse.Namespace) -> int:
    path: Path = args.path
    if path.exists():
        raise SpecError(f"PATH: {path} exists; give another path or remove it (capserve init never replaces a file)")
    if not path.parent.is_dir():
        raise SpecError(f"PATH: the folder {path.parent} does not exist; create it or give another path")
    with path.open("x", encoding="utf-8") as out:  # "x": a file created meanwhile is not replaced either
        out.write(example(args.aws))
    if args.aws:
        print(f"wrote {path} (AWS). Edit name, regions and weights.s3_bucket, then: capserve plan kimi-k3 "
              f"--instance-type p6-b300.48xlarge; capserve rehearse {path}; capserve up {path}")
    else:
        print(f"wrote {path} (sandbox). Run it on this machine: capserve up {path} --sandbox")
    return ExitCode.OK
