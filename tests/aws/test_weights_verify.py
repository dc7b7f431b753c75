"""A published checkpoint verifies by its manifest (HEAD requests only) in the sandbox's S3, or says what is wrong."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from capserve_sandbox.aws import moto_sandbox

from capserve.core.locations import BucketLocation
from capserve.core.weights.manifest import StagedFile, WeightsManifest, manifest_key
from capserve.tasks.weights.s3 import ensure_weights_bucket, publish_document, publish_file, verify_published

REGION = "us-east-2"
BASE = "capserve/weights/org/model/" + "a" * 40


@pytest.fixture
def published(tmp_path: Path) -> Iterator[str]:
    with moto_sandbox(REGION):
        files = []
        for name, data in (("model-1.safetensors", b"x" * 1000), ("config.json", b"{}")):
            path = tmp_path / name
            path.write_bytes(data)
            staged = StagedFile(key=f"full/{name}", dest=name, size=len(data), sha256=hashlib.sha256(data).hexdigest())
            files.append((staged, path))
        manifest = WeightsManifest(
            repo="org/model", revision_sha="a" * 40, layout_id="full", nodes=1, files=tuple(f for f, _ in files)
        )
        location = BucketLocation(bucket="verify-weights", region=REGION)
        ensure_weights_bucket.fn(location, "k3-demo")
        for staged, path in files:  # what publish_checkpoint does, file by file, without a flow around it
            publish_file.fn(location.bucket, f"{BASE}/{staged.key}", path, staged.sha256, REGION)
        key = f"{BASE}/{manifest_key('full')}"
        publish_document.fn(location.bucket, key, manifest.model_dump_json().encode(), REGION)
        yield f"s3://{location.bucket}/{BASE}/{manifest_key('full')}"


def test_an_intact_checkpoint_verifies(published: str) -> None:
    assert verify_published.fn(published, REGION) == []


def test_a_missing_or_changed_file_or_manifest_is_named(published: str) -> None:
    s3 = boto3.client("s3", region_name=REGION)
    s3.delete_object(Bucket="verify-weights", Key=f"{BASE}/full/config.json")
    s3.put_object(Bucket="verify-weights", Key=f"{BASE}/full/model-1.safetensors", Body=b"y" * 1000)
    assert verify_published.fn(published, REGION) == [
        f"s3://verify-weights/{BASE}/full/model-1.safetensors differs from the manifest (size or SHA256)",
        f"s3://verify-weights/{BASE}/full/config.json is gone",
    ]
    s3.delete_object(Bucket="verify-weights", Key=f"{BASE}/{manifest_key('full')}")
    assert verify_published.fn(published, REGION) == [f"{published} is gone"]
