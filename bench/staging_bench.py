"""S3 → node staging benchmark (not a test): the staging Job's copy, old and new, side by side in one run.

  .venv/bin/python -m bench.staging_bench [--files 32] [--mb 64]

One set of random files is put in the local S3 stand-in (moto, in this process) and copied onto local disk:

1. **old**: the staging Job's script before the copy tool (8 files at once, each ``aws s3 cp`` then ``sha256sum``),
   its ``aws s3 cp`` played by a process per file running boto3's transfer manager with the AWS CLI's defaults
   (10 requests of 8 MiB ranges: the CLI's classic transfer client is the same s3transfer);
2. **new**: the copy tool the Job runs now (``capserve/tasks/weights/s3_copy_tool.py``, as ``python3 -c``);

and, measured in the same run on the same bytes, the two ceilings the copy cannot beat:

- **disk**: the same bytes written in 16 MiB writes (no fsync; neither copy syncs either);
- **S3 stand-in**: parallel ranged GETs of the same objects, read and dropped, with the tool's processes and
  requests.

The S3 stand-in GET and the new copy run twice, alternately, and the faster of each counts: the machine is
shared and its load moves. moto answers a ranged GET by slicing the whole object, so the stand-in's rate falls
as objects grow; every copy here pays that alike. Ratios, never pass/fail timings. The line to reach is
new ≥ 90 % of min(disk, S3 stand-in) (docs/weights.md §7). Where the stand-in, the disk writes and the
hashing share a few cores, each byte costs all three: the bench also prints that shared-CPU bound.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import boto3
from capserve_sandbox.aws import moto_sandbox

from capserve.core.weights.settings import WeightsSettings
from capserve.tasks.weights.node_staging import copy_tool_source

BUCKET = "capserve-bench-staging"
BASE = "models/org/bench/" + "0" * 40
MIB = 1 << 20

# The staging Job's script as it was before the copy tool (core/weights/staging_job.py at that commit).
OLD_COPY_ONE = r"""set -eu
sha="$1"; key="$2"; dest="$3"
mkdir -p "$(dirname "$dest")"
if [ -f "$dest" ] && printf '%s  %s\n' "$sha" "$dest" | sha256sum -c --status; then exit 0; fi
rm -f "$dest.partial"
aws s3 cp --only-show-errors "s3://$BUCKET/$BASE/$key" "$dest.partial"
if ! printf '%s  %s\n' "$sha" "$dest.partial" | sha256sum -c --status; then
  echo "sha256 mismatch for $dest (s3://$BUCKET/$BASE/$key)" >&2; rm -f "$dest.partial"; exit 1
fi
mv "$dest.partial" "$dest"
"""
OLD_SCRIPT = r"""set -eu
mkdir -p "$TARGET" && cd "$TARGET"
rm -f "$TARGET/$NODE_MARKER"
printf '%s\n' "$FILES" | xargs -P "$PARALLEL" -L 1 sh -c "$COPY_ONE" copy
printf '%s\n' "$NODE_INDEX" > "$TARGET/$NODE_MARKER"
"""

# `aws s3 cp --only-show-errors s3://bucket/key dest` as the AWS CLI's classic client does it: s3transfer's
# download with max_concurrent_requests 10 and multipart_chunksize 8 MiB (the CLI's S3 configuration defaults).
AWS_CP = r"""
import sys
import boto3
from boto3.s3.transfer import TransferConfig

bucket, _, key = sys.argv[-2].removeprefix("s3://").partition("/")
config = TransferConfig(max_concurrency=10, multipart_chunksize=8 << 20, multipart_threshold=8 << 20)
boto3.client("s3").download_file(bucket, key, sys.argv[-1], Config=config)
"""

# Parallel ranged GETs read and dropped: what the S3 stand-in serves at the tool's concurrency.
GET_ONLY = r"""
import json, os, sys, threading
from concurrent.futures import ThreadPoolExecutor
import boto3
from botocore.config import Config

files, part, requests, processes = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
ranges = [(key, first, min(first + part, size) - 1) for key, size in files for first in range(0, size, part)]
shares = [ranges[i::processes] for i in range(processes)]
children = []
for share in shares:
    pid = os.fork()
    if pid == 0:
        s3 = boto3.session.Session().client("s3", config=Config(max_pool_connections=requests))
        def get(r):
            body = s3.get_object(Bucket=os.environ["BUCKET"], Key=r[0], Range=f"bytes={r[1]}-{r[2]}")["Body"]
            while body.read(1 << 20):
                pass
        with ThreadPoolExecutor(max(1, requests // processes)) as pool:
            list(pool.map(get, share))
        os._exit(0)
    children.append(pid)
sys.exit(max(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in children))
"""


def timed(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, env=env, check=True)
    return time.perf_counter() - started


def disk_write_s(target: Path, sizes: list[int], block: bytes) -> float:
    started = time.perf_counter()
    for index, size in enumerate(sizes):
        with open(target / f"w{index}", "wb") as out:
            for _ in range(size // len(block)):
                out.write(block)
            out.write(block[: size % len(block)])
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=32, help="Files in the set.")
    parser.add_argument("--mb", type=int, default=64, help="MiB per file (32 × 64 MiB = 2 GiB by default).")
    parser.add_argument("--requests", type=int, default=None, help="Ranged GETs in flight (default: the Job's).")
    parser.add_argument("--processes", type=int, default=None, help="Processes (default: the Job's, at most cores).")
    args = parser.parse_args()
    settings = WeightsSettings()
    cores = os.cpu_count() or 1
    processes = args.processes or min(settings.staging_processes, cores)
    requests = args.requests or settings.staging_requests
    size = args.mb * MIB
    with tempfile.TemporaryDirectory(prefix="capserve-bench-staging-", dir=os.environ.get("BENCH_DIR")) as tmp, \
            moto_sandbox() as aws:
        root = Path(tmp)
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": aws.region})
        listing, block = [], os.urandom(16 * MIB)
        for index in range(args.files):
            body = os.urandom(size)
            key = f"model-{index:05d}-of-{args.files:05d}.safetensors"
            s3.put_object(Bucket=BUCKET, Key=f"{BASE}/{key}", Body=body)
            listing.append([hashlib.sha256(body).hexdigest(), size, key, key])
            del body
        total = size * args.files
        env = {**os.environ, "BUCKET": BUCKET, "BASE": BASE, "NODE_INDEX": "0", "NODE_MARKER": ".capserve-node"}
        print(f"{args.files} files × {args.mb} MiB = {total / 1e9:.2f} GB; {cores} cores; tool: {requests} requests "
              f"of {settings.staging_part_bytes // MIB} MiB, {settings.staging_parallelism} files at once, "
              f"{processes} processes", flush=True)

        started = time.perf_counter()
        for _ in range(8):
            hashlib.sha256(block).digest()
        sha256 = time.perf_counter() - started  # 128 MiB on one core
        disk = disk_write_s(_fresh(root / "disk"), [size] * args.files, block)
        shutil.rmtree(root / "disk")
        get_argv = [sys.executable, "-c", GET_ONLY, json.dumps([[f"{BASE}/{k}", s] for _, s, k, _ in listing]),
                    str(settings.staging_part_bytes), str(requests), str(processes)]
        new_env = {**env, "TARGET": str(root / "new"), "FILES": json.dumps(listing),
                   "PART_BYTES": str(settings.staging_part_bytes), "REQUESTS": str(requests),
                   "FILES_AT_ONCE": str(settings.staging_parallelism), "PROCESSES": str(processes)}
        get_only, new = float("inf"), float("inf")
        for _ in range(2):
            get_only = min(get_only, timed(get_argv, env))
            new = min(new, timed([sys.executable, "-c", copy_tool_source()], new_env))
            copied = sorted(p.name for p in (root / "new").iterdir())
            assert len(copied) == args.files + 1, copied  # every file, and the node marker
            shutil.rmtree(root / "new")

        bin_dir = _fresh(root / "bin")
        (bin_dir / "aws_cp.py").write_text(AWS_CP, encoding="utf-8")
        aws = bin_dir / "aws"  # one process per command, as the CLI
        aws.write_text(f'#!/bin/sh\nexec {sys.executable} {bin_dir / "aws_cp.py"} "$@"\n', encoding="utf-8")
        aws.chmod(0o755)
        old_env = {**env, "PATH": f"{bin_dir}:{env.get('PATH', '/usr/bin:/bin')}", "TARGET": str(root / "old"),
                   "PARALLEL": "8", "COPY_ONE": OLD_COPY_ONE,
                   "FILES": "\n".join(f"{sha} {key} {dest}" for sha, _, key, dest in listing)}
        old = timed(["sh", "-c", OLD_SCRIPT], old_env)
        assert len(list((root / "old").iterdir())) == args.files + 1
        shutil.rmtree(root / "old")


    rate = {name: total / seconds for name, seconds in
            (("disk write", disk), ("S3 stand-in GET", get_only), ("old Job script", old), ("copy tool", new))}
    print("| what | GB/s |\n|---|---|")
    for name, value in rate.items():
        print(f"| {name} | {value / 1e9:.3f} |")
    rate["sha256, one core"] = 8 * 16 * MIB / sha256
    print(f"| sha256, one core | {rate['sha256, one core'] / 1e9:.3f} |")
    ceiling = min(rate["disk write"], rate["S3 stand-in GET"])
    share = rate["copy tool"] / ceiling
    print(f"copy tool / old Job script: {rate['copy tool'] / rate['old Job script']:.2f}×")
    print(f"copy tool / disk write: {rate['copy tool'] / rate['disk write']:.0%}; "
          f"/ S3 stand-in GET: {rate['copy tool'] / rate['S3 stand-in GET']:.0%}")
    print(f"copy tool / min(disk, S3 stand-in): {share:.0%} ({'meets' if share >= 0.9 else 'below'} the 90 % line)")
    # Here the stand-in, the writes and the hashing share the same cores: each byte costs all three.
    shared = 1 / (1 / rate["disk write"] + 1 / rate["S3 stand-in GET"] + 1 / rate["sha256, one core"])
    print(f"copy tool / shared-CPU bound 1 ÷ (1/disk + 1/S3 + 1/sha256) = {shared / 1e9:.3f} GB/s: "
          f"{rate['copy tool'] / shared:.0%}")


def _fresh(path: Path) -> Path:
    path.mkdir(parents=True)
    return path


if __name__ == "__main__":
    main()
