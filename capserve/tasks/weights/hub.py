"""Hub calls: pin a revision, list files with sha256, read safetensors headers (no weight bytes).

The endpoint is always passed explicitly (``HfApi(endpoint=...)``): huggingface_hub reads HF_ENDPOINT
once at import time (docs/weights.md §3.1), so an env var set later would silently go to huggingface.co.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Mapping
from typing import Any

import httpx
from huggingface_hub import HfApi
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from prefect.context import TaskRunContext
from pydantic import BaseModel, ConfigDict, Field, SecretStr

from capserve.blocks.hub import HUB_ENDPOINT, HubCredentials
from capserve.core.errors import CapserveError, PermanentError, RetryableError
from capserve.core.weights.listing import RepoFile, RepoListing
from capserve.core.weights.safetensors import TensorEntry, tensors_from_offsets
from capserve.tasks.resilience import hub_task


class HubConnection(BaseModel):
    """Endpoint and token for one stage run; the token is a SecretStr and never part of a cache key."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    endpoint: str = Field(min_length=8, max_length=500, pattern=r"^https?://", description="Hub base URL.")
    token: SecretStr | None = Field(None, description="Hub token; None for public repos.")
    timeout_seconds: float = Field(30.0, gt=0, le=600, description="Timeout of one metadata request.")

    def api(self) -> HfApi:
        return HfApi(endpoint=self.endpoint, token=self.secret())

    def secret(self) -> str | bool:
        # False (not None): never fall back to a token cached on this machine by `hf auth login`.
        return self.token.get_secret_value() if self.token else False


# huggingface_hub's own tools read the token from this variable when nothing else names one.
HF_TOKEN_ENV = "HF_TOKEN"  # noqa: S105 - the variable's name, not the token


def hub_connection(hub_endpoint: str | None, hub_block: str | None, timeout_seconds: float) -> HubConnection:
    """Endpoint and token for a stage run: a saved ``HubCredentials`` block when one is named, else the
    ``HF_TOKEN`` environment variable; ``hub_endpoint`` overrides the endpoint (the sandbox's local Hub)."""
    credentials = HubCredentials.load(hub_block) if hub_block else HubCredentials()
    if not isinstance(credentials, HubCredentials):
        raise PermanentError(f"block {hub_block!r} is not a capserve Hub credentials block")
    token = credentials.token or (SecretStr(os.environ[HF_TOKEN_ENV]) if os.environ.get(HF_TOKEN_ENV) else None)
    endpoint = hub_endpoint or credentials.endpoint or HUB_ENDPOINT
    return HubConnection(endpoint=endpoint, token=token, timeout_seconds=timeout_seconds)


def convert_hub_error(exc: BaseException, what: str) -> CapserveError:
    """Hub/HTTP errors become ours: missing repo/revision/file and gating are permanent; 429/5xx/network retry."""
    if isinstance(exc, CapserveError):
        return exc
    # hf_hub_download(force_download=True) wraps the HTTP error in "ValueError: Force download failed due to
    # the above error" (huggingface_hub 2.4 file_download.py): classify by the error underneath.
    cause = exc.__cause__ or exc.__context__
    if isinstance(exc, ValueError) and cause is not None:
        return convert_hub_error(cause, what)
    if isinstance(exc, GatedRepoError):
        return PermanentError(f"{what}: the repo is gated; accept its terms on the Hub and give a token with access")
    if isinstance(exc, RepositoryNotFoundError):
        return PermanentError(f"{what}: repository not found (or private without a token): check model.repo")
    if isinstance(exc, RevisionNotFoundError):
        return PermanentError(f"{what}: revision not found: check model.revision (branch, tag or commit sha)")
    if isinstance(exc, EntryNotFoundError):
        return PermanentError(f"{what}: file not found at this revision")
    if isinstance(exc, HfHubHTTPError):
        status = exc.response.status_code if exc.response is not None else 0
        if status == 429 or status >= 500:
            return RetryableError(f"{what}: Hub answered HTTP {status} (transient)")
        return PermanentError(f"{what}: Hub answered HTTP {status}: {exc}")
    if isinstance(exc, (httpx.TransportError, TimeoutError, ConnectionError)):
        return RetryableError(f"{what}: {type(exc).__name__}: {exc} (transient)")
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EROFS):
        return PermanentError(f"{what}: {exc.strerror}: free space or fix permissions of the staging directory")
    if isinstance(exc, OSError):  # huggingface_hub's size "Consistency check failed" and cut streams land here
        return RetryableError(f"{what}: {type(exc).__name__}: {exc} (transient)")
    return PermanentError(f"{what}: {type(exc).__name__}: {exc}")


def hub_cache_key(context: TaskRunContext, parameters: Mapping[str, Any]) -> str:
    """Metadata at a commit sha never changes: key on (task, endpoint, repo, sha), never on the token."""
    conn: HubConnection = parameters["conn"]
    return f"{context.task.name}:{conn.endpoint}:{parameters['repo']}:{parameters['sha']}"


@hub_task(name="weights-resolve-revision")
def resolve_revision(conn: HubConnection, repo: str, revision: str) -> str:
    """Pin ``revision`` (branch, tag or sha) to the commit sha everything downstream is keyed by."""
    try:
        info = conn.api().model_info(repo, revision=revision, timeout=conn.timeout_seconds)
    except Exception as exc:
        raise convert_hub_error(exc, f"resolving {repo}@{revision}") from exc
    sha = info.sha
    if not sha:
        raise PermanentError(f"resolving {repo}@{revision}: the Hub returned no commit sha")
    if len(revision) == 40 and revision != sha:
        raise PermanentError(f"{repo}: asked for commit {revision}, the Hub resolved it to {sha}")
    return sha


@hub_task(name="weights-list-files", cache_key_fn=hub_cache_key, persist_result=True)
def list_repo_files(conn: HubConnection, repo: str, sha: str) -> RepoListing:
    """Every file at ``sha`` with size and LFS sha256 (``model_info(files_metadata=True)``)."""
    try:
        info = conn.api().model_info(repo, revision=sha, files_metadata=True, timeout=conn.timeout_seconds)
    except Exception as exc:
        raise convert_hub_error(exc, f"listing {repo}@{sha}") from exc
    files = []
    for sibling in info.siblings or []:
        if sibling.size is None:
            raise PermanentError(f"listing {repo}@{sha}: the Hub gave no size for {sibling.rfilename}")
        files.append(RepoFile(
            path=sibling.rfilename,
            size=sibling.size,
            sha256=sibling.lfs.sha256 if sibling.lfs else None,
            git_oid=None if sibling.lfs else sibling.blob_id,
        ))
    return RepoListing(repo=repo, revision_sha=sha, files=tuple(sorted(files, key=lambda f: f.path)))


@hub_task(name="weights-read-headers", cache_key_fn=hub_cache_key, persist_result=True)
def read_hub_headers(conn: HubConnection, repo: str, sha: str) -> dict[str, list[TensorEntry]]:
    """Tensor name, dtype, shape and byte range per indexed file: one HEAD + one ranged GET per shard."""
    try:
        meta = conn.api().get_safetensors_metadata(repo, revision=sha, timeout=conn.timeout_seconds)
    except Exception as exc:
        raise convert_hub_error(exc, f"reading safetensors headers of {repo}@{sha}") from exc
    return {
        path: tensors_from_offsets(
            ((name, t.dtype, t.shape, t.data_offsets) for name, t in file_meta.tensors.items()),
            what=f"{repo}@{sha}/{path}",
        )
        for path, file_meta in sorted(meta.files_metadata.items())
    }

