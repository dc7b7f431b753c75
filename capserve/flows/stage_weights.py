"""The stage_weights flow: pin → plan → fetch + verify → (re-shard) → publish to S3 with a manifest.

Everything is keyed by (repo, sha): Hub metadata tasks are cached on it, downloaded and re-sharded
files carry "verified" markers under ``<staging_dir>/<repo>/<sha>/``, and S3 uploads are skipped when
the object's stored SHA256 already matches. A re-run with the same sha therefore downloads and uploads
nothing. Per-node staging Jobs (``capserve.core.weights.render_staging_job``) are applied by the
cluster stage from the published manifest.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from prefect import Task, flow, get_run_logger
from prefect.futures import PrefectFuture, as_completed
from pydantic import SecretStr

from capserve.blocks.hub import HUB_ENDPOINT, HubCredentials
from capserve.core.catalog import get_model
from capserve.core.errors import PermanentError, SpecError
from capserve.core.spec import CampaignSpec
from capserve.core.weights.manifest import StagedFile, WeightsManifest, manifest_key, s3_base
from capserve.core.weights.placement import Layout
from capserve.core.weights.plan import INDEX_NAME, WeightsPlan, node_index_whole_files, plan_weights
from capserve.core.weights.reshard import plan_reshard
from capserve.core.weights.result import WeightsResult
from capserve.core.weights.settings import WeightsSettings
from capserve.tasks.weights.artifacts import Progress, publish_plan
from capserve.tasks.weights.fetch import FetchedFile, fetch_file, sweep_incomplete
from capserve.tasks.weights.hub import HubConnection, list_repo_files, read_hub_headers, resolve_revision
from capserve.tasks.weights.reshard import read_local_headers, write_document, write_output
from capserve.tasks.weights.s3 import ensure_bucket, publish_document, publish_file

R = TypeVar("R")


@flow(name="stage-weights")
def stage_weights(
    spec: CampaignSpec,
    *,
    nodes: int,
    expert_parallel: int,
    staging_dir: Path,
    hub_endpoint: str | None = None,
    hub_block: str | None = None,
    settings: WeightsSettings | None = None,
) -> WeightsResult:
    """Stage ``spec.model`` for ``nodes`` nodes with ``expert_parallel`` EP ranks; return the report section.

    ``hub_endpoint`` overrides the Hub URL (the sandbox passes its local Hub); ``hub_block`` names a saved
    ``HubCredentials`` block holding the token (and endpoint) for gated repos.
    """
    settings = settings or WeightsSettings()
    logger = get_run_logger()
    conn = _connection(hub_endpoint, hub_block, settings)
    try:
        layout = Layout(nodes=nodes, expert_parallel=expert_parallel)
    except ValueError as exc:
        raise SpecError(f"weights layout: {exc}") from None
    repo = spec.model.repo or get_model(spec.model.catalog or "").hf_repo
    region = spec.weights_region

    sha = resolve_revision(conn, repo, spec.model.revision)
    listing = list_repo_files(conn, repo, sha)
    hub_headers = read_hub_headers(conn, repo, sha)
    plan = plan_weights(listing, hub_headers, layout)
    publish_plan(plan)
    logger.info("%s@%s: %d files, %d bytes; per node %s (naive %d); re-shard %s", repo, sha[:12], len(plan.files),
                plan.bytes_total, plan.bytes_per_node, plan.bytes_naive_per_node, plan.reshard)

    commit_dir = staging_dir / repo / sha
    source_dir = commit_dir / "source"
    sweep_incomplete(source_dir)
    progress = Progress(f"weights-download-{repo}", plan.bytes_total, f"{repo}@{sha[:12]}: fetch + sha256 verify")
    fetch = fetch_file.with_options(retries=settings.fetch_retries,
                                    retry_delay_seconds=settings.fetch_retry_delay_seconds)
    try:
        fetched = _bounded(
            fetch,
            [{"conn": conn, "repo": repo, "sha": sha, "file": f, "source_dir": source_dir,
              "etag_timeout": settings.etag_timeout_seconds} for f in plan.files],
            settings.fetch_parallelism,
            on_done=lambda r: progress.advance(r.size),
        )
    finally:
        progress.close()
    verified = {f.path: f for f in fetched}

    local_headers = read_local_headers(source_dir, sorted(hub_headers))
    for path, header in local_headers.items():
        if {(t.name, t.begin, t.end) for t in header.tensors} != {(t.name, t.begin, t.end) for t in hub_headers[path]}:
            raise PermanentError(f"{repo}@{sha}/{path}: the downloaded header differs from the Hub's header metadata")

    reshard = plan.reshard and settings.allow_reshard
    staged: list[tuple[StagedFile, Path]] = [
        (_staged(verified[p], key=p, nodes=()), source_dir / p) for p in plan.aux_files
    ]
    layout_dir = commit_dir / layout.layout_id
    if reshard:
        rplan = plan_reshard(local_headers, layout, num_experts=plan.num_experts,
                             max_file_bytes=settings.max_output_file_bytes)
        outputs = _bounded(write_output, [{"output": o, "source_dir": source_dir, "out_dir": layout_dir}
                                          for o in rplan.outputs], settings.fetch_parallelism)
        for output, written in zip(rplan.outputs, outputs, strict=True):
            nodes_of = () if output.node is None else (output.node,)
            staged.append((_staged(written, key=f"{layout.layout_id}/{output.path}", nodes=nodes_of),
                           layout_dir / output.path))
        indexes = [rplan.node_index(n) for n in range(layout.nodes)]
    else:
        for path in sorted(hub_headers):
            holders = tuple(n.node for n in plan.node_plans if path in n.weight_files)
            if holders:
                staged.append((_staged(verified[path], key=path, nodes=_all_or(holders, layout.nodes)),
                               source_dir / path))
        indexes = [node_index_whole_files(plan, hub_headers, n) for n in range(layout.nodes)]
    for node, index in enumerate(indexes):
        rel = f"node-{node}/{INDEX_NAME}"
        written = write_document(layout_dir, rel, json.dumps(index, indent=1).encode())
        staged.append((_staged(written, key=f"{layout.layout_id}/{rel}", nodes=(node,), dest=INDEX_NAME),
                       layout_dir / rel))

    manifest = WeightsManifest(repo=repo, revision_sha=sha, layout_id=layout.layout_id, nodes=layout.nodes,
                               files=tuple(sorted((s for s, _ in staged), key=lambda s: s.key)))
    bucket, base = spec.weights.s3_bucket, s3_base(spec.weights.s3_prefix, repo, sha)
    ensure_bucket(bucket, region, spec.campaign_id)
    uploaded = _bounded(publish_file, [{"bucket": bucket, "key": f"{base}/{s.key}", "path": local, "sha256": s.sha256,
                                        "region": region} for s, local in staged], settings.publish_parallelism)
    publish_document(bucket, f"{base}/{manifest_key(layout.layout_id)}",
                     manifest.model_dump_json(indent=1).encode(), region)

    return WeightsResult(
        repo=repo,
        revision_sha=sha,
        files=len(fetched),
        bytes_total=plan.bytes_total,
        bytes_per_node=[manifest.bytes_for_node(n) for n in range(layout.nodes)],
        bytes_naive_per_node=plan.bytes_naive_per_node,
        verified=all(f.sha256 is None or verified[f.path].sha256 == f.sha256 for f in plan.files),
        layout_id=layout.layout_id,
        resharded=reshard,
        s3_uri=f"s3://{bucket}/{base}/",
        manifest_uri=f"s3://{bucket}/{base}/{manifest_key(layout.layout_id)}",
        downloaded_bytes=sum(f.downloaded_bytes for f in fetched),
        uploaded_bytes=sum(uploaded),
    )


def _connection(hub_endpoint: str | None, hub_block: str | None, settings: WeightsSettings) -> HubConnection:
    credentials = HubCredentials.load(hub_block) if hub_block else HubCredentials()
    assert isinstance(credentials, HubCredentials)
    endpoint = hub_endpoint or credentials.endpoint or HUB_ENDPOINT
    # Without a block, the token may come from the environment, as huggingface_hub's own tools read it.
    token = credentials.token or (SecretStr(os.environ["HF_TOKEN"]) if os.environ.get("HF_TOKEN") else None)
    return HubConnection(endpoint=endpoint, token=token, timeout_seconds=settings.hub_timeout_seconds)


def _staged(f: FetchedFile, *, key: str, nodes: tuple[int, ...], dest: str | None = None) -> StagedFile:
    return StagedFile(key=key, dest=dest or f.path, size=f.size,
                      sha256=f.sha256, nodes=nodes)


def _all_or(holders: tuple[int, ...], nodes: int) -> tuple[int, ...]:
    return () if len(holders) == nodes else holders


def _bounded(task: Task[..., R], calls: Sequence[dict[str, Any]], limit: int,
             on_done: Callable[[R], None] | None = None) -> list[R]:
    """Submit ``task`` for each kwargs dict with at most ``limit`` running; results in call order."""
    results: dict[int, R] = {}
    pending: dict[PrefectFuture[R], int] = {}
    queue = iter(enumerate(calls))

    def fill() -> None:
        for index, kwargs in queue:
            pending[task.submit(**kwargs)] = index
            if len(pending) >= limit:
                return

    fill()
    while pending:
        done = next(as_completed(list(pending)))
        result = done.result()
        results[pending.pop(done)] = result
        if on_done is not None:
            on_done(result)
        fill()
    return [results[i] for i in range(len(calls))]


__all__ = ["WeightsPlan", "WeightsResult", "stage_weights"]
