"""Whether a serving image carries the EFA stack a layout across nodes needs: the rule, and its read of the image's
own files through the registry tool (the sandbox's stand-in for crane)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from capserve_sandbox.aws import patched_environ
from capserve_sandbox.registry import image_files, registry_tool_command

from capserve.core.environ import REGISTRY_TOOL_ENV
from capserve.core.errors import PermanentError
from capserve.core.rollout.efa_image import EFA_STACK, efa_stack_found, efa_stack_problem
from capserve.tasks.image_mirror import image_efa_stack

PLUGIN, FABRIC = "aws-ofi-nccl (libnccl-net*.so)", "libfabric (libfabric.so)"


def test_the_stack_is_the_nccl_net_plugin_and_libfabric_wherever_the_installer_put_them() -> None:
    assert efa_stack_found(["opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so", "opt/amazon/efa/lib/libfabric.so.1"]) == {
        PLUGIN, FABRIC}
    assert efa_stack_found(["opt/aws-ofi-nccl/lib/libnccl-net.so"]) == {PLUGIN}
    # NCCL itself is not its network plugin.
    assert efa_stack_found(["usr/lib/x86_64-linux-gnu/libnccl.so.2", "opt/amazon/efa/lib/"]) == set()
    assert efa_stack_problem("img", EFA_STACK) is None
    problem = efa_stack_problem("vllm/vllm-openai:kimi-k3", {FABRIC})
    assert problem is not None and problem.startswith("serving.image: vllm/vllm-openai:kimi-k3 lacks " + PLUGIN)


@pytest.fixture
def registry_tool() -> Iterator[None]:
    with patched_environ({REGISTRY_TOOL_ENV: registry_tool_command()}):
        yield


def test_the_images_files_are_read_from_its_export(registry_tool: None) -> None:
    assert image_efa_stack.fn("vllm/vllm-openai:kimi-k3") == set()
    assert image_efa_stack.fn("capserve/vllm-openai-efa:kimi-k3") == {PLUGIN, FABRIC}
    with pytest.raises(PermanentError, match="could not be listed: .*MANIFEST_UNKNOWN"):
        image_efa_stack.fn("vllm/vllm-openai:no-such-tag")


def test_the_sandbox_knows_an_images_files_by_tag_and_by_the_digest_its_ecr_copy_keeps() -> None:
    from capserve_sandbox.registry import digest_of, upstream

    digest = digest_of(upstream()["docker.io/capserve/vllm-openai-efa"]["kimi-k3"])
    mirrored = f"123456789012.dkr.ecr.us-east-2.amazonaws.com/capserve/c/capserve/vllm-openai-efa@{digest}"
    assert efa_stack_found(image_files(mirrored)) == {PLUGIN, FABRIC}
    assert efa_stack_found(image_files("vllm/vllm-openai:kimi-k3")) == set()
    assert image_files("example.com/unknown:1") == ()
