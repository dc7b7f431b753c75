"""The sandbox kubelet pulls ECR references from the sandbox's ECR: a digest ECR lacks fails as containerd
fails it, one it holds takes its size ÷ the modelled rate, told in the kubelet's Pulled wording."""

from __future__ import annotations

import json
from collections.abc import Iterator

import boto3
import pytest
from capserve_sandbox.aws import moto_sandbox
from capserve_sandbox.kube import FakeKube
from capserve_sandbox.kube.kubelet.image_pulls import PULL_BYTES_PER_S, go_duration
from kubernetes import client as k8s

from capserve.core.rollout.image import pulled_seconds
from capserve.tasks import kube as tasks_kube
from tests.sandbox.conftest import events, get, pod, until

REGION = "us-east-2"
REGISTRY = f"123456789012.dkr.ecr.{REGION}.amazonaws.com"
LAYER = 5 * 10**9


@pytest.fixture
def ecr() -> Iterator[str]:
    """A repository holding one two-layer image (10 GB); its digest."""
    with moto_sandbox(REGION):
        client = boto3.client("ecr", region_name=REGION)
        client.create_repository(repositoryName="capserve/pulls/vllm")
        layers = [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "size": LAYER,
                   "digest": "sha256:" + str(i) * 64} for i in (1, 2)]  # fmt: skip
        manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "size": 7,
                               "digest": "sha256:" + "c" * 64}, "layers": layers}  # fmt: skip
        put = client.put_image(repositoryName="capserve/pulls/vllm", imageManifest=json.dumps(manifest), imageTag="t")
        yield put["image"]["imageId"]["imageDigest"]


def waiting_reason(kube: FakeKube, name: str) -> str | None:
    statuses = get(kube, "pods", name)["status"].get("containerStatuses") or []
    return statuses[0]["state"].get("waiting", {}).get("reason") if statuses else None


def test_a_digest_the_sandbox_ecr_does_not_hold_fails_the_pull(ecr: str, kube: FakeKube, api: k8s.ApiClient) -> None:
    kube.provision_nodes("system", 1, instance_type="m7i.large")
    missing = f"{REGISTRY}/capserve/pulls/vllm@sha256:{'0' * 64}"
    tasks_kube.apply(api, pod("missing", image=missing))

    until(kube, lambda: waiting_reason(kube, "missing") == "ErrImagePull")
    [failed, *_] = events(kube, "missing", "Failed")
    assert failed["message"] == (
        f'Failed to pull image "{missing}": failed to pull and unpack image "{missing}": '
        f'failed to resolve reference "{missing}": {missing}: not found'
    )
    assert get(kube, "pods", "missing")["status"]["phase"] == "Pending"


def test_a_held_digest_is_pulled_in_its_size_over_the_rate(ecr: str, kube: FakeKube, api: k8s.ApiClient) -> None:
    kube.provision_nodes("system", 1, instance_type="m7i.large")
    image = f"{REGISTRY}/capserve/pulls/vllm@{ecr}"
    tasks_kube.apply(api, pod("held", image=image))

    [pulled] = until(kube, lambda: events(kube, "held", "Pulled"))
    seconds = 2 * LAYER / PULL_BYTES_PER_S
    assert pulled["message"] == (
        f'Successfully pulled image "{image}" in {go_duration(seconds)} ({go_duration(seconds)} including waiting). '
        f"Image size: {2 * LAYER} bytes."
    )
    assert pulled_seconds(pulled["message"]) == (image, seconds, seconds)


def test_go_durations_read_back_as_the_kubelet_writes_them() -> None:
    assert [go_duration(s) for s in (0.12, 1.594, 80.0, 125.25, 3725.0)] == ["120ms", "1.594s", "1m20s", "2m5.25s",
                                                                              "1h2m5s"]
    message = 'Successfully pulled image "x" in 796ms (1.594s including waiting). Image size: 543804759 bytes.'
    assert pulled_seconds(message) == ("x", 0.796, 1.594)
    assert pulled_seconds('Container image "x" already present on machine') is None


def test_an_upper_case_first_component_is_pulled_from_a_host_no_dns_resolves() -> None:
    from capserve_sandbox.kube.kubelet.image_pulls import PullError, pull_image

    with pytest.raises(PullError, match="dial tcp: lookup Vllm: no such host"):
        pull_image("Vllm/vllm-openai:v0.32.0", "node-0")
    assert pull_image("vllm/vllm-openai:v0.32.0", "node-0").size_bytes == 0  # Docker Hub: not the sandbox's
