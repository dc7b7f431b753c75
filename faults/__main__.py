"""``python -m faults``: run the kill matrix, print it, and (``--docs``) keep it in docs/faults.md."""

from __future__ import annotations

import argparse
import platform
import signal
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from faults.matrix import POINTS, SIGNALS, Row, chains, run_matrix
from faults.processes import cwd, descendants
from faults.table import table, write_docs
from faults.world import ROOT, world


def _cmdline(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:200]
    except OSError:
        return "?"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m faults", description=__doc__)
    parser.add_argument("--points", default="all",
                        help="kill points, comma-separated (names as in docs/faults.md), or 'all'")
    parser.add_argument("--signals", default="SIGKILL,SIGTERM", help="SIGKILL, SIGTERM or both (comma-separated)")
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "faults", help="logs, specs and reports")
    parser.add_argument("--docs", action="store_true", help="write the table into docs/faults.md")
    args = parser.parse_args(argv)
    names = {p.name: p for p in POINTS}
    wanted = list(names) if args.points == "all" else [n.strip() for n in args.points.split(",")]
    signals = [s.strip().upper() for s in args.signals.split(",")]
    unknown = [n for n in wanted if n not in names] + [s for s in signals if s not in SIGNALS]
    if unknown:
        parser.error(f"unknown {', '.join(map(repr, unknown))}; points: {', '.join(names)}; signals: SIGKILL, SIGTERM")
    # SIGTERM stops the matrix as Ctrl-C does, so the sandbox, the server and the workers are stopped too.
    signal.signal(signal.SIGTERM, lambda signum, frame: signal.raise_signal(signal.SIGINT))
    started = time.monotonic()
    total = len(wanted) * len(signals)

    def keep(rows: list[Row]) -> None:  # a matrix stopped early still leaves its rows in the docs
        if args.docs and len(rows) < total:
            write_docs(ROOT / "docs" / "faults.md", f"{table(rows)}\n(in progress: {len(rows)} of {total} rows)")

    with world(args.out / "logs") as w:
        rows = run_matrix(w, chains([names[n] for n in wanted], signals), args.out,
                          progress=lambda line: print(line, flush=True), on_row=keep)
        # Every chain tore its campaign down: nothing should run as a local process of the sandbox's kubelet.
        # (the sandbox's own children, its OpenAI stand-in, run in the checkout; pods run in their own folders)
        left = [p for p in descendants(w.state()["pid"]) if cwd(p[0]) != str(ROOT)]
        left_running = len(left)
        for pid, _ in left:
            print(f"left running under the sandbox: {pid} {_cmdline(pid)} (in {cwd(pid)})", flush=True)
    minutes = (time.monotonic() - started) / 60
    text = table(rows)
    green = sum(row.green for row in rows)
    summary = (f"{green} of {len(rows)} rows green, {minutes:.1f} min on {platform.machine()} "
               f"({datetime.now(UTC):%Y-%m-%d}); processes of the sandbox's kubelet left after the last row: "
               f"{left_running}")
    print(text)
    print(summary)
    if args.docs:
        write_docs(ROOT / "docs" / "faults.md", f"{text}\n{summary}.")
    return 0 if green == len(rows) and left_running == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
