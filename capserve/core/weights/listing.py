"""What a Hub repo holds at one commit: files with size and content hash, as the tree listing gives them."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

SHA1_HEX = r"^[0-9a-f]{40}$"
SHA256_HEX = r"^[0-9a-f]{64}$"


class RepoFile(BaseModel):
    """One file of the repo. LFS files carry a sha256; small git files only their git blob sha1."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str = Field(min_length=1, max_length=1000, description="Path inside the repo, '/'-separated.")
    size: int = Field(ge=0, le=1 << 50, description="Size in bytes.")
    sha256: str | None = Field(None, pattern=SHA256_HEX, description="LFS sha256 of the content (LFS files only).")
    git_oid: str | None = Field(
        None, pattern=SHA1_HEX, description="Git blob sha1 (what the Hub reports for non-LFS files)."
    )

    @property
    def is_safetensors(self) -> bool:
        return self.path.endswith(".safetensors")


class RepoListing(BaseModel):
    """Every file of ``repo`` at commit ``revision_sha``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    repo: str = Field(min_length=3, max_length=200, description="Hub repo 'owner/name'.")
    revision_sha: str = Field(pattern=SHA1_HEX, description="The commit sha everything is keyed by.")
    files: tuple[RepoFile, ...] = Field(max_length=1_000_000, description="Files, sorted by path.")

    @property
    def bytes_total(self) -> int:
        return sum(f.size for f in self.files)

    def file(self, path: str) -> RepoFile:
        for f in self.files:
            if f.path == path:
                return f
        raise KeyError(path)
