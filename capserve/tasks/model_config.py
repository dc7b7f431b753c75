"""A model's geometry from its own config.json: a local file, or the Hub (read at run time).

No Prefect here: ``capserve plan owner/repo`` uses these without starting any orchestration, and
``huggingface_hub`` is imported only when a Hub repo is actually read.
"""

from __future__ import annotations

import json
from pathlib import Path

from capserve.core.bounded_read import read_bounded
from capserve.core.catalog.hf_config import model_from_hf_config
from capserve.core.catalog.models import ModelEntry
from capserve.core.errors import PermanentError, RetryableError, SpecError
from capserve.core.rollout.cache import compile_config_digest


def model_from_hub(repo: str, revision: str = "main", *, endpoint: str | None = None) -> ModelEntry:
    """The model's geometry read from its own config.json on the Hub (or a Hub-compatible endpoint)."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    try:
        path = hf_hub_download(repo, "config.json", revision=revision, endpoint=endpoint)
    except LocalEntryNotFoundError as exc:
        # The Hub did not answer (after huggingface_hub's own retries) and nothing is cached: unavailable.
        raise RetryableError(
            f"the Hub at {endpoint or 'https://huggingface.co'} did not answer for config.json of {repo}@{revision}: "
            "check --hub-endpoint (or HF_ENDPOINT) and the network"
        ) from exc
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else None
        failure = RetryableError if status is None or status >= 500 or status == 429 else PermanentError
        raise failure(
            f"cannot read config.json of {repo}@{revision} from the Hub (HTTP {status}): check model.repo and "
            "model.revision (and the Hub token for gated repos), or name a catalog model with model.catalog"
        ) from exc
    return model_from_config_file(Path(path), name=repo, hf_repo=repo, source=f"{repo}@{revision} config.json")


def model_from_config_file(
    path: Path, *, name: str, hf_repo: str | None = None, source: str | None = None
) -> ModelEntry:
    """The model's geometry from a config.json on disk; a file that is not one is a SpecError naming it."""
    # A config.json is a few kilobytes; 4 MiB refuses a device or a wrong file before it fills memory.
    raw = read_bounded(path, 4 * 2**20, "--config")
    try:
        config = json.loads(raw.decode("utf-8"))
    except ValueError as exc:
        raise SpecError(f"{path}: not a readable config.json ({exc})") from None
    if not isinstance(config, dict):
        raise SpecError(f"{path}: a config.json is a mapping of fields (model_type, hidden_size, …), not a list "
                        "or a single value")
    return model_from_hf_config(config, name=name, hf_repo=hf_repo, source=source or str(path))


def config_digest_of(path: Path) -> str:
    """The staged config.json's digest as vLLM's compile cache sees it (``compile_config_digest``)."""
    raw = read_bounded(path, 4 * 2**20, "config.json")
    try:
        config = json.loads(raw.decode("utf-8"))
    except ValueError as exc:
        raise PermanentError(f"{path}: the checkpoint's config.json is not JSON ({exc})") from None
    if not isinstance(config, dict):
        raise PermanentError(f"{path}: the checkpoint's config.json is not a mapping of fields")
    return compile_config_digest(config)
