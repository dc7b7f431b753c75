"""The modelled Kimi K3 block: the time model's timeline, cold and warm, from NVMe and from FSx.

  .venv/bin/python -m bench.timeline_bench [--block-hours 24 168]

Not a speed benchmark: it prints what ``capserve.core.timeline`` predicts for K3 on one p6-b300 (the
plan's own bytes), phase by phase, and the utilisation (serving ÷ paid) each variant leaves on a block,
with the ratio of each variant's time-to-serving to the cold NVMe baseline computed in the same run.
The figures and their sources: docs/timeline.md.
"""

from __future__ import annotations

import argparse
import sys

from capserve.core.catalog import get_instance_type, get_model
from capserve.core.planner.plan import plan_serving
from capserve.core.timeline import BlockPlan, BlockTimeline, Storage, predict_block

INSTANCE = "p6-b300.48xlarge"
VARIANTS: tuple[tuple[Storage, bool], ...] = (("nvme", False), ("nvme", True), ("fsx", False), ("fsx", True))


def k3_block(storage: Storage) -> BlockPlan:
    plan = plan_serving(get_model("kimi-k3"), get_instance_type(INSTANCE))
    return BlockPlan(
        instance_type=INSTANCE,
        nodes=plan.nodes,
        model_bytes=plan.weight_bytes,
        node_bytes=plan.weight_bytes_per_gpu * plan.gpus_per_node,
        shape=plan.compile_shape,
        storage=storage,
    )


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:7.1f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--block-hours", type=float, nargs="+", default=[24.0, 168.0])
    args = parser.parse_args()

    blocks = {storage: k3_block(storage) for storage in ("nvme", "fsx")}
    first = args.block_hours[0]
    timelines: dict[str, BlockTimeline] = {
        f"{storage} {'warm' if warm else 'cold'}": predict_block(blocks[storage], block_hours=first, warm=warm)
        for storage, warm in VARIANTS
    }
    names = list(timelines)
    baseline = timelines[names[0]]
    print(f"Kimi K3 on 1 x {INSTANCE}: {baseline.plan.model_bytes / 1e12:.2f} TB of model, "
          f"{baseline.plan.node_bytes / 1e12:.2f} TB per node (minutes per phase)")  # fmt: skip
    print(f"{'phase':28}" + "".join(f"{name:>12}" for name in names))
    for i, phase in enumerate(baseline.phases):
        mark = " (before)" if phase.before_block else ""
        print(f"{phase.name + mark:28}" + "".join(f"{_minutes(t.phases[i].seconds):>12}" for t in timelines.values()))
    print(f"{'block start -> serving':28}" + "".join(f"{_minutes(t.to_ready_s):>12}" for t in timelines.values()))
    ratios = "".join(f"{t.to_ready_s / baseline.to_ready_s:>12.2f}" for t in timelines.values())
    print(f"{'ratio to nvme cold':28}" + ratios)
    for hours in args.block_hours:
        row = "".join(
            f"{predict_block(blocks[s], block_hours=hours, warm=w).utilisation:>12.1%}" for s, w in VARIANTS
        )
        print(f"{f'utilisation, {hours:g} h block':28}" + row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
