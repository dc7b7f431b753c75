"""Weights stage benchmark (not a test): throughput as ratios to `cp` of the same bytes on the same disk.

  .venv/bin/python bench/weights_bench.py [--mb 128]

1. fetch + sha256 verify from the local Hub vs `cp` of the source directory;
2. EP re-shard (raw byte copies) vs `cp`;
3. K3 bytes per node planned vs naive at 1, 2 and 4 nodes (EP = 8 per node), from K3's geometry.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("HF_HUB_DISABLE_XET", "1")
os.environ.setdefault("PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW", "ignore")

from capserve_sandbox.hub import K3, TINY_K3, CheckpointGeometry, local_hub, write_checkpoint
from capserve_sandbox.hub.checkpoint import virtual_tensors_by_file

from capserve.core.weights.listing import RepoFile, RepoListing
from capserve.core.weights.placement import Layout
from capserve.core.weights.plan import plan_weights
from capserve.core.weights.reshard import plan_reshard
from capserve.tasks.weights.fetch import fetch_file
from capserve.tasks.weights.hub import HubConnection, list_repo_files, resolve_revision
from capserve.tasks.weights.reshard import read_local_headers, write_output


def timed_cp(src: Path, dst: Path) -> float:
    start = time.perf_counter()
    subprocess.run(["cp", "-r", str(src), str(dst)], check=True)
    subprocess.run(["sync"], check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mb", type=int, default=128, help="Approximate checkpoint size in MB.")
    args = parser.parse_args()
    # Scale tiny-k3 by experts (~65 KB per expert over its 5 MoE layers) to reach the requested size.
    # tiny-k3 with more experts: the checkpoint grows to about --mb while keeping K3's layout.
    tiny = TINY_K3.model
    scaled = tiny.model_copy(update={"moe": tiny.moe.model_copy(update={"n_routed_experts": max(8, args.mb * 15)})})
    geometry = CheckpointGeometry.from_model(scaled, repo=TINY_K3.repo, shard_bytes=16 << 20)
    with tempfile.TemporaryDirectory(prefix="capserve-bench-", dir=os.environ.get("BENCH_DIR")) as tmp:
        root = Path(tmp)
        source = write_checkpoint(geometry, root / "repo")
        size = sum(p.stat().st_size for p in source.iterdir() if p.is_file())
        baseline = timed_cp(source, root / "cp1")
        with local_hub({geometry.repo: source}) as url:
            conn = HubConnection(endpoint=url)
            sha = resolve_revision.fn(conn, geometry.repo, "main")
            listing = list_repo_files.fn(conn, geometry.repo, sha)
            start = time.perf_counter()
            with ThreadPoolExecutor(2) as pool:
                list(pool.map(lambda f: fetch_file.fn(conn, geometry.repo, sha, f, root / "fetched"), listing.files))
            subprocess.run(["sync"], check=True)
            fetch = time.perf_counter() - start
        shards = sorted(p.name for p in source.glob("*.safetensors"))
        headers = read_local_headers.fn(source, shards)
        plan = plan_reshard(headers, Layout(nodes=2, expert_parallel=4), num_experts=geometry.num_experts,
                            max_file_bytes=5 * 1024**3)
        start = time.perf_counter()
        for output in plan.outputs:
            write_output.fn(output, source, root / "resharded")
        subprocess.run(["sync"], check=True)
        reshard = time.perf_counter() - start
        shutil.rmtree(root / "cp1")
    print(f"checkpoint {size / 1e6:.0f} MB; cp baseline {size / baseline / 1e6:.0f} MB/s")
    print(f"fetch+verify (local Hub, 2 threads): {baseline / fetch:.2f}x cp throughput")
    print(f"re-shard EP4 over 2 nodes (copy_file_range + sha256): {baseline / reshard:.2f}x cp throughput")

    tensors = virtual_tensors_by_file(K3)
    listing = RepoListing(repo=K3.repo, revision_sha="0" * 40, files=tuple(
        RepoFile(path=p, size=8 + sum(t.nbytes for t in ts), sha256="0" * 64) for p, ts in sorted(tensors.items())))
    for nodes in (1, 2, 4):
        k3 = plan_weights(listing, tensors, Layout(nodes=nodes, expert_parallel=8 * nodes))
        worst = max(k3.bytes_per_node)
        print(f"K3 {nodes} node(s) EP{8 * nodes}: {worst / 1e9:.0f} GB per node vs naive "
              f"{k3.bytes_naive_per_node / 1e9:.0f} GB ({worst / k3.bytes_naive_per_node:.2f}x)")


if __name__ == "__main__":
    main()
