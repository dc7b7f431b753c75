"""out/<run>/manifests/: every applied object as numbered YAML, in order, secrets redacted."""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import SecretStr

from capserve.core.rollout.secret import api_key_secret
from capserve.tasks.manifests import record_applied, recording


def test_objects_are_numbered_in_apply_order_and_secrets_redacted(tmp_path: Path) -> None:
    secret = api_key_secret("capserve-c", "c", SecretStr("s3cr3t-value"))
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "capserve-c"}}
    record_applied(job)  # nothing is recording: ignored
    with recording(tmp_path / "manifests"):
        record_applied(secret)
        record_applied(job)
    record_applied(job)  # the recording is closed
    files = sorted(p.name for p in (tmp_path / "manifests").iterdir())
    assert files == ["001-Secret-capserve-c-serving-api-key.yaml", "002-Job-capserve-c-j.yaml"]
    written = yaml.safe_load((tmp_path / "manifests" / files[0]).read_text())
    assert written["data"] == {"api-key": "<redacted>"} and written["metadata"]["name"] == "serving-api-key"
    assert all(b"s3cr3t" not in p.read_bytes() for p in (tmp_path / "manifests").iterdir())
    assert secret["data"]["api-key"] != "<redacted>"  # the object sent to the API server keeps its value
    # A second recording into the same folder (a re-run) continues the numbering.
    with recording(tmp_path / "manifests"):
        record_applied(job)
    assert (tmp_path / "manifests" / "003-Job-capserve-c-j.yaml").exists()
