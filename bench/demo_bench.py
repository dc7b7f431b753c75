"""Where `make demo`'s wall time goes (not a test): the demo played once, its wall seconds per act.

  .venv/bin/python -m bench.demo_bench [--log FILE]

Runs what `make demo` runs (`capserve up examples/kimi-k3-sandbox.yaml --sandbox`, into a temporary folder) and
reads its console: every line is stamped with the wall time and the block's time, so the stretch between two
milestones of the story is what that act cost on this machine, and the block column shows the block's minutes
the act took (the sandbox's clock: docs/sandbox.md §8). `--log` reads a saved console output instead of running.

Figures, never assertions: the machine is shared and its load moves the wall seconds (not the block's minutes).
The README's "How long things take" quotes the total.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "kimi-k3-sandbox.yaml"

# A console line: "03:16:52  block +23:26  drain-k3-demo: drained: …" (capserve/cli/progress_view.py).
LINE = re.compile(r"^(?P<wall>\d\d:\d\d:\d\d)\s+block (?P<block>[+-]?[\d:]+|-?\d+-\d+ \d\d:\d\d)\s+(?P<text>.*)$")

# The story's milestones in order; each act is the stretch from the previous milestone to its own.
MILESTONES: tuple[tuple[str, str], ...] = (
    ("server up, deployments registered", r"campaign run .* created"),
    ("campaign run: plan, purchase, weights to S3", r"^campaign-.*: Completed"),
    ("prepare + serve (bring-up, copy, vLLM start, gate)", r"^serve-.*: Completed"),
    ("to the 1st Hub watch's find", r"^hub-watcher-.*published a new revision"),
    ("1st watch -> its redeploy runs (automation)", r"^redeploy-.*: Running"),
    ("1st redeploy (stage, roll out, gate)", r"^redeploy-.*: Completed"),
    ("to the 2nd Hub watch's find", r"^hub-watcher-.*published a new revision"),
    ("2nd watch -> its redeploy runs (automation)", r"^redeploy-.*: Running"),
    ("2nd redeploy (stage, roll out, gate, rollback)", r"^redeploy-.*: Completed"),
    ("drain", r"^drain-.*: Completed"),
    ("teardown", r"^teardown-.*: Completed"),
)


@dataclass(frozen=True)
class Stamp:
    wall: datetime
    block: str
    text: str


def stamps(lines: Iterable[str], day: datetime) -> list[Stamp]:
    """The stamped lines, their wall times on ``day`` (a line earlier than the one before it is past midnight)."""
    found: list[Stamp] = []
    for line in lines:
        match = LINE.match(line.strip())
        if match is None:
            continue
        wall = datetime.combine(day.date(), datetime.strptime(match["wall"], "%H:%M:%S").time())
        while found and wall < found[-1].wall - timedelta(hours=12):
            wall += timedelta(days=1)
        found.append(Stamp(wall, match["block"], match["text"]))
    return found


def acts(found: list[Stamp], started: datetime) -> list[tuple[str, Stamp | None, float | None]]:
    """(act, the milestone's line, wall seconds since the previous milestone) for each milestone, in order. A
    pattern's n-th milestone is its n-th line: runs side by side print in either order (a watch's find may come
    a second before the previous redeploy's end)."""
    rows: list[tuple[str, Stamp | None, float | None]] = []
    previous = started
    seen: dict[str, int] = {}
    for name, pattern in MILESTONES:
        nth = seen[pattern] = seen.get(pattern, 0) + 1
        hits = [stamp for stamp in found if re.search(pattern, stamp.text)]
        if len(hits) < nth:
            rows.append((name, None, None))
            continue
        stamp = hits[nth - 1]
        rows.append((name, stamp, (stamp.wall - previous).total_seconds()))
        previous = stamp.wall
    return rows


def play() -> tuple[list[str], datetime, float]:
    """Run the demo once: its console lines, its start (wall, to the second) and its total wall seconds."""
    with tempfile.TemporaryDirectory(prefix="capserve-demo-bench-") as out:
        started, clock = datetime.now().replace(microsecond=0), time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "capserve.cli", "up", str(EXAMPLE), "--sandbox", "--out", out],
            capture_output=True, text=True, check=False,
        )
        total = time.monotonic() - clock
    print(f"exit {done.returncode}")
    return (done.stdout + done.stderr).splitlines(), started, total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--log", type=Path, help="a saved console output of `make demo` to read instead of a run")
    args = parser.parse_args()
    if args.log is not None:
        lines = args.log.read_text().splitlines()
        found = stamps(lines, datetime.now())
        if not found:
            print(f"no stamped line in {args.log}")
            return 1
        started, total = found[0].wall, None
    else:
        lines, started, total = play()
        found = stamps(lines, started)
    print(f"{'act':52}{'wall s':>8}{'block at end':>14}")
    for name, stamp, seconds in acts(found, started):
        shown = "missing" if seconds is None else f"{seconds:8.0f}"
        print(f"{name:52}{shown:>8}{stamp.block if stamp else '':>14}")
    if found:
        print(f"{'first to last stamped line':52}{(found[-1].wall - found[0].wall).total_seconds():>8.0f}")
    if total is not None:
        print(f"{'total (the command, install not counted)':52}{total:8.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
