"""The scheduled reaper and Hub watcher on a worker without AWS credentials (a team's server playing the sandbox):
each run ends Completed, its state message and its artifact say it skipped, and nothing is looked at."""

from __future__ import annotations

from pathlib import Path

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

from capserve.flows.hub_watch import watch_hub
from capserve.flows.reaper import reaper
from capserve.tasks.maintenance import NO_AWS_CREDENTIALS


@pytest.fixture
def no_aws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """botocore's whole chain comes up empty: no keys in the environment, no shared files, no instance role."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                 "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                 "AWS_CONTAINER_CREDENTIALS_FULL_URI"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def latest_artifact(key: str) -> str:
    with get_client(sync_client=True) as client:
        found = client.read_latest_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])))
    assert len(found) == 1, key
    return str(found[0].data)


@pytest.mark.usefixtures("no_aws")
def test_the_reaper_without_aws_credentials_ends_completed_and_says_it_skipped() -> None:
    state = reaper(["us-east-2"], dry_run=False, return_state=True)
    assert state.is_completed() and state.message == NO_AWS_CREDENTIALS
    assert NO_AWS_CREDENTIALS in latest_artifact("capserve-reaper")


@pytest.mark.usefixtures("no_aws")
def test_the_hub_watcher_without_aws_credentials_ends_completed_and_says_it_skipped() -> None:
    state = watch_hub(["us-east-2"], hub_endpoint="http://127.0.0.1:9", return_state=True)
    assert state.is_completed() and state.message == NO_AWS_CREDENTIALS
    assert state.result() == []
    assert NO_AWS_CREDENTIALS in latest_artifact("capserve-hub-watcher")
