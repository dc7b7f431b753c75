"""What the weights stage hands back: the report.json "weights" section and its markdown."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from capserve.core.markdown import markdown_table
from capserve.core.weights.listing import SHA1_HEX


class WeightsResult(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    repo: str = Field(min_length=3, max_length=200, description="Hub repo 'owner/name'.")
    revision_sha: str = Field(pattern=SHA1_HEX, description="Pinned commit sha.")
    files: int = Field(ge=0, description="Files fetched and verified from the Hub.")
    bytes_total: int = Field(ge=0, description="Bytes fetched from the Hub (the whole checkpoint).")
    bytes_per_node: list[int] = Field(min_length=1, max_length=64, description="Bytes each node stages.")
    bytes_naive_per_node: int = Field(ge=0, description="Bytes per node if every node got everything.")
    verified: bool = Field(description="Every file's sha256 matched the Hub's (and the manifest).")
    layout_id: str = Field(min_length=1, max_length=64, description="'full' or 'ep<N>-nodes<M>'.")
    resharded: bool = Field(description="Experts were rewritten into per-rank files.")
    s3_uri: str = Field(
        min_length=5, max_length=2000, description="s3://bucket/prefix/<repo>/<sha>/ holding the files."
    )
    manifest_uri: str = Field(min_length=5, max_length=2000, description="The published manifest's s3:// URI.")
    downloaded_bytes: int = Field(ge=0, description="Bytes this run downloaded (0 on a re-run with the same sha).")
    uploaded_bytes: int = Field(ge=0, description="Bytes this run uploaded to S3 (0 when everything was there).")
    config_digest: str | None = Field(
        None,
        pattern=r"^[0-9a-f]{64}$",
        description="The checkpoint's config.json as vLLM's compile cache sees it (capserve.core.rollout.cache."
        "compile_config_digest); None: the checkpoint has none. Names the compile caches a revision can reuse.",
    )

    def report_section(self) -> dict[str, Any]:
        return {
            "repo": self.repo,
            "revision_sha": self.revision_sha,
            "files": self.files,
            "bytes_total": self.bytes_total,
            "bytes_per_node": list(self.bytes_per_node),
            "bytes_naive_per_node": self.bytes_naive_per_node,
            "verified": self.verified,
            "layout": self.layout_id,
            "resharded": self.resharded,
            "manifest_uri": self.manifest_uri,
            "downloaded_bytes": self.downloaded_bytes,
            "uploaded_bytes": self.uploaded_bytes,
        }

    def markdown(self) -> str:
        naive = self.bytes_naive_per_node or 1
        rows = [
            {"node": i, "bytes staged": _size(b), "of naive": f"{b / naive:.0%}"}
            for i, b in enumerate(self.bytes_per_node)
        ]
        head = (
            f"`{self.repo}` at `{self.revision_sha[:12]}`: {self.files} files, {_size(self.bytes_total)}, "
            f"sha256 {'verified' if self.verified else '**NOT verified**'}; layout `{self.layout_id}`"
            f"{' (experts re-sharded per rank)' if self.resharded else ''}; published to `{self.s3_uri}`. "
            f"This run downloaded {_size(self.downloaded_bytes)} and uploaded {_size(self.uploaded_bytes)}.\n\n"
        )
        return head + markdown_table(rows)


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")
