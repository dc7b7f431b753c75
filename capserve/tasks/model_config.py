"""A model's geometry from its own config.json: a local file, or the Hub (read at run time).

No Prefect here: ``capserve plan owner/repo`` uses these without starting any orchestration, and
``huggingface_hub`` is imported only when a Hub repo is actually read.
"""

from __future__ import annotations

import json
from pathlib import Path

from capserve.core.catalog import ModelEntry, model_from_hf_config
from capserve.core.errors import PermanentError, RetryableError


def model_from_hub(repo: str, revision: str = "main", *, endpoint: str | None = None) -> ModelEntry:
    """The model's geometry read from its own config.json on the Hub (or a Hub-compatible endpoint)."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import HfHubHTTPError

    try:
        path = hf_hub_download(repo, "config.json", revision=revision, endpoint=endpoint)
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
    """The model's geometry from a config.json on disk; an unreadable file is a PermanentError naming it."""
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PermanentError(f"{path}: not a readable config.json ({exc})") from exc
    return model_from_hf_config(config, name=name, hf_repo=hf_repo, source=source or str(path))
