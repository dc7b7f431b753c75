"""Download one file from the Hub into the staging area and verify its sha256 right after it lands.

huggingface_hub checks only the size after a download, and trusts its own metadata on a re-run even if
the bytes were corrupted (docs/weights.md §3.4, measured), so the content check is ours: LFS files against
the listing's sha256, small git files against their git blob sha1. A mismatch deletes the file and
fetches it again; a second mismatch is permanent. Partial downloads of a killed process are
``*.incomplete`` files under ``.cache/huggingface/download`` that huggingface_hub never resumes across
processes (docs/weights.md §3.3): ``sweep_incomplete`` removes them before any fetch starts.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from huggingface_hub import hf_hub_download
from huggingface_hub.utils import disable_progress_bars  # type: ignore[attr-defined]
from pydantic import BaseModel, ConfigDict, Field

from capserve.core.artifact_keys import artifact_key
from capserve.core.errors import PermanentError
from capserve.core.settings import RetryPolicy
from capserve.core.weights.listing import SHA256_HEX, RepoFile
from capserve.core.weights.settings import WeightsSettings
from capserve.tasks.parallel import map_bounded
from capserve.tasks.resilience import hub_task, local_task, with_policy
from capserve.tasks.weights.artifacts import Progress
from capserve.tasks.weights.hub import HubConnection, convert_hub_error
from capserve.tasks.weights.localfiles import Digest, forget, hash_file, mark_verified, trusted_sha256

log = logging.getLogger(__name__)

# Our progress is the Prefect artifact and the CLI's rich bar; tqdm bars from worker threads only add noise.
disable_progress_bars()

HF_DOWNLOAD_DIR = ".cache/huggingface/download"


class FetchedFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str = Field(min_length=1, max_length=1000, description="Path in the repo and under the source dir.")
    size: int = Field(ge=0, description="Bytes.")
    sha256: str = Field(pattern=SHA256_HEX, description="Verified sha256.")
    downloaded_bytes: int = Field(ge=0, description="Bytes downloaded by this call (0 when already verified).")
    refetched: bool = Field(False, description="A first download failed verification and was fetched again.")


@local_task(name="weights-sweep-incomplete")
def sweep_incomplete(source_dir: Path) -> int:
    """Delete orphaned partial downloads; call only when no fetch is running in this directory."""
    removed = 0
    for leftover in (source_dir / HF_DOWNLOAD_DIR).rglob("*.incomplete") if source_dir.exists() else ():
        leftover.unlink(missing_ok=True)
        removed += 1
    return removed


def matches(file: RepoFile, digest: Digest) -> bool:
    if digest.size != file.size:
        return False
    if file.sha256 is not None:
        return digest.sha256 == file.sha256
    return file.git_oid is not None and digest.git_sha1 == file.git_oid


@hub_task(name="weights-fetch-file")
def fetch_file(conn: HubConnection, repo: str, sha: str, file: RepoFile, source_dir: Path,
               etag_timeout: float = 10.0) -> FetchedFile:
    """Make ``source_dir/<file.path>`` hold the verified content of ``file`` at ``sha``, downloading only if needed."""
    rel = file.path
    known = trusted_sha256(source_dir, rel)
    if known is not None and (file.sha256 is None or known == file.sha256):
        return FetchedFile(path=rel, size=file.size, sha256=known, downloaded_bytes=0)
    if (source_dir / rel).exists():
        # Present but unverified (a killed run, or a copy from elsewhere): hash before trusting it.
        digest = hash_file(source_dir / rel)
        if matches(file, digest):
            mark_verified(source_dir, rel, digest.sha256)
            return FetchedFile(path=rel, size=file.size, sha256=digest.sha256, downloaded_bytes=0)
        log.warning("%s: present but its content does not match %s@%s; fetching again", rel, repo, sha[:12])
    downloaded = 0
    for attempt in (1, 2):
        forget(source_dir, rel)
        _download(conn, repo, sha, rel, source_dir, etag_timeout)
        downloaded += file.size
        digest = hash_file(source_dir / rel)
        if matches(file, digest):
            mark_verified(source_dir, rel, digest.sha256)
            return FetchedFile(path=rel, size=file.size, sha256=digest.sha256, downloaded_bytes=downloaded,
                               refetched=attempt == 2)
        log.warning("%s: sha256 mismatch after download %d of 2 (%s@%s)", rel, attempt, repo, sha[:12])
    forget(source_dir, rel)
    raise PermanentError(
        f"{repo}@{sha}: {rel} failed sha256 verification twice (expected {file.sha256 or file.git_oid}); "
        "the Hub copy or the path to it is corrupting data: check the endpoint/proxy and retry later"
    )


def _download(conn: HubConnection, repo: str, sha: str, rel: str, source_dir: Path, etag_timeout: float) -> None:
    try:
        # force_download: we decided to fetch; do not let huggingface_hub's metadata call a bad file fine.
        hf_hub_download(repo, rel, revision=sha, local_dir=source_dir, endpoint=conn.endpoint,
                        token=conn.secret(), force_download=True, etag_timeout=etag_timeout)
    except Exception as exc:
        raise convert_hub_error(exc, f"downloading {repo}@{sha[:12]}/{rel}") from exc


def fetch_checkpoint(
    conn: HubConnection, repo: str, sha: str, files: Sequence[RepoFile], source_dir: Path, settings: WeightsSettings,
    *, campaign: str | None = None,
) -> dict[str, FetchedFile]:
    """Every file of ``files`` in ``source_dir``, verified: at most ``fetch_parallelism`` downloads at once, each
    retried ``fetch_retries`` times on transient errors, with progress in the UI (and on a watching terminal)."""
    sweep_incomplete(source_dir)
    total = sum(f.size for f in files)
    progress = Progress(artifact_key(campaign, "weights-download", repo), total,
                        f"{repo}@{sha[:12]}: fetch + sha256 verify", what=f"{repo} fetched from the Hub and verified")
    fetch = with_policy(
        fetch_file,
        RetryPolicy(
            retries=settings.fetch_retries,
            first_delay_s=settings.fetch_retry_delay_seconds,
            max_delay_s=settings.fetch_retry_max_delay_seconds,
        ),
    )
    calls = [
        {"conn": conn, "repo": repo, "sha": sha, "file": f, "source_dir": source_dir,
         "etag_timeout": settings.etag_timeout_seconds}
        for f in files
    ]
    try:
        fetched = map_bounded(fetch, calls, settings.fetch_parallelism, on_done=lambda r: progress.advance(r.size))
    finally:
        progress.close()
    return {f.path: f for f in fetched}
