"""Image references as capserve splits them (distribution/reference's rules), and the mirror's names."""

from __future__ import annotations

import pytest

from capserve.core.errors import SpecError
from capserve.core.rollout.image import ImageRef, mirror_repository, mirror_tag, parse_image, slowest_pull
from capserve.core.rollout.prepull import prepull_objects

DIGEST = "sha256:" + "c" * 64


def test_docker_hub_and_other_registries_are_named_in_full() -> None:
    assert parse_image("vllm/vllm-openai:kimi-k3") == ImageRef(registry="docker.io", path="vllm/vllm-openai",
                                                               tag="kimi-k3")  # fmt: skip
    assert parse_image("busybox").tagged == "docker.io/library/busybox:latest"
    ngc = parse_image(f"nvcr.io/nvidia/vllm:25.09@{DIGEST}")
    assert (ngc.registry, ngc.path, ngc.tag, ngc.digest) == ("nvcr.io", "nvidia/vllm", "25.09", DIGEST)
    local = parse_image("localhost:5000/team/vllm:dev")
    assert (local.registry, local.path, local.tag) == ("localhost:5000", "team/vllm", "dev")


def test_a_bad_reference_says_what_to_change() -> None:
    with pytest.raises(SpecError, match="repository path must be lowercase"):
        parse_image("VLLM/vllm-openai:kimi-k3")
    with pytest.raises(SpecError, match="digest must be 'sha256:' and 64 lowercase hex digits"):
        parse_image("vllm/vllm-openai@sha256:abc")


def test_the_campaigns_repository_and_tag() -> None:
    source = parse_image("vllm/vllm-openai:kimi-k3")
    assert mirror_repository("k3-demo", source) == "capserve/k3-demo/vllm/vllm-openai"
    assert mirror_tag(source, DIGEST) == "kimi-k3-cccccccccccc"


def test_the_slowest_pull_of_the_workloads_own_pods_is_reported() -> None:
    def pulled(uid: str, took: str, waiting: str, image: str = "img") -> dict[str, object]:
        message = f'Successfully pulled image "{image}" in {took} ({waiting} including waiting). Image size: 1 bytes.'
        return {"reason": "Pulled", "message": message, "involvedObject": {"uid": uid, "name": "n"}}

    events = [pulled("a", "1m20s", "1m20s"), pulled("b", "40s", "2m0s"), pulled("old", "9m0s", "9m0s"),
              pulled("a", "1s", "1s", image="other"), {"reason": "Pulled", "involvedObject": {"uid": "b"},
              "message": 'Container image "img" already present on machine'}]  # fmt: skip
    found = slowest_pull(events, {"a": "vllm-blue-0", "b": "vllm-blue-0-1"}, "img")
    assert found is not None
    assert (found.pod, found.seconds, found.including_waiting_s, found.pulls) == ("vllm-blue-0", 80.0, 80.0, 2)
    assert slowest_pull(events, {"c": "x"}, "img") is None


def test_one_prepull_job_per_gpu_node_pulls_the_image_there_and_exits() -> None:
    image = f"123456789012.dkr.ecr.us-east-2.amazonaws.com/capserve/k3-demo/vllm/vllm-openai@{DIGEST}"
    namespace, *jobs = prepull_objects("k3-demo", image, ("node-a", "node-b"), deadline_s=4 * 3600)

    assert (namespace["kind"], namespace["metadata"]["name"]) == ("Namespace", "capserve-k3-demo")
    assert [j["metadata"]["name"] for j in jobs] == ["image-prepull-0", "image-prepull-1"]
    pod = jobs[1]["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert (container["image"], container["command"], pod["restartPolicy"]) == (image, ["true"], "Never")
    assert pod["nodeSelector"] == {"kubernetes.io/hostname": "node-b"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    # Teardown finds them by the campaign label; the rollout finds their pods by the role.
    labels = jobs[0]["spec"]["template"]["metadata"]["labels"]
    assert labels["capserve.io/campaign"] == "k3-demo" and labels["capserve.io/role"] == "image-prepull"
