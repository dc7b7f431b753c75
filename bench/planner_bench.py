"""Planner speed: Kimi K3 over every layout on every catalog instance type, and `capserve plan`'s start-up.

  .venv/bin/python -m bench.planner_bench [--repeat 5]

1. ``plan_serving`` for K3 on each catalog instance type (every layout up to the default 8 nodes,
   plus the what-would-fit search where nothing fits), the median of a few runs, as a share of the
   one-second budget of an interactive command (docs/planner.md), and per layout evaluated.
2. ``capserve plan kimi-k3 ... --json`` wall time beside ``python -c pass`` in the same run, as a
   ratio; and whether the plan run loaded Prefect or a cloud SDK (it must not).

Absolute times depend on this shared 2-core machine; the ratios are what to compare between runs.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

from capserve.core.catalog import get_model
from capserve.core.catalog.hardware import INSTANCE_TYPES
from capserve.core.errors import SpecError
from capserve.core.planner.plan import plan_serving

BUDGET_S = 1.0
HEAVY = ("prefect", "boto3", "botocore", "kubernetes", "huggingface_hub")


def plan_everything() -> tuple[float, int, int]:
    """Seconds to plan K3 on every catalog instance type, layouts evaluated, instance types planned."""
    k3 = get_model("kimi-k3")
    evaluated = planned = 0
    start = time.perf_counter()
    for instance in INSTANCE_TYPES.values():
        try:
            evaluated += len(plan_serving(k3, instance).candidates)
            planned += 1
        except SpecError:  # an instance whose GPUs cannot hold K3's dense part is refused up front
            pass
    return time.perf_counter() - start, evaluated, planned


def wall(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    plan_everything()  # warm the import and the per-model byte tables once
    runs = [plan_everything() for _ in range(args.repeat)]
    seconds = statistics.median(s for s, _, _ in runs)
    _, layouts, planned = runs[0]
    print(f"K3 on {planned} of {len(INSTANCE_TYPES)} instance types (the rest refused up front): ", end="")
    print(f"{layouts} layouts in {seconds * 1000:.0f} ms")
    print(f"  share of the {BUDGET_S:.0f} s budget: {seconds / BUDGET_S:.2f}; ", end="")
    print(f"{seconds / layouts * 1e6:.0f} us per layout")

    # The console script pip installed next to this interpreter: what a user runs.
    capserve = str(Path(sys.executable).with_name("capserve"))
    cli = [capserve, "plan", "kimi-k3", "--instance-type", "p6-b300.48xlarge", "--json"]
    baseline = [sys.executable, "-c", "pass"]
    wall(cli)  # warm the file cache
    plan_s = statistics.median(wall(cli) for _ in range(args.repeat))
    pass_s = statistics.median(wall(baseline) for _ in range(args.repeat))
    print(f"capserve plan: {plan_s * 1000:.0f} ms; python -c pass: {pass_s * 1000:.0f} ms; ", end="")
    print(f"ratio {plan_s / pass_s:.1f}x")

    probe = (
        "import contextlib, io, sys\n"
        "from capserve.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['plan', 'kimi-k3', '--instance-type', 'p6-b300.48xlarge', '--json'])\n"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip()
    print(f"  modules loaded by the plan run among {', '.join(HEAVY)}: {loaded or 'none'}")
    return 0 if not loaded and seconds < BUDGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
