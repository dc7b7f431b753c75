"""Assembling what the weights stage publishes: which local file goes to which key and which nodes, the
per-node index files, the manifest and the stage's result. Pure: the flow fetches and writes, this decides.

Files staged for a commit live under ``<staging_dir>/<repo>/<sha>/``: the Hub's files in ``source/``,
re-sharded files and per-node indexes in ``<layout_id>/``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from capserve.core.catalog import get_model
from capserve.core.errors import PermanentError, SpecError
from capserve.core.spec import ModelRef
from capserve.core.weights.manifest import StagedFile, WeightsManifest, manifest_key, s3_base
from capserve.core.weights.placement import Layout
from capserve.core.weights.plan import INDEX_NAME, WeightsPlan, node_index_whole_files
from capserve.core.weights.result import WeightsResult
from capserve.core.weights.safetensors import SafetensorsHeader, TensorEntry


class LocalFile(Protocol):
    """A verified file on this host: its path under a staging directory, size and sha256."""

    @property
    def path(self) -> str: ...

    @property
    def size(self) -> int: ...

    @property
    def sha256(self) -> str: ...


Staged = tuple[StagedFile, Path]


@dataclass(frozen=True)
class StagingDirs:
    root: Path
    repo: str
    sha: str
    layout_id: str

    @property
    def commit(self) -> Path:
        return self.root / self.repo / self.sha

    @property
    def source(self) -> Path:
        return self.commit / "source"

    @property
    def layout(self) -> Path:
        return self.commit / self.layout_id


def weights_layout(nodes: int, expert_parallel: int) -> Layout:
    try:
        return Layout(nodes=nodes, expert_parallel=expert_parallel)
    except ValueError as exc:
        raise SpecError(f"weights layout: {exc}") from None


def model_repo(ref: ModelRef) -> str:
    """The Hub repo the weights come from: the spec's repo, else the catalog entry's."""
    return ref.repo or get_model(ref.catalog or "").hf_repo


def check_headers_match(
    what: str, local: Mapping[str, SafetensorsHeader], hub: Mapping[str, Sequence[TensorEntry]]
) -> None:
    """Each downloaded shard's header must list the tensors (and byte ranges) the Hub's metadata promised."""
    for path, header in local.items():
        if {(t.name, t.begin, t.end) for t in header.tensors} != {(t.name, t.begin, t.end) for t in hub[path]}:
            raise PermanentError(f"{what}/{path}: the downloaded header differs from the Hub's header metadata")


def staged(file: LocalFile, *, key: str, nodes: tuple[int, ...], dest: str | None = None) -> StagedFile:
    return StagedFile(key=key, dest=dest or file.path, size=file.size, sha256=file.sha256, nodes=nodes)


def aux_files(plan: WeightsPlan, fetched: Mapping[str, LocalFile], dirs: StagingDirs) -> list[Staged]:
    """Config, tokenizer and other non-weight files: every node gets them."""
    return [(staged(fetched[p], key=p, nodes=()), dirs.source / p) for p in plan.aux_files]


def whole_files(
    plan: WeightsPlan, hub: Mapping[str, Sequence[TensorEntry]], fetched: Mapping[str, LocalFile], dirs: StagingDirs
) -> list[Staged]:
    """Weight files as the Hub has them, each on the nodes that hold one of its tensors (all: no node list)."""
    out: list[Staged] = []
    for path in sorted(hub):
        holders = tuple(n.node for n in plan.node_plans if path in n.weight_files)
        if holders:
            nodes = () if len(holders) == plan.layout.nodes else holders
            out.append((staged(fetched[path], key=path, nodes=nodes), dirs.source / path))
    return out


def whole_file_indexes(plan: WeightsPlan, hub: Mapping[str, Sequence[TensorEntry]]) -> list[dict[str, object]]:
    return [node_index_whole_files(plan, hub, n) for n in range(plan.layout.nodes)]


def index_path(node: int) -> str:
    """Where node ``node``'s index file is written, under the layout directory."""
    return f"node-{node}/{INDEX_NAME}"


def index_file(file: LocalFile, *, node: int, dirs: StagingDirs) -> Staged:
    """A node's index: published under the layout, staged on that node only, as the checkpoint's index name."""
    rel = index_path(node)
    return staged(file, key=f"{dirs.layout_id}/{rel}", nodes=(node,), dest=INDEX_NAME), dirs.layout / rel


def assemble_manifest(repo: str, sha: str, layout: Layout, files: Sequence[StagedFile]) -> WeightsManifest:
    return WeightsManifest(
        repo=repo, revision_sha=sha, layout_id=layout.layout_id, nodes=layout.nodes,
        files=tuple(sorted(files, key=lambda s: s.key)),
    )


def weights_result(
    plan: WeightsPlan,
    manifest: WeightsManifest,
    fetched: Mapping[str, LocalFile],
    *,
    downloaded_bytes: int,
    uploaded_bytes: int,
    resharded: bool,
    bucket: str,
    prefix: str,
    config_digest: str | None = None,
) -> WeightsResult:
    base = s3_base(prefix, manifest.repo, manifest.revision_sha)
    return WeightsResult(
        repo=manifest.repo,
        revision_sha=manifest.revision_sha,
        files=len(fetched),
        bytes_total=plan.bytes_total,
        bytes_per_node=[manifest.bytes_for_node(n) for n in range(manifest.nodes)],
        bytes_naive_per_node=plan.bytes_naive_per_node,
        verified=all(f.sha256 is None or fetched[f.path].sha256 == f.sha256 for f in plan.files),
        layout_id=manifest.layout_id,
        resharded=resharded,
        s3_uri=f"s3://{bucket}/{base}/",
        manifest_uri=f"s3://{bucket}/{base}/{manifest_key(manifest.layout_id)}",
        downloaded_bytes=downloaded_bytes,
        uploaded_bytes=uploaded_bytes,
        config_digest=config_digest,
    )
