"""The stage_weights flow: pin → plan → fetch + verify → (re-shard) → publish to S3 with a manifest.

Everything is keyed by (repo, sha): Hub metadata tasks are cached on it, downloaded and re-sharded
files carry "verified" markers under ``<staging_dir>/<repo>/<sha>/``, and S3 uploads are skipped when
the object's stored SHA256 already matches. A re-run with the same sha therefore downloads and uploads
nothing. Per-node staging Jobs (``capserve.core.weights.render_staging_job``) are applied by the
cluster stage from the published manifest. What goes where is decided in ``capserve.core.weights.assembly``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from prefect import flow, get_run_logger

from capserve.campaign.run_names import stage_run_name
from capserve.core.locations import BucketLocation
from capserve.core.spec import CampaignSpec
from capserve.core.weights.assembly import (
    LocalFile,
    Staged,
    StagingDirs,
    assemble_manifest,
    aux_files,
    check_headers_match,
    index_file,
    index_path,
    model_repo,
    weights_layout,
    weights_result,
    whole_file_indexes,
    whole_files,
)
from capserve.core.weights.assembly import staged as staged_file
from capserve.core.weights.listing import RepoListing
from capserve.core.weights.manifest import s3_base
from capserve.core.weights.placement import Layout
from capserve.core.weights.plan import WeightsPlan, plan_weights
from capserve.core.weights.reshard import plan_reshard
from capserve.core.weights.result import WeightsResult
from capserve.core.weights.safetensors import SafetensorsHeader, TensorEntry
from capserve.core.weights.settings import WeightsSettings
from capserve.tasks.model_config import config_digest_of
from capserve.tasks.parallel import map_bounded
from capserve.tasks.settings import settings_for
from capserve.tasks.weights.artifacts import publish_plan
from capserve.tasks.weights.fetch import fetch_checkpoint
from capserve.tasks.weights.hub import hub_connection, list_repo_files, read_hub_headers, resolve_revision
from capserve.tasks.weights.reshard import read_local_headers, write_document, write_output
from capserve.tasks.weights.s3 import publish_checkpoint


@flow(name="stage-weights", flow_run_name=stage_run_name("stage-weights"))
def stage_weights(
    spec: CampaignSpec,
    *,
    nodes: int,
    expert_parallel: int,
    staging_dir: Path,
    hub_endpoint: str | None = None,
    hub_block: str | None = None,
    settings: WeightsSettings | None = None,
    bucket: BucketLocation | None = None,
) -> WeightsResult:
    """Stage ``spec.model`` for ``nodes`` nodes with ``expert_parallel`` EP ranks; return the report section.

    ``hub_endpoint`` overrides the Hub URL (the sandbox passes its local Hub); ``hub_block`` names a saved
    ``HubCredentials`` block holding the token (and endpoint) for gated repos; ``bucket`` is where the
    weights go (default: the spec's ``weights.s3_bucket`` in its region).
    """
    settings = settings or settings_for(spec).weights
    layout = weights_layout(nodes, expert_parallel)
    repo = model_repo(spec.model)
    where = bucket or BucketLocation(bucket=spec.weights.s3_bucket, region=spec.weights_region)
    conn = hub_connection(hub_endpoint, hub_block, settings.hub_timeout_seconds)

    sha = resolve_revision(conn, repo, spec.model.revision)
    hub_headers = read_hub_headers(conn, repo, sha)
    plan = plan_weights_for(list_repo_files(conn, repo, sha), hub_headers, layout, spec.campaign_id)
    dirs = StagingDirs(root=staging_dir, repo=repo, sha=sha, layout_id=layout.layout_id)
    fetched = fetch_checkpoint(conn, repo, sha, plan.files, dirs.source, settings, campaign=spec.campaign_id)
    local_headers = read_local_headers(dirs.source, sorted(hub_headers))
    check_headers_match(f"{repo}@{sha}", local_headers, hub_headers)

    reshard = plan.reshard and settings.allow_reshard
    staged = _staged_files(plan, dirs, fetched, local_headers, hub_headers, reshard=reshard, settings=settings)
    manifest = assemble_manifest(repo, sha, layout, [s for s, _ in staged])
    base = s3_base(spec.weights.s3_prefix, repo, sha)
    uploaded = publish_checkpoint(where, spec.campaign_id, base, manifest, staged, settings.publish_parallelism)
    return weights_result(
        plan, manifest, fetched,
        downloaded_bytes=sum(f.downloaded_bytes for f in fetched.values()), uploaded_bytes=uploaded,
        resharded=reshard, bucket=where.bucket, prefix=spec.weights.s3_prefix,
        config_digest=config_digest_of(dirs.source / "config.json") if "config.json" in fetched else None,
    )


def plan_weights_for(
    listing: RepoListing, hub_headers: dict[str, list[TensorEntry]], layout: Layout, campaign: str
) -> WeightsPlan:
    """Plan which bytes each node needs, and show the plan in the UI (under the campaign's key)."""
    plan = plan_weights(listing, hub_headers, layout)
    publish_plan(plan, campaign)
    get_run_logger().info(
        "%s@%s: %d files, %d bytes; per node %s (naive %d); re-shard %s", plan.repo, plan.revision_sha[:12],
        len(plan.files), plan.bytes_total, plan.bytes_per_node, plan.bytes_naive_per_node, plan.reshard,
    )
    return plan


def _staged_files(
    plan: WeightsPlan,
    dirs: StagingDirs,
    fetched: Mapping[str, LocalFile],
    local_headers: dict[str, SafetensorsHeader],
    hub_headers: dict[str, list[TensorEntry]],
    *,
    reshard: bool,
    settings: WeightsSettings,
) -> list[Staged]:
    """What is published: the aux files, the weight files (re-sharded per rank, or whole) and each node's index."""
    staged = aux_files(plan, fetched, dirs)
    if reshard:
        rplan = plan_reshard(
            local_headers, plan.layout, num_experts=plan.num_experts, max_file_bytes=settings.max_output_file_bytes
        )
        calls = [{"output": o, "source_dir": dirs.source, "out_dir": dirs.layout} for o in rplan.outputs]
        written = map_bounded(write_output, calls, settings.fetch_parallelism)
        for output, file in zip(rplan.outputs, written, strict=True):
            nodes = () if output.node is None else (output.node,)
            key = f"{dirs.layout_id}/{output.path}"
            staged.append((staged_file(file, key=key, nodes=nodes), dirs.layout / output.path))
        indexes = [rplan.node_index(n) for n in range(plan.layout.nodes)]
    else:
        staged += whole_files(plan, hub_headers, fetched, dirs)
        indexes = whole_file_indexes(plan, hub_headers)
    for node, index in enumerate(indexes):
        document = write_document(dirs.layout, index_path(node), json.dumps(index, indent=1).encode())
        staged.append(index_file(document, node=node, dirs=dirs))
    return staged


__all__ = ["WeightsPlan", "WeightsResult", "stage_weights"]
