"""The manifest: every published file with its sha256, size, S3 key and which nodes stage it.

S3 ETags are not content hashes (a multipart ETag is an MD5 of part MD5s, docs/weights.md §5), so the
manifest is what a node checks its copy against. It is published next to the files, one per layout.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from capserve.core.weights.listing import SHA1_HEX, SHA256_HEX


class StagedFile(BaseModel):
    """One object under ``<prefix>/<repo>/<sha>/`` and where it lands on a node."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str = Field(min_length=1, max_length=1000, description="Key relative to <prefix>/<repo>/<sha>/.")
    dest: str = Field(min_length=1, max_length=1000, description="Path relative to the node's weight directory.")
    size: int = Field(ge=0, le=5 * 1024**3, description="Bytes (at most 5 GiB: single-part upload).")
    sha256: str = Field(pattern=SHA256_HEX, description="sha256 of the content, hex.")
    nodes: tuple[int, ...] = Field((), max_length=64, description="Nodes that stage this file; empty means every node.")

    def on_node(self, node: int) -> bool:
        return not self.nodes or node in self.nodes


class WeightsManifest(BaseModel):
    """Everything one layout of one (repo, sha) needs, verified."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    repo: str = Field(min_length=3, max_length=200, description="Hub repo 'owner/name'.")
    revision_sha: str = Field(pattern=SHA1_HEX, description="Pinned commit sha.")
    layout_id: str = Field(pattern=r"^[a-z0-9-]{1,64}$", description="'full' (source files) or 'ep<N>-nodes<M>'.")
    nodes: int = Field(ge=1, le=64, description="Nodes the layout is for.")
    files: tuple[StagedFile, ...] = Field(max_length=1_000_000, description="Files, sorted by key.")

    @property
    def manifest_key(self) -> str:
        return manifest_key(self.layout_id)

    def for_node(self, node: int) -> tuple[StagedFile, ...]:
        return tuple(f for f in self.files if f.on_node(node))

    def bytes_for_node(self, node: int) -> int:
        return sum(f.size for f in self.for_node(node))

    @property
    def bytes_total(self) -> int:
        return sum(f.size for f in self.files)


def manifest_key(layout_id: str) -> str:
    return f"manifest-{layout_id}.json"


def s3_base(prefix: str, repo: str, sha: str) -> str:
    """``<prefix>/<repo>/<sha>``: everything of one commit lives under it (no leading or doubled '/')."""
    parts = [p for p in prefix.split("/") if p] + repo.split("/") + [sha]
    return "/".join(parts)
