"""stage_weights end to end: local Hub → verify → re-shard → moto S3, and a re-run that does no work."""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest
from capserve_sandbox.aws import moto_sandbox
from capserve_sandbox.hub import local_hub

from capserve.core.spec import parse_spec
from capserve.core.weights.manifest import WeightsManifest
from capserve.flows.stage_weights import stage_weights

SPEC = parse_spec({
    "name": "weights-test",
    "model": {"catalog": "tiny-k3"},
    "capacity": {"provider": "existing-reservation", "instance_type": "p6-b300.48xlarge", "regions": ["us-east-2"],
                 "reservation_id": "cr-0123456789abcdef0"},
    "weights": {"s3_bucket": "capserve-weights-test"},
})


def test_stage_publish_and_rerun_does_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    log: list[dict] = []
    with moto_sandbox("us-east-2"), local_hub(log=log) as url:
        result = stage_weights(SPEC, nodes=2, expert_parallel=4, staging_dir=tmp_path, hub_endpoint=url)
        section = result.report_section()
        assert section["verified"] and result.resharded
        assert section["bytes_naive_per_node"] == section["bytes_total"] > max(section["bytes_per_node"])
        assert result.downloaded_bytes == section["bytes_total"]

        s3 = boto3.client("s3", region_name="us-east-2")
        tags = s3.get_bucket_tagging(Bucket="capserve-weights-test")["TagSet"]
        assert {"Key": "capserve.io/campaign", "Value": "weights-test"} in tags
        key = result.manifest_uri.removeprefix("s3://capserve-weights-test/")
        body = s3.get_object(Bucket="capserve-weights-test", Key=key)["Body"].read()
        manifest = WeightsManifest.model_validate_json(body)
        assert [manifest.bytes_for_node(n) for n in (0, 1)] == section["bytes_per_node"]
        base = key.rsplit("/", 1)[0]
        for node in (0, 1):
            files = manifest.for_node(node)
            index_key = next(f.key for f in files if f.dest == "model.safetensors.index.json")
            index = json.loads(s3.get_object(Bucket="capserve-weights-test", Key=f"{base}/{index_key}")["Body"].read())
            assert set(index["weight_map"].values()) <= {f.dest for f in files}

        before = len(log)
        again = stage_weights(SPEC, nodes=2, expert_parallel=4, staging_dir=tmp_path, hub_endpoint=url)
        assert again.downloaded_bytes == 0 and again.uploaded_bytes == 0
        assert again.report_section()["bytes_per_node"] == section["bytes_per_node"]
        # Only the revision is resolved again (main → sha); no file is fetched, no header read.
        assert [e for e in log[before:] if "/resolve/" in e.get("path", "")] == []
