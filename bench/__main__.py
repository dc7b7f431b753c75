"""``make bench``: run every benchmark module in bench/ (each as ``python -m bench.<name>``).

Benchmarks print ratios against a baseline measured in the same run, never absolute pass/fail
timings: the machine is shared and small, so only ratios mean anything.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def main() -> int:
    here = Path(__file__).resolve().parent
    names = sorted(p.stem for p in here.glob("*.py") if not p.stem.startswith("_"))
    failed = []
    for name in names:
        print(f"\n=== bench.{name} ===", flush=True)
        if subprocess.call([sys.executable, "-m", f"bench.{name}"], cwd=here.parent) != 0:
            failed.append(name)
    if failed:
        print(f"\nfailed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
