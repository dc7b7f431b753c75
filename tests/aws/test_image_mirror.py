"""The image stage's task against the sandbox's ECR (moto + capserve's ECR extension) and its registry stand-in."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import boto3
import pytest
from capserve_sandbox.aws import moto_sandbox, patched_environ
from capserve_sandbox.registry import registry_tool_command, upstream

from capserve.core.environ import REGISTRY_TOOL_ENV
from capserve.core.errors import PermanentError
from capserve.core.tags import CAMPAIGN_TAG
from capserve.core.teardown.plan import Phase, plan_teardown
from capserve.core.teardown.settings import TeardownSettings
from capserve.tasks.image_mirror import mirror_image
from capserve.tasks.teardown.execute import execute_plan
from capserve.tasks.teardown.inventory import inventory_campaign
from capserve.tasks.teardown.sightings import find_campaigns

REGION = "us-east-2"
IMAGE = "vllm/vllm-openai:kimi-k3"
FAST = TeardownSettings(poll_seconds=0, dependency_retry_timeout_s=0, delete_workloads=False)


@pytest.fixture(scope="module")
def sandbox() -> Iterator[None]:
    with moto_sandbox(REGION), patched_environ({REGISTRY_TOOL_ENV: registry_tool_command()}):
        yield


def upstream_digest() -> str:
    manifest = upstream()["docker.io/vllm/vllm-openai"]["kimi-k3"]
    return "sha256:" + hashlib.sha256(manifest).hexdigest()


def test_the_image_is_copied_once_and_pulled_by_its_upstream_digest(sandbox: None) -> None:
    first = mirror_image.fn("img-a", IMAGE, REGION)

    digest = upstream_digest()
    assert first.digest == digest and first.copied
    assert first.created == ("ecr-repository/capserve/img-a/vllm/vllm-openai",)
    assert first.image == f"123456789012.dkr.ecr.{REGION}.amazonaws.com/capserve/img-a/vllm/vllm-openai@{digest}"
    ecr = boto3.client("ecr", region_name=REGION)
    [held] = ecr.describe_images(repositoryName=first.repository)["imageDetails"]
    assert held["imageDigest"] == digest and held["imageTags"] == [f"kimi-k3-{digest[7:19]}"]
    assert first.size_bytes == held["imageSizeInBytes"] == 20 * 10**9

    again = mirror_image.fn("img-a", IMAGE, REGION)  # a re-run: nothing created, nothing copied
    assert (again.created, again.copied, again.image) == ((), False, first.image)
    assert len(ecr.describe_images(repositoryName=first.repository)["imageDetails"]) == 1


def test_a_tag_the_upstream_does_not_have_fails_before_the_block_naming_it(sandbox: None) -> None:
    with pytest.raises(PermanentError, match="image resolve .*MANIFEST_UNKNOWN.*no-such-tag. Check serving.image"):
        mirror_image.fn("img-b", "vllm/vllm-openai:no-such-tag", REGION)


def test_a_same_named_repository_of_someone_else_is_refused(sandbox: None) -> None:
    ecr = boto3.client("ecr", region_name=REGION)
    ecr.create_repository(repositoryName="capserve/img-c/vllm/vllm-openai", tags=[{"Key": CAMPAIGN_TAG, "Value": "x"}])
    with pytest.raises(PermanentError, match="exists but is not tagged capserve.io/campaign=img-c"):
        mirror_image.fn("img-c", IMAGE, REGION)


def test_teardown_lists_and_deletes_the_campaigns_repository_with_its_image(sandbox: None) -> None:
    made = mirror_image.fn("img-d", IMAGE, REGION)

    assert find_campaigns.fn(REGION)["img-d"] == [f"ecr-repository/{made.repository}"]  # the reaper sees it
    inventory = inventory_campaign.fn("img-d", REGION, kind="eks", settings=FAST)
    assert [r.name for r in inventory.ecr_repositories] == [made.repository] and not inventory.is_empty
    plan = plan_teardown(inventory, FAST)
    [step] = [s for s in plan.steps if s.phase is Phase.REGISTRY]
    assert (step.operation, step.params) == ("delete_repository", {"repositoryName": made.repository, "force": True})
    execute_plan.fn(plan, FAST)

    ecr = boto3.client("ecr", region_name=REGION)
    names = [r["repositoryName"] for r in ecr.describe_repositories()["repositories"]]
    assert made.repository not in names
    assert inventory_campaign.fn("img-d", REGION, kind="eks", settings=FAST).ecr_repositories == ()


def test_a_digest_the_spec_pins_is_copied_as_it_is(sandbox: None) -> None:
    digest = upstream_digest()
    made = mirror_image.fn("img-e", f"vllm/vllm-openai@{digest}", REGION)
    assert (made.digest, made.copied) == (digest, True)
    assert made.image.endswith(f"/capserve/img-e/vllm/vllm-openai@{digest}")
